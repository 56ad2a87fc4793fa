// `pathbench plot history.csv --figure curves`: learning curves. x = training step, y = the metric
// on one split; per encoding the mean over seeds (a line) and the min–max over seeds (a band), one
// panel per combination of the settings that vary. The learning rate (--best-over) is chosen per
// encoding and panel as `table --best-over --select-on` chooses it: on the final evaluation, read
// from evals.csv beside history.csv, else from the last evaluation of each run in history.csv. A
// run that stopped early counts with its last evaluation at the later steps of its curve. From
// distance_history.csv, a panel per range of recall distances as well; the learning rate is then
// chosen on the runs' whole-split final evaluations (evals.csv), the same for every range.
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "runners/plot.h"

namespace pb {
namespace {

// Tick spacing 1, 2 or 5 × 10^k giving at most 6 ticks over [0, hi].
double tick_step(double hi) {
  const double raw = hi / 5, decade = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * decade >= raw) return m * decade;
  return 10 * decade;
}

// The final evaluation of each run: evals.csv beside `history`, else the rows of each run's last
// step in it. `source` names which.
Csv final_evaluations(const Csv& history, const std::string& path, std::string& source) {
  const std::string evals = (std::filesystem::path(path).parent_path() / "evals.csv").string();
  if (std::filesystem::exists(evals)) {
    source = "the final evaluation (evals.csv)";
    return read_csv(evals);
  }
  source = "the last evaluation of each run";
  const size_t id = history.column("run_id"), step = history.column("step");
  std::map<std::string, double> last;
  for (const auto& row : history.rows) {
    const double s = number(row[step], "step");
    auto [it, fresh] = last.emplace(row[id], s);
    if (!fresh) it->second = std::max(it->second, s);
  }
  Csv out;
  out.header = history.header;
  for (const auto& row : history.rows)
    if (number(row[step], "step") == last[row[id]]) out.rows.push_back(row);
  return out;
}

// A run that stopped before others of its series (early stopping) keeps its model from then on:
// copies of its last evaluation's rows go to every later step its series (`keys`) evaluated, so the
// mean at a late step is over every seed, not over the runs still training. Returns how many runs.
size_t carry_stopped_runs(Csv& csv, std::vector<size_t>& rows, const std::vector<std::string>& keys) {
  const size_t id = csv.column("run_id"), sc = csv.column("step");
  std::map<Key, std::map<double, std::string>> series_steps;  // series -> its steps
  std::map<std::string, Key> series_of;                         // run -> its series
  std::map<std::string, std::pair<double, std::vector<size_t>>> last;  // run -> its last step, its rows there
  for (size_t r : rows) {
    Key k;
    for (const auto& c : keys) k.push_back(csv.rows[r][csv.column(c)]);
    const double step = number(csv.rows[r][sc], "step");
    series_steps[k][step] = csv.rows[r][sc];
    series_of[csv.rows[r][id]] = k;
    auto [it, fresh] = last.try_emplace(csv.rows[r][id], step, std::vector<size_t>{});
    if (step > it->second.first) it->second = {step, {}};
    if (step == it->second.first) it->second.second.push_back(r);
  }
  size_t carried = 0;
  for (const auto& [run, at] : last) {
    const auto& steps = series_steps[series_of[run]];
    carried += steps.upper_bound(at.first) != steps.end();
    for (auto s = steps.upper_bound(at.first); s != steps.end(); ++s)
      for (size_t r : at.second) {
        auto row = csv.rows[r];
        row[sc] = s->second;
        csv.rows.push_back(std::move(row));
        rows.push_back(csv.rows.size() - 1);
      }
  }
  return carried;
}

// `where` without its filters on a distance range: the final evaluations that choose --best-over
// (evals.csv) have no ranges.
std::vector<std::string> without_distance(std::vector<std::string> where) {
  std::erase_if(where, [](const std::string& w) { return w.rfind("distance_", 0) == 0; });
  return where;
}

}  // namespace

