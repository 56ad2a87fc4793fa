#include "runners/min_depth.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <set>

namespace pb {

DepthFill fill_skipped_depths(Csv& csv, const std::vector<size_t>& rows, std::vector<std::string> config,
                              const std::string& metric, const std::string& split, double threshold,
                              const std::string& search_split) {
  config.push_back("seed");
  std::vector<size_t> cc;  // the configuration's columns
  for (const auto& c : config) cc.push_back(csv.column(c));
  const size_t lc = csv.column("layers"), mc = csv.column(metric);
  const bool splits = csv.has("split");
  const size_t sc = splits ? csv.column("split") : 0;
  using Depths = std::map<double, std::vector<size_t>>;  // depth -> the configuration's rows there
  std::map<std::vector<std::string>, Depths> configs;
  std::map<std::vector<std::string>, std::map<double, std::string>> cells;  // (row, column) -> depths
  for (size_t r : rows) {
    std::vector<std::string> key;
    for (size_t c : cc) key.push_back(csv.rows[r][c]);
    const double depth = number(csv.rows[r][lc], "layers");
    configs[key][depth].push_back(r);
    cells[{key[0], key[1]}][depth] = csv.rows[r][lc];
  }
  DepthFill out;
  for (const auto& [key, depths] : configs) {
    const auto& [deepest, at] = *depths.rbegin();
    const auto& cell = cells[{key[0], key[1]}];
    if (cell.rbegin()->first == deepest) continue;
    std::optional<double> searched, shown;  // the metric at the deepest run on the search's split, the table's
    for (size_t r : at) {
      if (csv.rows[r][mc].empty()) continue;
      const double v = number(csv.rows[r][mc], metric);
      if (!splits || csv.rows[r][sc] == search_split) searched = v;
      if (!splits || csv.rows[r][sc] == split) shown = v;
    }
    if (!(searched.value_or(shown.value_or(-1)) >= threshold)) {
      ++out.short_of;
      continue;
    }
    for (auto d = cell.upper_bound(deepest); d != cell.end(); ++d, ++out.filled)
      for (size_t r : at) {
        auto row = csv.rows[r];
        row[lc] = d->second;
        csv.rows.push_back(std::move(row));
      }
  }
  return out;
}

std::map<std::pair<std::string, std::string>, MinDepth> min_depths(const Csv& csv, const std::vector<size_t>& rows,
                                                                   const std::string& row_col,
                                                                   const std::string& col_col,
                                                                   const std::string& metric, const std::string& by,
                                                                   double threshold, const ChoiceRows* choice) {
  const Cells cells = aggregate(csv, rows, {row_col, col_col, "layers"}, metric, "", false);
  const size_t of = csv.has("seed") ? distinct(csv, rows, "seed").size() : 0;
  // The seeds present at a depth: their metric's sum, its least value, how many.
  struct Present {
    double sum = 0, min = std::numeric_limits<double>::infinity();
    size_t n = 0;
  };
  // With a choice: per (row, column, depth), the seeds that have a value for every chosen-among value,
  // and each chosen-among value's seeds present there.
  std::map<Key, size_t> complete;
  std::map<Key, std::map<std::string, Present>> by_value;  // (row, column, depth) -> value -> its seeds
  if (choice && csv.has("seed")) {
    const size_t rc = csv.column(row_col), cc = csv.column(col_col), lc = csv.column("layers");
    const size_t sc = csv.column("seed"), kc = csv.column(choice->key), mc = csv.column(metric);
    std::map<Key, std::set<std::string>> values;                          // (row, column)
    std::map<Key, std::map<std::string, std::set<std::string>>> present;  // (row, column, depth)
    for (size_t i : choice->candidates) {
      const auto& row = csv.rows[i];
      if (row[mc].empty()) continue;
      values[{row[rc], row[cc]}].insert(row[kc]);
      present[{row[rc], row[cc], row[lc]}][row[sc]].insert(row[kc]);
      Present& p = by_value[{row[rc], row[cc], row[lc]}][row[kc]];
      const double x = number(row[mc], metric);
      p = {p.sum + x, std::min(p.min, x), p.n + 1};
    }
    for (auto& [key, values_there] : by_value)  // a value no seed has run there yet: every seed pending
      for (const auto& v : values[{key[0], key[1]}]) values_there.try_emplace(v);
    for (const auto& [key, seeds] : present)
      for (const auto& [seed, have] : seeds) complete[key] += have.size() == values[{key[0], key[1]}].size();
  }
  // Whether a run at depth `d` of (r, c) ended at its step budget (collect's stop "steps"); with
  // `short_of`, only a run whose metric stayed below the threshold counts.
  auto capped = [&](const std::string& r, const std::string& c, const std::string& d, bool short_of) {
    if (!csv.has("stop")) return false;
    const size_t rc = csv.column(row_col), cc = csv.column(col_col), lc = csv.column("layers"), sc = csv.column("stop");
    const size_t mc = csv.column(metric);
    for (size_t i : rows)
      if (csv.rows[i][rc] == r && csv.rows[i][cc] == c && csv.rows[i][lc] == d && csv.rows[i][sc] == "steps" &&
          !(short_of && !csv.rows[i][mc].empty() && number(csv.rows[i][mc], metric) >= threshold))
        return true;
    return false;
  };
  std::map<std::pair<std::string, std::string>, MinDepth> out;
  std::map<std::pair<std::string, std::string>, std::string> below;  // a passed cell's depth below it
  for (const auto& [key, st] : cells) {  // per cell, depths in increasing order
    auto [it, fresh] = out.try_emplace({key[0], key[1]});
    MinDepth& d = it->second;
    if (!fresh && d.kind != MinDepth::Kind::none) continue;  // decided at a shallower depth
    if (!fresh) below[it->first] = d.depth;
    const double v = by == "any" ? st.max : by == "all" ? st.min : st.mean;
    const size_t n = choice ? std::min(st.n, complete[key]) : st.n;
    const bool all_in = n >= of;
    // With seeds pending, the depth is ruled out when even their best (metric 1) cannot meet the
    // rule: the mean of the seeds present and of the rest at 1 stays below it, or (all) a present
    // seed is. With a choice, whichever value it ends on: under every chosen-among value, its seeds
    // present at this depth and the rest at 1.
    auto short_of = [&](const Present& p) {
      return by == "mean" ? p.sum + double(of - std::min(of, p.n)) < threshold * double(of)
             : by == "all" ? p.min < threshold
                           : false;
    };
    const auto values_there = by_value.find(key);
    const bool out_of_reach =
        !choice ? short_of({st.mean * double(st.n), st.min, st.n})
                : values_there != by_value.end() &&
                      std::all_of(values_there->second.begin(), values_there->second.end(),
                                  [&](const auto& value) { return short_of(value.second); });
    d = {v >= threshold && (all_in || by == "any") ? MinDepth::Kind::passed
         : all_in || out_of_reach                  ? MinDepth::Kind::none
                                                   : MinDepth::Kind::undecided,
         key[2], by == "any" && v >= threshold ? st.n : n, of, false, ""};
  }
  for (auto& [rc, d] : out) {
    if (d.kind == MinDepth::Kind::none) d.cap = capped(rc.first, rc.second, d.depth, false);
    const auto b = below.find(rc);
    if (d.kind == MinDepth::Kind::passed && b != below.end() && capped(rc.first, rc.second, b->second, true))
      d.cap_below = b->second;
  }
  return out;
}

const char* min_depth_who(const std::string& by) {
  return by == "any" ? "some seed's" : by == "all" ? "every seed's" : "the mean";
}

std::string min_depth_text(const MinDepth& d) {
  switch (d.kind) {
    case MinDepth::Kind::passed:
      return d.cap_below.empty() ? fmt::format("{} (n={})", d.depth, d.n)
                                 : fmt::format("{} (n={}; cap at {})", d.depth, d.n, d.cap_below);
    case MinDepth::Kind::undecided: return fmt::format("≥ {} ({} of {} seeds)", d.depth, d.n, d.of);
    case MinDepth::Kind::none: break;
  }
  const std::string n = d.n < d.of ? fmt::format("{} of {} seeds", d.n, d.of) : fmt::format("n={}", d.n);
  return fmt::format("> {} ({}{})", d.depth, d.cap ? "cap, " : "", n);
}

std::string min_depth_seed_text(const MinDepth& d) {
  if (d.kind == MinDepth::Kind::passed)
    return d.cap_below.empty() ? d.depth : fmt::format("{} (cap at {})", d.depth, d.cap_below);
  return fmt::format("> {}{}", d.depth, d.cap ? " (cap)" : "");
}

}  // namespace pb
