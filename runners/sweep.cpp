#include "runners/sweep.h"

#define TOML_HEADER_ONLY 1
#include <toml++/toml.h>

#include <algorithm>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/spec.h"
#include "runners/train_config.h"

namespace pb {
namespace {

struct Dim {               // one list of the product
  std::string key;         // option ("layers"), "task", "seed" or a spec key ("task.len")
  std::vector<std::string> values;
};

struct Setting {           // one fixed value
  std::string key;
  std::string value;
};

struct Context {
  const std::string& path;
  const OptionKinds& options;
  std::string where(const toml::node& n, std::string_view section, std::string_view key) const {
    return fmt::format("{}:{}: [{}] {}", path, n.source().begin.line, section, key);
  }
};

const char* type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "a list";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

// A scalar as a command-line value; kind 'i' integer, 'f' number, 's' string, '?' any scalar.
std::string scalar(const toml::node& n, char kind, const std::string& where) {
  const char* want = kind == 'i' ? "an integer" : kind == 'f' ? "a number" : kind == 's' ? "a string"
                                                                                         : "a value";
  if (auto i = n.as_integer(); i && kind != 's') return std::to_string(i->get());
  if (auto f = n.as_floating_point(); f && (kind == 'f' || kind == '?')) return fmt::format("{}", f->get());
  if (auto s = n.as_string(); s && (kind == 's' || kind == '?')) return s->get();
  if (auto b = n.as_boolean(); b && kind == '?') return b->get() ? "true" : "false";
  fail("{}: expected {}, got {}", where, want, type_name(n));
}

std::string valid_keys(const OptionKinds& options) {
  std::string s;
  for (const auto& [name, kind] : options) {
    if (name == "seed" || name == "out" || name == "threads") continue;
    std::string key = name;
    std::replace(key.begin(), key.end(), '-', '_');
    s += (s.empty() ? "" : ", ") + key;
  }
  return s + ", task.KEY, pe.KEY";
}

// Kind of option `key` (underscores), or a pb::Error naming the place.
char option_kind(const Context& c, const toml::node& n, std::string_view section, const std::string& key) {
  std::string name = key;
  std::replace(name.begin(), name.end(), '_', '-');
  if (name == "seed") fail("{}: list the seeds as `seeds` in [sweep]", c.where(n, section, key));
  if (name == "out" || name == "threads")
    fail("{}: set by the sweep itself (--out, --jobs)", c.where(n, section, key));
  auto it = c.options.find(name);
  if (it == c.options.end() || key.find('-') != std::string::npos)
    fail("{}: unknown key; valid keys: {}", c.where(n, section, key), valid_keys(c.options));
  return it->second;
}

// The entries of [base] or [grid] in file order, dotted spec keys flattened to "task.KEY".
std::vector<std::pair<std::string, const toml::node*>> entries(const Context& c, const toml::table& t,
                                                                std::string_view section) {
  std::vector<std::pair<std::string, const toml::node*>> out;
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    if (const auto* sub = v.as_table()) {
      if (key != "task" && key != "pe")
        fail("{}: unknown key; only task.KEY and pe.KEY may be dotted", c.where(v, section, key));
      for (const auto& [k2, v2] : *sub) {
        if (v2.is_table()) fail("{}: too many dots", c.where(v2, section, key + "." + std::string(k2.str())));
        out.emplace_back(key + "." + std::string(k2.str()), &v2);
      }
    } else {
      out.emplace_back(key, &v);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    const auto sa = a.second->source().begin, sb = b.second->source().begin;
    return sa.line != sb.line ? sa.line < sb.line : sa.column < sb.column;
  });
  return out;
}

char kind_of(const Context& c, const toml::node& n, std::string_view section, const std::string& key) {
  if (key == "task" || key == "pe") return 's';
  if (key.rfind("task.", 0) == 0 || key.rfind("pe.", 0) == 0) return '?';
  return option_kind(c, n, section, key);
}

std::string check_name(const toml::node* n, const std::string& path) {
  const auto* s = n ? n->as_string() : nullptr;
  if (!s) fail("{}: [sweep] needs name = \"...\" (the directory name of its runs)", path);
  const std::string& name = s->get();
  const bool ok = !name.empty() && name[0] != '.' && std::all_of(name.begin(), name.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.';
  });
  if (!ok) fail("{}:{}: [sweep] name '{}': use letters, digits, '_', '-', '.'", path, n->source().begin.line, name);
  return name;
}

