#include "runners/results.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/spec.h"
#include "models/position/position_encoding.h"

namespace pb {
namespace {

std::string_view name_of(std::string_view spec) { return spec.substr(0, spec.find(':')); }

// The legend order is the registry's; names not registered (runs of an older build) come after.
size_t encoding_rank(std::string_view spec) {
  const auto& all = encodings();
  for (size_t i = 0; i < all.size(); ++i)
    if (name_of(spec) == all[i].schema.name) return i;
  return all.size();
}

// Columns that hold measurements rather than settings, left out of "rows differ in" messages.
bool is_measure(const std::string& c) {
  static const char* kMeasures[] = {"run_id", "status", "error", "step", "n", "n_seqs", "acc", "seq_acc",
                                    "error_rate", "acc_ci_low", "acc_ci_high", "loss", "final_loss", "wall_s",
                                    "commit", "gpu_name", "device"};
  for (const char* m : kMeasures)
    if (c == m) return true;
  return is_accuracy(c);  // acc_<split>, seq_acc_<split> of runs.csv
}

// The length of the number (digits, an optional fraction, an optional exponent) at s[at], which is
// a digit.
size_t number_length(std::string_view s, size_t at) {
  auto digits = [&](size_t i) {
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    return i;
  };
  size_t end = digits(at);
  if (end + 1 < s.size() && s[end] == '.' && std::isdigit(static_cast<unsigned char>(s[end + 1])))
    end = digits(end + 1);
  if (end + 1 < s.size() && (s[end] == 'e' || s[end] == 'E')) {
    const size_t sign = end + 1 < s.size() && (s[end + 1] == '+' || s[end + 1] == '-') ? end + 2 : end + 1;
    if (sign < s.size() && std::isdigit(static_cast<unsigned char>(s[sign]))) end = digits(sign);
  }
  return end - at;
}

// -1, 0 or 1: `a` and `b` as runs of text and numbers, numbers compared by value and before text.
int natural_compare(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i])), db = std::isdigit(static_cast<unsigned char>(b[j]));
    if (da && db) {
      const size_t la = number_length(a, i), lb = number_length(b, j);
      double x = 0, y = 0;
      parse_float(a.substr(i, la), x);
      parse_float(b.substr(j, lb), y);
      if (x != y) return x < y ? -1 : 1;
      i += la, j += lb;
    } else if (da != db) {
      return da ? -1 : 1;
    } else {
      if (a[i] != b[j]) return a[i] < b[j] ? -1 : 1;
      ++i, ++j;
    }
  }
  if (i < a.size() || j < b.size()) return i < a.size() ? 1 : -1;
  return 0;
}

}  // namespace

EncodingStyle encoding_style(std::string_view pe_name) {
  const size_t r = encoding_rank(pe_name);
  if (r < encodings().size() && encodings()[r].info.style.colour) {
    const PlotStyle& s = encodings()[r].info.style;
    return {s.colour, s.sides, s.rotation, ""};
  }
  uint64_t h = 1469598103934665603ULL;  // FNV-1a: the same colour on every machine
  for (char c : name_of(pe_name)) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  const double hue = static_cast<double>(h % 360), s = 0.6, l = 0.42;
  auto channel = [&](double n) {
    const double k = std::fmod(n + hue / 30, 12), a = s * std::min(l, 1 - l);
    return static_cast<int>(std::lround(255 * (l - a * std::max(-1.0, std::min({k - 3, 9 - k, 1.0})))));
  };
  const int sides[] = {0, 3, 4, 5, 6};
  return {fmt::format("#{:02x}{:02x}{:02x}", channel(0), channel(8), channel(4)), sides[(h >> 20) % 5],
          (h >> 32) % 2 ? 180.0 : 0.0, ""};
}

