#include "core/spec.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"

namespace pb {

bool parse_int(std::string_view s, int64_t& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool parse_float(std::string_view s, double& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && std::isfinite(out);
}

std::vector<std::string> split_commas(std::string_view text) {
  std::vector<std::string> items;
  for (size_t at = 0; at <= text.size();) {
    const size_t end = std::min(text.find(',', at), text.size());
    items.emplace_back(text.substr(at, end - at));
    at = end + 1;
  }
  return items;
}

static std::string join_keys(const std::vector<ParamDef>& params) {
  std::string s;
  for (const auto& p : params) s += (s.empty() ? "" : ", ") + p.key;
  return s.empty() ? "(none)" : s;
}

// `value` of key p checked against its type and choices, in its canonical spelling ("0.80" and "0.8"
// are one float, "07" and "7" one integer).
static std::string canonical_value(const ParamDef& p, const std::string& value, std::string_view what,
                                   const std::string& name) {
  int64_t i;
  double f;
  if (p.type == ParamType::Int) {
    if (!parse_int(value, i)) fail("{} '{}': key '{}' needs an integer, got '{}'", what, name, p.key, value);
    return std::to_string(i);
  }
  if (p.type == ParamType::Float) {
    if (!parse_float(value, f)) fail("{} '{}': key '{}' needs a number, got '{}'", what, name, p.key, value);
    return fmt::format("{}", f);
  }
  if (!p.choices.empty()) {
    bool ok = false;
    std::string list;
    for (const auto& c : p.choices) ok |= c == value, list += (list.empty() ? "" : ", ") + c;
    if (!ok) fail("{} '{}': key '{}' must be one of {}, got '{}'", what, name, p.key, list, value);
  }
  return value;
}

std::vector<std::pair<std::string, std::string>> spec_items(std::string_view text) {
  std::vector<std::pair<std::string, std::string>> items;
  const auto colon = text.find(':');
  for (size_t i = colon; i != std::string_view::npos && i < text.size();) {
    const size_t end = std::min(text.find(',', i + 1), text.size());
    const std::string_view item = text.substr(i + 1, end - i - 1);
    if (const auto eq = item.find('='); eq != std::string_view::npos)
      items.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    i = end;
  }
  return items;
}

Spec resolve_spec(std::string_view text, const std::vector<Schema>& schemas, std::string_view what) {
  const auto colon = text.find(':');
  const std::string name(text.substr(0, colon));
  const Schema* schema = nullptr;
  for (const auto& s : schemas)
    if (s.name == name) schema = &s;
  if (!schema) {
    std::string names;
    for (const auto& s : schemas) names += (names.empty() ? "" : ", ") + s.name;
    fail("unknown {} '{}'; valid: {}", what, name, names);
  }
  std::map<std::string, std::string, std::less<>> given;
  if (colon != std::string_view::npos) {
    std::string_view rest = text.substr(colon + 1);
    while (!rest.empty()) {
      const auto comma = rest.find(',');
      const std::string_view item = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      const auto eq = item.find('=');
      if (eq == std::string_view::npos || eq == 0)
        fail("{} spec '{}': expected key=value, got '{}'", what, text, item);
      std::string key(item.substr(0, eq)), value(item.substr(eq + 1));
      bool known = false;
      for (const auto& p : schema->params) known |= p.key == key;
      if (!known)
        fail("unknown key '{}' for {} '{}'; valid keys: {}", key, what, name, join_keys(schema->params));
      if (!given.emplace(key, value).second) fail("{} spec '{}': key '{}' given twice", what, text, key);
    }
  }
  Spec spec;
  spec.name_ = name;
  for (const auto& p : schema->params) {
    auto it = given.find(p.key);
    const std::string value = canonical_value(p, it == given.end() ? p.default_value : it->second, what, name);
    spec.items_.emplace_back(p.key, value);
    spec.in_canonical_.push_back(!p.omit_default || value != canonical_value(p, p.default_value, what, name));
  }
  return spec;
}

std::string Spec::canonical() const {
  std::string s = name_;
  for (size_t i = 0; i < items_.size(); ++i)
    if (in_canonical_[i]) s += (s == name_ ? ":" : ",") + items_[i].first + "=" + items_[i].second;
  return s;
}

const std::string& Spec::raw(std::string_view key) const {
  for (const auto& [k, v] : items_)
    if (k == key) return v;
  fail("internal: spec '{}' has no key '{}'", name_, key);
}

int64_t Spec::get_int(std::string_view key) const {
  int64_t v = 0;
  parse_int(raw(key), v);
  return v;
}

double Spec::get_float(std::string_view key) const {
  double v = 0;
  parse_float(raw(key), v);
  return v;
}

const std::string& Spec::get_string(std::string_view key) const { return raw(key); }

}  // namespace pb