void plot_curves(const PlotOptions& opts) {
  PlotOptions o = opts;
  Csv csv = read_csv(o.csv);
  for (const char* c : {"pe", "step", "run_id"}) csv.column(c);
  csv.column(o.metric);
  const std::vector<std::string> user_where = o.where;
  if (!o.split.empty()) o.where.push_back("split=" + o.split);
  auto rows = select_rows(csv, o.where);
  if (o.split.empty() && csv.has("split")) {
    const auto splits = distinct(csv, rows, "split");
    if (splits.size() > 1) fail("{}: several splits ({}); choose one with --split", o.csv, fmt::join(splits, ", "));
  }
  if (rows.empty()) fail("{}: no rows match the selection", o.csv);
  const auto facets = varying(csv, rows, {"task", "layers", "d_model", "heads", "steps", "batch", "distance_from"});
  std::vector<std::string> keys = facets;
  keys.push_back("pe");

  std::string selection;
  const bool choose = csv.has(o.best_over);
  if (choose) {
    std::string source, note;
    const Csv finals = final_evaluations(csv, o.csv, source);
    if (finals.has("distance_from"))
      fail("{}: choosing --best-over {} for distance ranges needs the runs' evals.csv beside it", o.csv, o.best_over);
    const std::string metric = o.metric == "loss" ? "acc" : o.metric;
    const std::string column = metric == "acc" && finals.has("error_rate") ? "error_rate" : metric;
    std::vector<std::string> choice_keys = keys;  // a run's ranges (distance_history.csv) share its choice
    std::erase(choice_keys, "distance_from");
    const std::vector<std::string> where = without_distance(user_where);
    const auto chosen = chosen_rows(finals, o.csv, {o.best_over, o.select_on, where}, column, choice_keys,
                                    select_rows(finals, where), column == "error_rate", note);
    std::set<std::string> ids;
    for (size_t r : chosen) ids.insert(finals.rows[r][finals.column("run_id")]);
    const size_t id = csv.column("run_id");
    rows.erase(std::remove_if(rows.begin(), rows.end(), [&](size_t r) { return !ids.count(csv.rows[r][id]); }),
               rows.end());
    if (rows.empty()) fail("{}: no runs of the choice of --best-over {} on {}", o.csv, o.best_over, o.select_on);
    selection = fmt::format(" {} chosen per encoding and panel by the mean {} on {} of {}, as in table.",
                            o.best_over, column, o.select_on, source);
  }
  const size_t carried = carry_stopped_runs(csv, rows, keys);
  std::vector<std::string> step_keys = keys;
  step_keys.push_back("step");
  const Cells cells = aggregate(csv, rows, step_keys, o.metric, "", false);
  if (cells.empty()) fail("{}: no values in column '{}' for the selection", o.csv, o.metric);

  // Panels and series in value order; the axes.
  std::vector<Key> panels;
  double step_max = 0, v_min = INFINITY, v_max = -INFINITY;
  size_t seeds_lo = SIZE_MAX, seeds_hi = 0;
  for (const auto& [key, st] : cells) {
    const Key p(key.begin(), key.begin() + static_cast<long>(facets.size()));
    if (panels.empty() || panels.back() != p) panels.push_back(p);
    step_max = std::max(step_max, number(key.back(), "step"));
    v_min = std::min(v_min, st.min), v_max = std::max(v_max, st.max);
    seeds_lo = std::min(seeds_lo, st.n), seeds_hi = std::max(seeds_hi, st.n);
  }
  const bool loss = o.metric == "loss";
  const double loss_top = v_max > 0 ? v_max : 1;
  const YAxis axis = loss ? YAxis{false, 0, std::ceil(loss_top / tick_step(loss_top)) * tick_step(loss_top)}
                          : YAxis{false, std::min(0.8, std::floor(v_min * 10) / 10), 1};
  const double x_hi = step_max > 0 ? step_max : 1, x_tick = tick_step(x_hi);
  const auto series = distinct(csv, rows, "pe");

  const std::string what = loss ? "loss" : o.metric == "acc" ? "accuracy" : o.metric;
  const std::string split = csv.has("split") ? fmt::format("{}", fmt::join(distinct(csv, rows, "split"), ", ")) : "";
  const bool by_range = csv.has("distance_from");  // distance_history.csv: n counts a range's targets
  const bool one_range = by_range && std::find(facets.begin(), facets.end(), "distance_from") == facets.end();
  const std::string range = one_range ? ", " + panel_title(csv, rows, {"distance_from"}, {distinct(csv, rows, "distance_from")[0]}) : "";
  std::vector<std::string> caption = {fmt::format("{}: {}{} vs training step{}", task_text(csv, rows, {"task"}), what,
                                                  split.empty() ? "" : " on " + split, range)};
  caption.push_back("Line: mean over seeds; band: min–max over seeds." + selection);
  if (carried)
    caption.push_back(fmt::format("{} runs stopped early (stop_at, patience) count with their last evaluation at "
                                  "the later steps of their curve.",
                                  carried));
  const std::string n = by_range ? per_value_text(csv, rows, "n", "")
                        : csv.has("n_seqs") ? per_value_text(csv, rows, "n_seqs", "") : "";
  const char* n_of = by_range ? " scored targets per range of recall distance and evaluation; "
                              : " sequences per evaluation; ";
  caption.push_back(fmt::format("{}{} per curve.", n.empty() ? "" : "n = " + n + n_of, seeds_text(seeds_lo, seeds_hi)));

  PanelGrid grid(panels.size());
  Svg svg;
  grid.top = draw_caption(svg, caption, grid.width);
  for (size_t p = 0; p < panels.size(); ++p) {
    const double px = grid.x(p), py = grid.y(p);
    const Scale sx{0, x_hi, px + kLeft, px + kPanelW - kRight};
    const Scale sy{axis.lo, axis.hi, py + kPanelH - kBottom, py + kTop};
    svg.open("g class=\"panel\"");
    svg.text(px + (kLeft + kPanelW - kRight) / 2, py + kTop - 10, panel_title(csv, rows, facets, panels[p]), "middle", 11);
    draw_y_axis(svg, axis, sx, sy, what, px + 16);
    for (double t = 0; t <= x_hi * (1 + 1e-9); t += x_tick) {
      svg.line(sx(t), sy.from, sx(t), sy.from + 4, "stroke=\"#333333\"");
      svg.text(sx(t), sy.from + 16, fmt::format("{:g}", t), "middle", 10);
    }
    svg.text((sx.from + sx.to) / 2, py + kPanelH - 10, "step", "middle", 11);
    const auto styles = encoding_styles(series);
    for (size_t s = 0; s < series.size(); ++s) {
      const std::string& pe = series[s];
      std::vector<std::pair<double, double>> mean, upper, lower;
      const Stat* last = nullptr;
      std::string last_step;
      for (const auto& [key, st] : cells) {
        if (!std::equal(panels[p].begin(), panels[p].end(), key.begin()) || key[facets.size()] != pe) continue;
        const double X = sx(number(key.back(), "step"));
        mean.emplace_back(X, sy(axis.at(st.mean)));
        upper.emplace_back(X, sy(axis.at(st.max)));
        lower.emplace_back(X, sy(axis.at(st.min)));
        last = &st, last_step = key.back();
      }
      if (!last) continue;
      const EncodingStyle& style = styles[s];
      std::string chosen;
      if (choose) {
        std::vector<size_t> of;
        const size_t pc = csv.column("pe");
        for (size_t r : rows) {
          bool match = csv.rows[r][pc] == pe;
          for (size_t f = 0; f < facets.size() && match; ++f) match = csv.rows[r][csv.column(facets[f])] == panels[p][f];
          if (match) of.push_back(r);
        }
        chosen = fmt::format(" ({} {})", o.best_over, fmt::join(distinct(csv, of, o.best_over), ", "));
      }
      svg.open(fmt::format("g class=\"series\" data-pe=\"{}\"", xml_escape(pe)));
      svg.title(fmt::format("{}{}: {} {:.4g} at step {} (min {:.4g}, max {:.4g} over {} seeds)", pe, chosen, o.metric,
                            last->mean, last_step, last->min, last->max, last->n));
      std::vector<std::pair<double, double>> band = upper;
      band.insert(band.end(), lower.rbegin(), lower.rend());
      svg.polygon(band, fmt::format("class=\"band\" fill=\"{}\" fill-opacity=\"0.15\" stroke=\"none\"", style.colour));
      svg.polyline(mean, stroke(style, 1.5));
      svg.close("g");
    }
    svg.close("g");
  }
  finish_figure(svg, grid, o.out, panels.size(), series, true);
}

}  // namespace pb