std::vector<EncodingStyle> encoding_styles(const std::vector<std::string>& pes) {
  static const int kSides[] = {0, 3, 4, 5, 6};
  std::vector<EncodingStyle> out;
  for (size_t i = 0; i < pes.size(); ++i) {
    EncodingStyle s = encoding_style(pes[i]);
    const int k = int(std::count_if(pes.begin(), pes.begin() + i, [&](const std::string& p) {
      return name_of(p) == name_of(pes[i]);
    }));  // earlier specs of this name
    if (k > 0) {
      // Odd k toward black, even k toward white, further with each pair: c + t (target − c).
      const double t = std::min(0.7, 0.35 * ((k + 1) / 2)), target = k % 2 ? 0.0 : 255.0;
      unsigned rgb[3];
      std::sscanf(s.colour.c_str(), "#%02x%02x%02x", &rgb[0], &rgb[1], &rgb[2]);
      for (unsigned& c : rgb) c = unsigned(std::lround(c + t * (target - c)));
      s.colour = fmt::format("#{:02x}{:02x}{:02x}", rgb[0], rgb[1], rgb[2]);
      const size_t base = std::find(std::begin(kSides), std::end(kSides), s.sides) - std::begin(kSides);
      s.sides = kSides[(base + size_t(k)) % 5];
      s.dash = k % 2 ? "5,3" : "2,2";
    }
    out.push_back(s);
  }
  return out;
}

std::string stroke(const EncodingStyle& style, double width) {
  return fmt::format("stroke=\"{}\" stroke-width=\"{}\"{}", style.colour, width,
                     style.dash.empty() ? "" : fmt::format(" stroke-dasharray=\"{}\"", style.dash));
}

bool value_less(std::string_view column, const std::string& a, const std::string& b) {
  if (column == "pe" || column == "pe_name") {
    const size_t ra = encoding_rank(a), rb = encoding_rank(b);
    if (ra != rb) return ra < rb;
  }
  double x, y;
  const bool na = parse_float(a, x), nb = parse_float(b, y);
  if (na && nb && x != y) return x < y;
  if (na != nb) return na;
  if (const int c = natural_compare(a, b)) return c < 0;
  return a < b;
}

std::vector<std::string> labels(std::string_view column, const std::vector<std::string>& values) {
  if (column != "pe" && column != "task" && column != "train_task") return values;
  // The items of each spec; an item is shown unless every spec of the same name has it.
  std::vector<std::vector<std::pair<std::string, std::string>>> items;
  for (const auto& v : values) items.push_back(spec_items(v));
  auto shared = [&](size_t i, const std::pair<std::string, std::string>& item) {
    for (size_t j = 0; j < values.size(); ++j)
      if (name_of(values[j]) == name_of(values[i]) &&
          std::find(items[j].begin(), items[j].end(), item) == items[j].end())
        return false;
    return true;
  };
  std::vector<std::string> names;
  for (size_t i = 0; i < values.size(); ++i) {
    std::string label(name_of(values[i]));
    char sep = ':';
    for (const auto& item : items[i])
      if (!shared(i, item)) label += sep + item.first + "=" + item.second, sep = ',';
    names.push_back(label);
  }
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  return std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end() ? names : values;
}

bool KeyLess::operator()(const Key& a, const Key& b) const {
  for (size_t i = 0; i < a.size(); ++i) {
    if (value_less(columns[i], a[i], b[i])) return true;
    if (value_less(columns[i], b[i], a[i])) return false;
  }
  return false;
}

