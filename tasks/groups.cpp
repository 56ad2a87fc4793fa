// Permutation groups built as the closure of a few generators, then sorted lexicographically and
// tabulated. Small by design (order ≤ 120), so clarity beats speed here; the task only reads the
// multiplication table.
#include "tasks/groups.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "core/error.h"

namespace pb {

namespace {

struct GroupDef {
  std::string name;
  int degree;
  std::vector<std::vector<int>> generators;  // each a cycle on the points
};

// a5: a 3-cycle and a 5-cycle generate A5; s5: a transposition and a 5-cycle; a4xz5: A4 on points
// 0..3 (two 3-cycles) times Z5 rotating points 4..8; z60: the rotation x -> x+1 of 60 points.
const std::vector<GroupDef>& group_defs() {
  static const std::vector<GroupDef> k = {
      {"a5", 5, {{0, 1, 2}, {0, 1, 2, 3, 4}}},
      {"s5", 5, {{0, 1}, {0, 1, 2, 3, 4}}},
      {"a4xz5", 9, {{0, 1, 2}, {1, 2, 3}, {4, 5, 6, 7, 8}}},
      {"z60", 60, {[] { std::vector<int> c(60); std::iota(c.begin(), c.end(), 0); return c; }()}},
  };
  return k;
}

Perm cycle_perm(int degree, const std::vector<int>& cycle) {
  Perm p(degree);
  std::iota(p.begin(), p.end(), 0);
  for (size_t i = 0; i < cycle.size(); ++i) p[cycle[i]] = static_cast<uint8_t>(cycle[(i + 1) % cycle.size()]);
  return p;
}

Perm compose_perm(const Perm& a, const Perm& b) {  // (a ∘ b)(x) = a(b(x))
  Perm c(a.size());
  for (size_t x = 0; x < a.size(); ++x) c[x] = a[b[x]];
  return c;
}

}  // namespace

const std::vector<std::string>& PermGroup::group_names() {
  static const std::vector<std::string> k = [] {
    std::vector<std::string> names;
    for (const auto& d : group_defs()) names.push_back(d.name);
    return names;
  }();
  return k;
}

PermGroup PermGroup::make(std::string_view name) {
  const GroupDef* def = nullptr;
  for (const auto& d : group_defs())
    if (d.name == name) def = &d;
  if (!def) {
    std::string list;
    for (const auto& n : group_names()) list += (list.empty() ? "" : ", ") + n;
    fail("unknown group '{}'; valid: {}", name, list);
  }
  std::vector<Perm> gens;
  for (const auto& c : def->generators) gens.push_back(cycle_perm(def->degree, c));
  // Closure: breadth-first products element ∘ generator until nothing new appears.
  std::map<Perm, int> seen;
  std::vector<Perm> frontier = {cycle_perm(def->degree, {})};
  seen.emplace(frontier[0], 0);
  while (!frontier.empty()) {
    std::vector<Perm> next;
    for (const auto& p : frontier)
      for (const auto& g : gens) {
        Perm q = compose_perm(p, g);
        if (seen.emplace(q, 0).second) next.push_back(std::move(q));
      }
    frontier = std::move(next);
  }
  PermGroup g;
  g.name_ = def->name;
  g.degree_ = def->degree;
  for (auto& [p, id] : seen) id = static_cast<int>(g.elements_.size()), g.elements_.push_back(p);
  const int n = g.order();
  g.table_.resize(size_t(n) * n);
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      g.table_[size_t(a) * n + b] = static_cast<uint8_t>(seen.at(compose_perm(g.elements_[a], g.elements_[b])));
  return g;
}

std::string PermGroup::element_name(int id) const {
  if (id == 0) return "e";
  const Perm& p = elements_[id];
  if (name_ == "z60") return fmt::format("z{}", p[0]);
  std::string s;
  std::vector<bool> done(p.size());
  for (size_t start = 0; start < p.size(); ++start) {
    if (done[start] || p[start] == start) continue;
    s += fmt::format("({}", start);
    done[start] = true;
    for (size_t x = p[start]; x != start; x = p[x]) s += fmt::format(" {}", x), done[x] = true;
    s += ")";
  }
  return s;
}

}  // namespace pb
