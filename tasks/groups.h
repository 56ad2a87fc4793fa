// Finite groups as permutation groups, for the word-problem task: a5, s5, a4xz5, z60.
// Elements are numbered by the lexicographic order of their image arrays (identity = 0), and
// compose(a, b) = a ∘ b with ∘ applying the right factor first: (a ∘ b)(x) = a(b(x)).
// tasks/README.md documents each group's points and generators.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pb {

using Perm = std::vector<uint8_t>;  // (degree,) image of each point 0..degree-1

class PermGroup {
 public:
  // Builds a group by name (one of group_names()); pb::Error listing the valid names otherwise.
  static PermGroup make(std::string_view name);
  static const std::vector<std::string>& group_names();

  const std::string& name() const { return name_; }
  int order() const { return static_cast<int>(elements_.size()); }
  int degree() const { return degree_; }
  const Perm& element(int id) const { return elements_[id]; }
  int compose(int a, int b) const { return table_[a * order() + b]; }  // id of a ∘ b
  std::string element_name(int id) const;  // "e", cycle notation "(0 1 2)", or "z17" for z60

 private:
  std::string name_;
  int degree_ = 0;
  std::vector<Perm> elements_;    // (order,) lexicographic, identity first
  std::vector<uint8_t> table_;    // (order, order) table_[a*order + b] = a ∘ b
};

}  // namespace pb