namespace {

// The rows of `select` whose seed every value of `best_over` in their group has: a value with more
// finished seeds than another is compared on the same seeds, not on a different sample. A group
// whose values share no seed keeps every row. `note` gets, per group where rows were left out or
// no seed is shared, which seeds the comparison used.
std::vector<size_t> shared_seeds(const Csv& csv, const std::vector<size_t>& select, const std::vector<std::string>& group,
                                 const std::string& best_over, std::map<Key, std::string, KeyLess>& note) {
  const size_t seed = csv.column("seed"), value = csv.column(best_over);
  std::vector<size_t> cols;
  for (const auto& g : group) cols.push_back(csv.column(g));
  auto group_of = [&](size_t r) {
    Key k;
    for (size_t c : cols) k.push_back(csv.rows[r][c]);
    return k;
  };
  std::map<Key, std::map<std::string, std::set<std::string>>, KeyLess> seeds(KeyLess{group});
  for (size_t r : select) seeds[group_of(r)][csv.rows[r][value]].insert(csv.rows[r][seed]);
  std::map<Key, std::set<std::string>, KeyLess> shared(KeyLess{group});
  for (const auto& [g, by_value] : seeds) {
    std::set<std::string> common = by_value.begin()->second;
    bool equal = true;
    for (const auto& [v, s] : by_value) {
      equal = equal && s == common;
      std::set<std::string> both;
      std::set_intersection(common.begin(), common.end(), s.begin(), s.end(), std::inserter(both, both.end()));
      common = both;
    }
    if (equal) continue;
    std::vector<std::string> listed(common.begin(), common.end());
    std::sort(listed.begin(), listed.end(), [](const auto& a, const auto& b) { return value_less("seed", a, b); });
    note[g] = common.empty() ? fmt::format("no seed shared by every {}: means over different seeds", best_over)
                             : fmt::format("compared on seed{} {}, those every {} has", listed.size() > 1 ? "s" : "",
                                                           fmt::join(listed, ", "), best_over);
    if (!common.empty()) shared[g] = common;
  }
  std::vector<size_t> out;
  for (size_t r : select) {
    const auto it = shared.find(group_of(r));
    if (it == shared.end() || it->second.count(csv.rows[r][seed])) out.push_back(r);
  }
  return out;
}

}  // namespace

std::map<Key, Choice, KeyLess> choose(const Csv& csv, const std::vector<size_t>& select,
                                      const std::vector<std::string>& group, const std::string& metric,
                                      const std::string& best_over, bool lower_is_better, const std::string& tie_break) {
  std::vector<std::string> keys = group;
  keys.push_back(best_over);
  std::map<Key, std::string, KeyLess> seeds_note(KeyLess{group});
  const std::vector<size_t> rows = csv.has("seed") ? shared_seeds(csv, select, group, best_over, seeds_note) : select;
  const Cells by_value = aggregate(csv, rows, keys, metric, "", lower_is_better);
  const Cells by_tie = tie_break.empty() ? Cells(KeyLess{keys}) : aggregate(csv, rows, keys, tie_break, "", true);
  std::map<Key, Choice, KeyLess> out(KeyLess{group});
  for (const auto& [key, st] : by_value) {
    const Key g(key.begin(), key.end() - 1);
    const auto t = by_tie.find(key);
    const double tie = t == by_tie.end() ? 0.0 : t->second.mean;
    const auto n = seeds_note.find(g);
    auto [it, fresh] = out.emplace(g, Choice{key.back(), st.mean, tie, {key.back()}, n == seeds_note.end() ? "" : n->second, {}});
    Choice& c = it->second;
    c.values.push_back(key.back());  // by_value is in value order within a group
    if (fresh) continue;
    if (st.mean == c.mean) {
      c.ties.push_back(key.back());
      if (tie < c.tie) c.value = key.back(), c.tie = tie;
    } else if (lower_is_better ? st.mean < c.mean : st.mean > c.mean) {
      c.value = key.back(), c.mean = st.mean, c.tie = tie, c.ties = {key.back()};
    }
  }
  return out;
}

