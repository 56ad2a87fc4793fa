// `pathbench table CSV`: a Markdown pivot of a collect CSV on stdout, per (row, column) cell the
// mean over seeds with their number and either ± sd or, from seqstats.csv, a nested bootstrap
// interval (docs/statistics.md), or each seed's value (--per-seed); with --min-layers T the
// smallest depth whose mean (or any / every seed; each seed's with --per-seed) reaches T, depths
// skipped by the adaptive depth search counting as passed (runners/min_depth.h). With
// --best-over KEY, KEY is chosen once per row (and column, unless the columns are the splits) on
// the selection split --select-on, and every cell reports that choice.
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/error.h"
#include "runners/bootstrap.h"
#include "runners/commands.h"
#include "runners/min_depth.h"
#include "runners/results.h"

namespace pb {
namespace {

struct TableOptions {
  std::string csv, rows = "pe", cols = "layers", metric = "acc", split, best_over, select_on = "val";
  double min_layers = 0;
  std::string min_layers_by = "mean";  // mean | any | all (seeds)
  bool per_seed = false, percent = false;
  std::vector<std::string> where;
  const CLI::Option* cols_opt = nullptr;
  const CLI::Option* min_layers_opt = nullptr;
};

std::string md(const std::string& s) {  // a Markdown table cell
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string markdown(const std::string& corner, const std::vector<std::string>& cols,
                     const std::vector<std::pair<std::string, std::vector<std::string>>>& rows) {
  std::string out = fmt::format("| {} |", md(corner)), rule = "|---|";
  for (const auto& c : cols) out += fmt::format(" {} |", md(c)), rule += "---|";
  out += fmt::format("\n{}\n", rule);
  for (const auto& [name, cells] : rows) {
    out += fmt::format("| {} |", md(name));
    for (const auto& c : cells) out += fmt::format(" {} |", md(c));
    out += "\n";
  }
  return out;
}

// How the cells of a pivot are written: mean ± sd over seeds; or, when every row of the table has
// its per-sequence counts (seqstats.csv) and the metric is acc, error_rate or seq_acc, the mean and
// the 95% nested bootstrap interval (seeds, then sequences within each seed), with a metric that
// no seed missed once written as a bound: < 3/N (N scored targets, or sequences for seq_acc, over
// all seeds: the one-sided 95% bound for zero events in N). --per-seed lists the seeds instead.
struct CellWriter {
  const Csv& csv;
  const TableOptions& o;
  SeqStats stats;
  HistMetric hm{};
  bool bootstrap = false, accuracy = false, fraction = false;
  double scale = 1;

  CellWriter(const Csv& c, const TableOptions& opts, const std::vector<size_t>& rows) : csv(c), o(opts) {
    scale = o.percent ? 100 : 1;
    accuracy = is_accuracy(o.metric);
    fraction = accuracy && !o.percent;
    if (o.per_seed || !parse_hist_metric(o.metric, hm) || !csv.has("split") || !csv.has("run_id") || !csv.has("task"))
      return;
    stats = seqstats_beside(o.csv);
    bootstrap = !stats.empty();
    for (size_t r : rows) bootstrap = bootstrap && row_hist(csv, stats, r) != nullptr;
  }
  // 4 significant digits (a fraction: 3 decimals); whole numbers (a step) in full, not as 1.6e+04.
  // An accuracy short of 1 never reads as 1 (100 %): it gets digits until it differs (99.999, not 100).
  std::string value(double v) const {
    if (fraction) {
      int decimals = 3;
      while (v < 1 && decimals < 9 && fmt::format("{:.{}f}", v, decimals) == fmt::format("{:.{}f}", 1.0, decimals))
        ++decimals;
      return fmt::format("{:.{}f}", v, decimals);
    }
    const double x = v * scale;
    if (std::abs(x) < 1e15 && x == std::round(x)) return fmt::format("{:.0f}", x);
    return significant(x, 4, accuracy ? scale : 0);
  }
  std::string caption() const {
    if (o.per_seed) return "per seed (s<seed> value)";
    if (!bootstrap) return "mean ± sd over seeds (n seeds)";
    return fmt::format("mean over seeds [95% nested bootstrap interval: seeds, then sequences; {} replicates] "
                       "(n seeds); no error in N: < 3/N", kBootstrapReplicates);
  }
  // `rows`: the cell's rows, one per seed, in seed order.
  std::string cell(const Stat& st, const std::vector<size_t>& rows) const {
    const size_t m = csv.column(o.metric);
    if (o.per_seed) {
      std::string out;
      const size_t seed = csv.column("seed");
      for (size_t r : rows)
        out += fmt::format("{}s{} {}", out.empty() ? "" : ", ", csv.rows[r][seed],
                           value(number(csv.rows[r][m], o.metric)));
      return out;
    }
    if (!bootstrap) {
      std::string out = value(st.mean);
      if (st.n > 1) out += fraction ? fmt::format(" ± {:.3f}", st.sd) : fmt::format(" ± {:.2g}", st.sd * scale);
      return out + fmt::format(" (n={})", st.n);
    }
    const CellInterval ci = cell_interval(csv, stats, rows, hm);
    if (ci.no_error())
      return fmt::format("{} {} (0 of {}, n={})", hm == HistMetric::error_rate ? "<" : ">",
                         value(hm == HistMetric::error_rate ? ci.bound() : 1 - ci.bound()), ci.total, st.n);
    return fmt::format("{} [{}, {}] (n={})", value(st.mean), value(ci.ci.lo), value(ci.ci.hi), st.n);
  }
};

void run_table(TableOptions o) {
  Csv csv = read_csv(o.csv);
  const bool min_layers = o.min_layers_opt->count() > 0;
  // The task's own length (collect's task_len; len counts tokens, one more with a BOS).
  if (min_layers && o.cols_opt->count() == 0) o.cols = csv.has("task_len") ? "task_len" : "len";
  std::string split = o.split, caption = o.metric;
  const std::vector<std::string> user_where = o.where;
  const std::string base_metric = o.metric;
  if (!split.empty() && csv.has("split")) o.where.push_back("split=" + split);
  if (!split.empty() && !csv.has("split")) o.metric += "_" + split;  // runs.csv: acc_<split>
  if (split.empty() && csv.has("split") && o.rows != "split" && o.cols != "split") {
    const auto splits = distinct(csv, select_rows(csv, o.where), "split");
    if (splits.size() > 1) {
      std::string list;
      for (const auto& s : splits) list += (list.empty() ? "" : ", ") + s;
      fail("{}: several splits ({}); choose one with --split", o.csv, list);
    }
    if (!splits.empty()) split = splits[0];
  }
  for (const auto* c : {&o.rows, &o.cols, &o.metric}) csv.column(*c);
  if (!o.best_over.empty()) csv.column(o.best_over);
  DepthFill fill;
  if (min_layers && csv.has("seed") && o.rows != "layers" && o.cols != "layers") {
    std::vector<std::string> config = {o.rows, o.cols};
    if (!o.best_over.empty()) config.push_back(o.best_over);
    fill = fill_skipped_depths(csv, select_rows(csv, user_where), config, o.metric, split, o.min_layers, o.select_on);
  }
  auto rows = select_rows(csv, o.where);
  if (rows.empty()) fail("{}: no rows match the selection", o.csv);
  const bool lower = o.metric.find("error") != std::string::npos || o.metric.find("loss") != std::string::npos;
  std::string note;
  const ChoiceRows choice{o.best_over, rows};  // for --min-layers: what was chosen among
  if (!o.best_over.empty()) {
    std::vector<std::string> keys = {o.rows, o.cols};
    if (min_layers) keys.push_back("layers");
    rows = chosen_rows(csv, o.csv, {o.best_over, o.select_on, user_where}, base_metric, keys, rows, lower, note);
    if (rows.empty()) fail("{}: no rows have the values --best-over chose on {}", o.csv, o.select_on);
  }
  const auto row_values = distinct(csv, rows, o.rows), col_values = distinct(csv, rows, o.cols);
  std::vector<std::pair<std::string, std::vector<std::string>>> table;
  if (!split.empty()) caption += " on " + split;
  if (min_layers) {
    // --per-seed: each seed's own smallest depth, the walk of min_depths over that seed's rows alone.
    std::vector<std::pair<std::string, std::map<std::pair<std::string, std::string>, MinDepth>>> seed_depths;
    const size_t sc = o.per_seed ? csv.column("seed") : 0;
    if (o.per_seed)
      for (const auto& seed : distinct(csv, rows, "seed")) {
        std::vector<size_t> of;
        for (size_t i : rows)
          if (csv.rows[i][sc] == seed) of.push_back(i);
        seed_depths.emplace_back(seed, min_depths(csv, of, o.rows, o.cols, o.metric, "mean", o.min_layers));
      }
    auto seeds_cell = [&](const std::string& r, const std::string& c) {
      std::string out;
      for (const auto& [seed, depths] : seed_depths) {
        const auto it = depths.find({r, c});
        if (it != depths.end())
          out += fmt::format("{}s{} {}", out.empty() ? "" : ", ", seed, min_depth_seed_text(it->second));
      }
      return out;
    };
    const auto depths = min_depths(csv, rows, o.rows, o.cols, o.metric, o.min_layers_by, o.min_layers,
                                   o.best_over.empty() ? nullptr : &choice);
    for (const auto& r : row_values) {
      table.emplace_back(r, std::vector<std::string>());
      for (const auto& c : col_values) {
        if (o.per_seed) {
          table.back().second.push_back(seeds_cell(r, c));
          continue;
        }
        const auto it = depths.find({r, c});
        table.back().second.push_back(it == depths.end() ? "" : min_depth_text(it->second));
      }
    }
    const char* who = min_depth_who(o.min_layers_by);
    caption = o.per_seed ? fmt::format("smallest layers where each seed's {} ≥ {} (s<seed> depth; > D: none up to "
                                       "its deepest run, D layers; cap: that run ended at its step budget; cap at "
                                       "d: its run at the depth below, d, did, short of it)",
                                       caption, o.min_layers)
                         : fmt::format("smallest layers where {} {} ≥ {}, n seeds (> D: none up to D layers; cap: a run "
                                       "at D ended at its step budget, so budget-limited; cap at d: a run at the depth "
                                       "below, d, ended at its step budget short of it, so a smaller depth is not ruled "
                                       "out; ≥ d (k of n seeds): runs pending at d could still reach it, undecided (a "
                                       "depth that the seeds present rule out, the pending ones counted at 1{}, is not "
                                       "reached); blank: no runs)",
                                       who, caption, o.min_layers,
                                       o.best_over.empty() ? "" : ", under every " + o.best_over);
    if (fill.filled)
      caption += fmt::format("; deeper depths not run because their configuration (seed, {}) reached it (the "
                             "depth search): {}, counted with the values of the depth that reached it",
                             o.best_over.empty() ? "row, column" : o.best_over + ", row, column", fill.filled);
    if (fill.short_of)
      caption += fmt::format("; configurations ending below it before their cell's deepest depth (pending or "
                             "failed runs): {}, their deeper depths missing, not filled", fill.short_of);
  } else {
    const Cells cells = aggregate(csv, rows, {o.rows, o.cols}, o.metric, "", lower);  // checks one row per seed
    auto by_cell = cell_rows(csv, rows, {o.rows, o.cols}, o.metric);
    const CellWriter writer(csv, o, rows);
    for (const auto& r : row_values) {
      table.emplace_back(r, std::vector<std::string>());
      for (const auto& c : col_values) {
        const auto it = cells.find({r, c});
        table.back().second.push_back(it == cells.end() ? "" : writer.cell(it->second, by_cell[{r, c}]));
      }
    }
    caption += (o.percent ? " (%), " : ", ") + writer.caption();
  }
  if (!o.best_over.empty()) caption += fmt::format(", {} chosen on {}", o.best_over, o.select_on);
  const auto row_labels = labels(o.rows, row_values);
  for (size_t r = 0; r < table.size(); ++r) table[r].first = row_labels[r];
  fmt::print("*{}*\n\n{}{}", caption, markdown(o.rows + " \\ " + o.cols, labels(o.cols, col_values), table), note);
}

}  // namespace

void add_table_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("table", "Print a Markdown table (mean ± sd over seeds) from a collect CSV");
  auto o = std::make_shared<TableOptions>();
  cmd->add_option("csv", o->csv, "evals.csv or runs.csv from `pathbench collect`")
      ->type_name("FILE")
      ->required();
  cmd->add_option("--rows", o->rows, "column whose values are the rows")->capture_default_str();
  o->cols_opt = cmd->add_option("--cols", o->cols, "column whose values are the columns (task_len, else len, with --min-layers)")
                    ->capture_default_str();
  cmd->add_option("--metric", o->metric, "column to average (acc, seq_acc, error_rate, ...)")->capture_default_str();
  cmd->add_option("--split", o->split, "evaluation split (needed when the CSV has several)");
  cmd->add_option("--best-over", o->best_over,
                  "column (e.g. lr) chosen per row (and column, unless the columns are the splits) by its best "
                  "mean on --select-on; every column reports that choice");
  cmd->add_option("--select-on", o->select_on,
                  "split on which --best-over chooses, SPLIT[,COLUMN=VALUE...]: pinned columns (e.g. len=512) are "
                  "chosen once for all their values")
      ->capture_default_str();
  cmd->add_flag("--per-seed", o->per_seed,
                "list each seed's value in every cell instead of the mean (with --min-layers: each seed's depth)");
  cmd->add_flag("--percent", o->percent, "print values × 100");
  o->min_layers_opt = cmd->add_option("--min-layers", o->min_layers,
                                      "print the smallest layers whose mean metric reaches this value");
  cmd->add_option("--min-layers-by", o->min_layers_by,
                  "with --min-layers: the depth where the mean over seeds, any seed or all seeds reach it")
      ->check(CLI::IsMember({"mean", "any", "all"}))
      ->capture_default_str();
  cmd->add_option("--where", o->where, "COLUMN=VALUE: keep only matching rows (repeatable)")
      ->allow_extra_args(false);
  cmd->callback([o] { run_table(*o); });
}

}  // namespace pb