// toml++ 3.3.0 (Debian 12's) reaches __builtin_unreachable, undefined behaviour, when it tests some
// non-ASCII code points for whitespace (U+00A7 after a key, a line continuation in a """ string;
// upstream issues 190 and 295, found here by fuzz/fuzz_sweep.cpp). Sweep files are ASCII but for
// their comments, so a non-ASCII byte anywhere else is an error before toml++ reads the text. The
// scan knows strings ("...", '...', and their triple-quoted forms) only to tell a '#' in one from
// a comment.
void check_ascii(std::string_view text, const std::string& path) {
  int line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') ++line;
    if (c == '#') {  // a comment, to the end of the line
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
    } else if (c == '"' || c == '\'') {  // a string: to its closing quote(s), escapes skipped in "..."
      const bool triple = text.substr(i, 3) == std::string(3, c);
      const std::string close(triple ? 3 : 1, c);
      size_t end = i + close.size();
      while (end < text.size() && text.substr(end, close.size()) != close && (triple || text[end] != '\n')) {
        if (c == '"' && text[end] == '\\') ++end;
        ++end;
      }
      for (size_t j = i; j < std::min(end, text.size()); ++j) {
        if (static_cast<unsigned char>(text[j]) >= 0x80)
          fail("{}:{}: a non-ASCII character in a string (sweep files are ASCII but for comments)", path, line);
        line += text[j] == '\n';
      }
      const bool closed = end < text.size() && text.substr(end, close.size()) == close;
      i = closed ? end + close.size() - 1 : end - 1;  // an unclosed string is toml++'s error to give
    } else if (static_cast<unsigned char>(c) >= 0x80) {
      fail("{}:{}: a non-ASCII character outside a comment (sweep files are ASCII but for comments)", path, line);
    }
  }
}

toml::table parse_toml(std::string_view text, const std::string& path) {
  check_ascii(text, path);
  try {
    return toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    fail("{}:{}:{}: {}", path, e.source().begin.line, e.source().begin.column, e.description());
  }
}

}  // namespace