std::vector<size_t> chosen_rows(const Csv& csv, const std::string& csv_name, const BestOver& o,
                                const std::string& metric, const std::vector<std::string>& keys,
                                const std::vector<size_t>& rows, bool lower, std::string& note) {
  // --select-on SPLIT[,COLUMN=VALUE...]: the pinned columns (e.g. len=512, the trained length of a
  // length-generalisation sweep) restrict the selection rows and are not chosen per value.
  std::vector<std::string> pins;
  std::istringstream parts(o.select_on);
  for (std::string part; std::getline(parts, part, ',');) pins.push_back(part);
  const std::string split = pins.empty() ? "" : pins.front();
  if (split.empty() || split.find('=') != std::string::npos)
    fail("{}: --select-on '{}': expected SPLIT[,COLUMN=VALUE...]", csv_name, o.select_on);
  pins.erase(pins.begin());
  std::vector<std::string> group, select_where = o.where;
  for (const auto& pin : pins) {
    const size_t eq = pin.find('=');
    if (eq == std::string::npos || eq == 0) fail("{}: --select-on: '{}' is not COLUMN=VALUE", csv_name, pin);
    csv.column(pin.substr(0, eq));
    select_where.push_back(pin);
  }
  auto pinned = [&](const std::string& k) {
    return std::any_of(pins.begin(), pins.end(),
                       [&](const std::string& p) { return p.rfind(k + "=", 0) == 0; });
  };
  for (const auto& k : keys)
    if (k != "split" && !pinned(k)) group.push_back(k);
  const bool by_split = csv.has("split");
  if (by_split) select_where.push_back("split=" + split);
  const std::string select_metric = by_split ? metric : metric + "_" + split;  // runs.csv: acc_<split>
  if (!by_split && !csv.has(select_metric))
    fail("{}: --select-on {}: no column '{}'", csv_name, o.select_on, select_metric);
  const std::string tie_break = by_split && csv.has("loss") ? "loss" : "";
  const auto select = select_rows(csv, select_where);
  if (select.empty()) fail("{}: --select-on {}: no rows of that split match the selection", csv_name, o.select_on);
  const auto choices = choose(csv, select, group, select_metric, o.key, lower, tie_break);
  std::vector<size_t> group_cols;
  for (const auto& g : group) group_cols.push_back(csv.column(g));
  const size_t b = csv.column(o.key);
  std::vector<size_t> out;
  for (size_t r : rows) {
    Key key;
    for (size_t c : group_cols) key.push_back(csv.rows[r][c]);
    const auto it = choices.find(key);
    if (it != choices.end() && csv.rows[r][b] == it->second.value) out.push_back(r);
  }
  std::vector<std::map<std::string, std::string>> label_of(group.size());
  for (size_t g = 0; g < group.size(); ++g) {
    const auto values = distinct(csv, select, group[g]);
    const auto names = labels(group[g], values);
    for (size_t i = 0; i < values.size(); ++i) label_of[g][values[i]] = names[i];
  }
  const size_t grid = distinct(csv, select, o.key).size();  // the key's values over every group's rows
  note = fmt::format("\n{} chosen on {} by mean {}{}:\n", o.key, o.select_on, select_metric,
                     tie_break.empty() ? "" : ", ties broken by the lower mean loss");
  for (const auto& [key, c] : choices) {
    std::string name;
    for (size_t g = 0; g < key.size(); ++g) name += (g ? " " : "") + group[g] + "=" + label_of[g][key[g]];
    note += fmt::format("- {}: {} = {} ({}", name, o.key, c.value, significant(c.mean, 4, is_accuracy(select_metric) ? 1 : 0));
    if (c.ties.size() > 1)
      note += fmt::format("; tied: {}{}", fmt::join(c.ties, ", "),
                          tie_break.empty() ? "" : fmt::format(", mean loss {:.4g}", c.tie));
    if (!c.seeds.empty()) note += "; " + c.seeds;
    if (c.values.size() == 1 && grid > 1)
      note += fmt::format("; the only {} of {} with rows for it: nothing compared", o.key, grid);
    if (c.values.size() >= 3 && (c.value == c.values.front() || c.value == c.values.back()))
      note += fmt::format("; the {} of {} values: not bracketed", c.value == c.values.front() ? "lowest" : "highest",
                          c.values.size());
    note += ")\n";
  }
  return out;
}

bool is_accuracy(const std::string& column) {
  return column == "acc" || column == "seq_acc" || column.rfind("acc_", 0) == 0 || column.rfind("seq_acc_", 0) == 0;
}

std::string significant(double x, int digits, double top) {
  std::string s = fmt::format("{:.{}g}", x, digits);
  while (top > 0 && x < top && digits < 9 && s == fmt::format("{:.{}g}", top, digits))
    s = fmt::format("{:.{}g}", x, ++digits);
  return s;
}

double number(const std::string& cell, const std::string& column) {
  double v;
  if (!parse_float(cell, v)) fail("column '{}': '{}' is not a number", column, cell);
  return v;
}

