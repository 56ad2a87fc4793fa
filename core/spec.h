// Specs are strings: NAME[:key=value,...] names a task or a position encoding with its
// parameters (README.md, "Commands"). A Schema lists the valid keys with defaults;
// resolving a spec against it checks every key and value and yields the canonical form
// (all keys, schema order, defaults filled in), used in run ids, CSV columns and file headers.
// A key added after runs were published is marked `omit_default`: the canonical form leaves it
// out while it has its default value, so the ids of those runs stay as they were.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace pb {

enum class ParamType { Int, Float, String };

struct ParamDef {
  std::string key;
  ParamType type;
  std::string default_value;
  std::string doc;
  std::vector<std::string> choices;  // String params: allowed values (empty = any)
  bool omit_default = false;         // left out of the canonical form at its default
};

struct Schema {
  std::string name;
  std::string doc;
  std::vector<ParamDef> params;
};

// A spec resolved against its schema: every key present, values validated.
class Spec {
 public:
  const std::string& name() const { return name_; }
  std::string canonical() const;  // "name:k1=v1,k2=v2" in schema order ("name" if no params)
                                  // (without omit_default keys at their defaults)
  int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  const std::vector<std::pair<std::string, std::string>>& items() const { return items_; }

  friend Spec resolve_spec(std::string_view text, const std::vector<Schema>& schemas,
                           std::string_view what);

 private:
  std::string name_;
  std::vector<std::pair<std::string, std::string>> items_;  // schema order, every key
  std::vector<bool> in_canonical_;                          // per item of items_
  const std::string& raw(std::string_view key) const;
};

// Parses `text` ("name[:k=v,...]"), finds the schema by name among `schemas` and checks keys and
// values. `what` names the kind of thing ("task", "position encoding") in error messages, which
// list the valid names or keys.
Spec resolve_spec(std::string_view text, const std::vector<Schema>& schemas, std::string_view what);

// The "key=value" items of a spec's text, in their order, split without a schema or any check
// (items without '=' are skipped): for specs read back from files, which this build may not
// resolve.
std::vector<std::pair<std::string, std::string>> spec_items(std::string_view text);

// Number parsing shared by specs and file readers: the whole string must be a number.
bool parse_int(std::string_view s, int64_t& out);
bool parse_float(std::string_view s, double& out);

// The items of a comma-separated list, empty ones kept: "a,,b" -> {"a", "", "b"}, "" -> {""}.
std::vector<std::string> split_commas(std::string_view text);

}  // namespace pb