Sweep parse_sweep(std::string_view text, const std::string& path, const OptionKinds& options) {
  const toml::table doc = parse_toml(text, path);
  const Context c{path, options};
  for (const auto& [k, v] : doc)
    if (k != "sweep" && k != "base" && k != "grid")
      fail("{}:{}: unknown section or key '{}'; valid sections: [sweep], [base], [grid]", path,
           v.source().begin.line, k.str());
  const auto* head = doc["sweep"].as_table();
  if (!head) fail("{}: missing [sweep] section (name, task, seeds)", path);
  static const toml::table kEmpty;
  const auto* base = doc["base"].is_table() ? doc["base"].as_table() : &kEmpty;
  const auto* grid = doc["grid"].is_table() ? doc["grid"].as_table() : &kEmpty;
  for (const char* s : {"base", "grid"})
    if (doc.contains(s) && !doc[s].is_table()) fail("{}: '{}' must be a section [{}]", path, s, s);

  Sweep sweep;
  std::vector<Dim> dims;
  std::vector<Setting> fixed;
  std::string outer;  // [sweep] outer
  for (const auto& [k, v] : *head) {
    const std::string key(k.str());
    if (key == "name") continue;
    if (key == "depth_search") {
      const auto* rule = v.as_string();
      if (!rule) fail("{}: expected a string SPLIT:METRIC>=X", c.where(v, "sweep", key));
      sweep.depth_search = parse_stop_rule(rule->get(), c.where(v, "sweep", key)).text();
      continue;
    }
    if (key == "outer") {
      const auto* dim = v.as_string();
      if (!dim || dim->get().empty()) fail("{}: expected the name of a [grid] key", c.where(v, "sweep", key));
      outer = dim->get();
      continue;
    }
    if (key != "task" && key != "seeds")
      fail("{}: unknown key; valid keys: name, task, seeds, depth_search, outer", c.where(v, "sweep", key));
    const char kind = key == "task" ? 's' : 'i';
    Dim d{key == "task" ? "task" : "seed", {}};
    if (const auto* list = v.as_array()) {
      for (const auto& item : *list) d.values.push_back(scalar(item, kind, c.where(item, "sweep", key)));
      if (d.values.empty()) fail("{}: empty list", c.where(v, "sweep", key));
    } else {
      d.values.push_back(scalar(v, kind, c.where(v, "sweep", key)));
    }
    if (key == "task" && d.values.size() == 1) fixed.push_back({"task", d.values[0]});
    else dims.push_back(std::move(d));
  }
  sweep.name = check_name(head->get("name"), path);
  if (std::none_of(dims.begin(), dims.end(), [](const Dim& d) { return d.key == "seed"; }))
    dims.push_back({"seed", {"0"}});
  std::stable_sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) { return a.key == "seed" && b.key != "seed"; });

  auto given = [&](const std::string& key) {
    return std::any_of(fixed.begin(), fixed.end(), [&](const Setting& s) { return s.key == key; }) ||
           std::any_of(dims.begin(), dims.end(), [&](const Dim& d) { return d.key == key; });
  };
  for (const auto& [key, node] : entries(c, *base, "base")) {
    const char kind = kind_of(c, *node, "base", key);
    if (node->is_array()) fail("{}: lists go in [grid]", c.where(*node, "base", key));
    if (given(key)) fail("{}: given twice", c.where(*node, "base", key));
    fixed.push_back({key, scalar(*node, kind, c.where(*node, "base", key))});
  }
  for (const auto& [key, node] : entries(c, *grid, "grid")) {
    const char kind = kind_of(c, *node, "grid", key);
    const auto* list = node->as_array();
    if (!list) fail("{}: expected a list (a single value goes in [base])", c.where(*node, "grid", key));
    if (list->empty()) fail("{}: empty list", c.where(*node, "grid", key));
    if (given(key)) fail("{}: given twice (in [sweep], [base] or [grid])", c.where(*node, "grid", key));
    Dim d{key, {}};
    for (const auto& item : *list) d.values.push_back(scalar(item, kind, c.where(item, "grid", key)));
    dims.push_back(std::move(d));
  }
  if (!given("task")) fail("{}: no task; set task = \"NAME[:key=value,...]\" in [sweep]", path);
  if (!outer.empty()) {  // the [grid] keys follow seeds: the named one moves in front of them
    const auto it = std::find_if(dims.begin(), dims.end(), [&](const Dim& d) { return d.key == outer; });
    if (it == dims.end() || outer == "seed")
      fail("{}: '{}' is not a [grid] key", c.where(*head->get("outer"), "sweep", "outer"), outer);
    std::rotate(dims.begin(), it, it + 1);
  }
  const size_t seed_at = static_cast<size_t>(
      std::find_if(dims.begin(), dims.end(), [](const Dim& d) { return d.key == "seed"; }) - dims.begin());
  if (!sweep.depth_search.empty() && std::none_of(dims.begin(), dims.end(), [](const Dim& d) { return d.key == "layers"; }))
    fail("{}: [sweep] depth_search needs a list of layers in [grid]", path);
  for (const std::string spec : {"task", "pe"}) {
    auto dotted = [&](const std::string& key) { return key.rfind(spec + ".", 0) == 0; };
    if (!given(spec) && (std::any_of(fixed.begin(), fixed.end(), [&](const Setting& s) { return dotted(s.key); }) ||
                         std::any_of(dims.begin(), dims.end(), [&](const Dim& d) { return dotted(d.key); })))
      fail("{}: {}.KEY given without {}", path, spec, spec);
  }

  // The product is expanded in memory (and every run resolved): refuse one no machine would run.
  constexpr double kMaxRuns = 1e6;
  double n_runs = 1;
  for (const Dim& d : dims) n_runs *= double(d.values.size());
  if (n_runs > kMaxRuns) fail("{}: the grid has {:.3g} runs; at most {:.0f} per sweep file", path, n_runs, kMaxRuns);
  std::vector<size_t> at(dims.size(), 0);
  for (bool more = true; more;) {
    std::vector<Setting> settings = fixed;
    std::string label;
    std::map<std::string, std::string> values;
    for (size_t d = 0; d < dims.size(); ++d) {
      settings.push_back({dims[d].key, dims[d].values[at[d]]});
      values[dims[d].key] = dims[d].values[at[d]];
      if (dims[d].values.size() > 1 || dims[d].key == "seed")
        label += (label.empty() ? "" : " ") + dims[d].key + "=" + dims[d].values[at[d]];
    }
    std::map<std::string, std::string> specs;  // "task" / "pe" -> spec with appended keys
    std::vector<std::string> args;
    for (const auto& s : settings)
      if (s.key == "task" || s.key == "pe") specs[s.key] = s.value;
    for (const auto& s : settings) {
      const auto dot = s.key.find('.');
      if (dot == std::string::npos) continue;
      std::string& spec = specs[s.key.substr(0, dot)];
      spec += fmt::format("{}{}={}", spec.find(':') == std::string::npos ? ':' : ',', s.key.substr(dot + 1), s.value);
    }
    const auto seed =
        std::find_if(settings.begin(), settings.end(), [](const Setting& s) { return s.key == "seed"; });
    for (const auto& s : settings) {
      if (s.key.find('.') != std::string::npos) continue;
      std::string name = s.key;
      std::replace(name.begin(), name.end(), '_', '-');
      args.push_back("--" + name);
      args.push_back(specs.count(s.key) ? specs[s.key] : s.value);
      if (s.key == "init_from")  // a source per seed: `{seed}` is the run's seed
        for (size_t at = 0; (at = args.back().find("{seed}", at)) != std::string::npos;)
          args.back().replace(at, 6, seed->value);
    }
    size_t rank = 0;  // mixed radix over the dimensions up to seeds
    for (size_t d = 0; d <= seed_at; ++d) rank = rank * dims[d].values.size() + at[d];
    sweep.runs.push_back({std::move(args), std::move(label), std::move(values), rank});
    more = false;
    for (size_t d = dims.size(); d-- > 0;) {
      if (++at[d] < dims[d].values.size()) {
        more = true;
        break;
      }
      at[d] = 0;
    }
  }
  return sweep;
}