std::vector<size_t> select_rows(const Csv& csv, const std::vector<std::string>& where) {
  std::vector<std::pair<size_t, std::string>> conds;
  for (const auto& w : where) {
    const auto eq = w.find('=');
    if (eq == std::string::npos || eq == 0) fail("--where '{}': expected COLUMN=VALUE", w);
    conds.emplace_back(csv.column(w.substr(0, eq)), w.substr(eq + 1));
  }
  std::vector<size_t> rows;
  for (size_t r = 0; r < csv.rows.size(); ++r)
    if (std::all_of(conds.begin(), conds.end(), [&](const auto& c) { return csv.rows[r][c.first] == c.second; }))
      rows.push_back(r);
  return rows;
}

std::vector<std::string> distinct(const Csv& csv, const std::vector<size_t>& rows, const std::string& column) {
  const size_t c = csv.column(column);
  std::vector<std::string> v;
  for (size_t r : rows) v.push_back(csv.rows[r][c]);
  std::sort(v.begin(), v.end(), [&](const auto& a, const auto& b) { return value_less(column, a, b); });
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

Cells aggregate(const Csv& csv, const std::vector<size_t>& rows, const std::vector<std::string>& keys,
                const std::string& metric, const std::string& best_over, bool lower_is_better) {
  std::vector<size_t> key_cols;
  for (const auto& k : keys) key_cols.push_back(csv.column(k));
  const size_t m = csv.column(metric);
  const bool best = !best_over.empty();
  const size_t b = best ? csv.column(best_over) : 0;
  const bool seeded = csv.has("seed");
  const size_t s = seeded ? csv.column("seed") : 0;
  KeyLess group_less{keys};
  group_less.columns.push_back(best_over);
  std::map<Key, std::map<std::string, size_t>, KeyLess> groups(group_less);  // -> seed -> row
  for (size_t r : rows) {
    const auto& row = csv.rows[r];
    if (row[m].empty()) continue;
    Key key;
    for (size_t c : key_cols) key.push_back(row[c]);
    key.push_back(best ? row[b] : "");
    const std::string seed = seeded ? row[s] : std::to_string(r);
    auto [it, fresh] = groups[key].emplace(seed, r);
    if (fresh) continue;
    std::string differ, where;
    for (size_t c = 0; c < csv.header.size(); ++c)
      if (!is_measure(csv.header[c]) && row[c] != csv.rows[it->second][c])
        differ += (differ.empty() ? "" : ", ") + csv.header[c];
    for (size_t i = 0; i < keys.size(); ++i) where += keys[i] + "=" + key[i] + " ";
    fail("{}has several rows for seed {} that differ in: {}; pick one with --where COLUMN=VALUE or make "
         "it a row/column", where, seed, differ.empty() ? "(nothing: duplicate runs)" : differ);
  }
  Cells cells(KeyLess{keys});
  for (const auto& [key, by_seed] : groups) {
    Stat st;
    st.n = by_seed.size();
    st.min = INFINITY, st.max = -INFINITY;
    for (const auto& [seed, r] : by_seed) {
      const double v = number(csv.rows[r][m], metric);
      st.mean += v / double(st.n), st.min = std::min(st.min, v), st.max = std::max(st.max, v);
    }
    for (const auto& [seed, r] : by_seed) {
      const double d = number(csv.rows[r][m], metric) - st.mean;
      st.sd += st.n > 1 ? d * d / double(st.n - 1) : 0;
    }
    st.sd = std::sqrt(st.sd);
    st.best = key.back();
    const Key cell_key(key.begin(), key.end() - 1);
    auto it = cells.find(cell_key);
    if (it == cells.end()) cells.emplace(cell_key, st);
    else if (lower_is_better ? st.mean < it->second.mean : st.mean > it->second.mean) it->second = st;
  }
  return cells;
}

std::map<Key, std::vector<size_t>, KeyLess> cell_rows(const Csv& csv, const std::vector<size_t>& rows,
                                                      const std::vector<std::string>& keys, const std::string& metric) {
  std::map<Key, std::vector<size_t>, KeyLess> out(KeyLess{keys});
  std::vector<size_t> cols;
  for (const auto& k : keys) cols.push_back(csv.column(k));
  const size_t m = csv.column(metric);
  for (size_t r : rows) {
    if (csv.rows[r][m].empty()) continue;
    Key key;
    for (size_t c : cols) key.push_back(csv.rows[r][c]);
    out[key].push_back(r);
  }
  if (csv.has("seed")) {
    const size_t s = csv.column("seed");
    for (auto& [key, rs] : out)
      std::sort(rs.begin(), rs.end(),
                [&](size_t a, size_t b) { return value_less("seed", csv.rows[a][s], csv.rows[b][s]); });
  }
  return out;
}

SeqStats seqstats_beside(const std::string& evals_csv) {
  const std::string path = (std::filesystem::path(evals_csv).parent_path() / "seqstats.csv").string();
  SeqStats out;
  if (!std::filesystem::exists(path)) {
    // A results folder commits it gzipped (scripts/history.sh): without it the intervals would
    // silently fall back to ± 1 sd.
    if (std::filesystem::exists(path + ".gz"))
      fail("{}.gz is not unpacked; run scripts/history.sh unpack {}", path,
           std::filesystem::path(path).parent_path().string());
    return out;
  }
  const Csv csv = read_csv(path);
  const size_t id = csv.column("run_id"), task = csv.column("task"), split = csv.column("split");
  const size_t bins = csv.column("bins");
  for (size_t i = 0; i < csv.rows.size(); ++i) {
    const auto& r = csv.rows[i];
    SeqHist& h = out[{r[id], r[task], r[split]}];
    for (size_t at = 0; at < r[bins].size();) {
      const size_t end = std::min(r[bins].find(' ', at), r[bins].size());
      SeqBin b;
      const std::string item = r[bins].substr(at, end - at);
      if (std::sscanf(item.c_str(), "%" SCNd64 ":%" SCNd64 ":%" SCNd64, &b.wrong, &b.scored, &b.count) != 3)
        fail("{}:{}: bins must be 'wrong:scored:sequences ...'", path, i + 2);
      h.push_back(b);
      at = end + 1;
    }
  }
  return out;
}

const SeqHist* row_hist(const Csv& csv, const SeqStats& stats, size_t r) {
  if (stats.empty() || !csv.has("run_id") || !csv.has("task") || !csv.has("split")) return nullptr;
  const auto& row = csv.rows[r];
  const auto it = stats.find({row[csv.column("run_id")], row[csv.column("task")], row[csv.column("split")]});
  if (it == stats.end()) return nullptr;
  // The counts are the row's only if their scored targets add up to its n (a row of distances.csv
  // covers a part of its evaluation).
  double n = 0;
  if (!csv.has("n") || !parse_float(row[csv.column("n")], n)) return &it->second;
  int64_t scored = 0;
  for (const auto& b : it->second) scored += b.count * b.scored;
  return double(scored) == n ? &it->second : nullptr;
}

CellInterval cell_interval(const Csv& csv, const SeqStats& stats, const std::vector<size_t>& rows, HistMetric m) {
  CellInterval out;
  std::vector<SeqHist> seeds;
  for (size_t r : rows) {
    const SeqHist* h = row_hist(csv, stats, r);
    if (!h) fail("run {}: no per-sequence counts in seqstats.csv", csv.rows[r][csv.column("run_id")]);
    seeds.push_back(*h);
    for (const auto& b : *h) {  // seq_acc counts the sequences with a scored target
      out.wrong += b.count * (m == HistMetric::seq_acc ? b.wrong > 0 : b.wrong);
      out.total += b.count * (m == HistMetric::seq_acc ? b.scored > 0 : b.scored);
    }
  }
  if (out.no_error()) return out;
  uint64_t key = 1469598103934665603ULL;  // the interval's RNG seed: FNV-1a of the cell's run ids
  for (size_t r : rows)
    for (char c : csv.rows[r][csv.column("run_id")]) key = (key ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  out.ci = nested_bootstrap(seeds, m, kBootstrapReplicates, key);
  return out;
}

}  // namespace pb