OptionKinds train_option_kinds() {
  CLI::App scratch;
  TrainConfig cfg;
  add_train_options(scratch, cfg);
  OptionKinds kinds;
  for (const CLI::Option* opt : scratch.get_options()) {
    if (opt->get_expected_min() == 0) continue;  // flags (--help)
    const std::string type = opt->get_type_name();
    const char kind = type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0 ? 'i'
                      : type.rfind("FLOAT", 0) == 0                          ? 'f'
                      : type.rfind("TEXT", 0) == 0                           ? 's'
                                                                             : '?';
    for (const auto& name : opt->get_lnames()) kinds[name] = kind;
  }
  return kinds;
}

TrainConfig config_of(const std::vector<std::string>& args) {
  CLI::App scratch;
  TrainConfig cfg;
  add_train_options(scratch, cfg);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them reversed
  try {
    scratch.parse(reversed);
  } catch (const CLI::ParseError& e) {
    fail("{}", e.what());
  }
  resolve(cfg);
  return cfg;
}

std::vector<size_t> shard_indices(size_t n_runs, std::string_view shard) {
  const auto slash = shard.find('/');
  int64_t i = -1, n = 0;
  if (slash == std::string_view::npos || !parse_int(shard.substr(0, slash), i) ||
      !parse_int(shard.substr(slash + 1), n) || n < 1 || i < 0 || i >= n)
    fail("--shard '{}': expected i/n with 0 <= i < n (e.g. 0/4)", shard);
  std::vector<size_t> out;
  for (size_t r = static_cast<size_t>(i); r < n_runs; r += static_cast<size_t>(n)) out.push_back(r);
  return out;
}

namespace {

bool same_value(const std::string& a, const std::string& b) {
  double x = 0, y = 0;
  return a == b || (parse_float(a, x) && parse_float(b, y) && x == y);
}

}  // namespace

std::vector<size_t> select_runs(const Sweep& sweep, const std::vector<std::string>& only) {
  std::vector<size_t> picked;
  for (size_t i = 0; i < sweep.runs.size(); ++i) picked.push_back(i);
  if (sweep.runs.empty()) return picked;
  const auto& keys = sweep.runs.front().values;  // every run has the same keys
  for (const std::string& filter : only) {
    const size_t eq = filter.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == filter.size())
      fail("--only '{}': expected KEY=VALUE[,VALUE...] (e.g. pe=rope,path)", filter);
    const std::string key = filter.substr(0, eq);
    if (!keys.count(key)) {
      std::vector<std::string> names;
      for (const auto& [k, v] : keys) names.push_back(k);
      fail("--only '{}': '{}' is not a list of the sweep; its lists: {}", filter, key, fmt::join(names, ", "));
    }
    const std::vector<std::string> wanted = split_commas(std::string_view(filter).substr(eq + 1));
    for (const std::string& w : wanted)
      if (std::none_of(sweep.runs.begin(), sweep.runs.end(),
                       [&](const SweepRun& r) { return same_value(r.values.at(key), w); }))
        fail("--only '{}': no run of the sweep has {}={}", filter, key, w);
    std::erase_if(picked, [&](size_t i) {
      return std::none_of(wanted.begin(), wanted.end(),
                          [&](const std::string& w) { return same_value(sweep.runs[i].values.at(key), w); });
    });
  }
  return picked;
}

}  // namespace pb
