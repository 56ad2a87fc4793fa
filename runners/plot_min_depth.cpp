// `pathbench plot evals.csv --figure min-depth --split test --metric seq_acc --min-layers 0.9`: the
// smallest depth that solves a task against its length, one series per encoding (PaTH's Figure 2,
// bottom). The depths are `table --min-layers`'s (runners/min_depth.h): skipped depths of the
// adaptive depth search filled, --best-over chosen per encoding, length and depth on --select-on,
// a depth deciding only when every seed has a value there for every --best-over value. A filled
// marker is a depth that passed (a downward arrow: the depth below ended at its step budget); an
// open marker with an upward arrow at D says no depth up to D did; a cell whose runs are still
// pending is left out, and the caption counts it. One panel per combination of the settings that
// vary besides length (task_group, width, …).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "runners/min_depth.h"
#include "runners/plot.h"

namespace pb {

void plot_min_depth(const PlotOptions& o) {
  Csv csv = read_csv(o.csv);
  if (!csv.has("split") || !csv.has("seed") || !csv.has("layers"))
    fail("{}: --figure min-depth needs evals.csv (split, seed and layers columns)", o.csv);
  if (o.split.empty()) fail("--figure min-depth: choose the split with --split (e.g. test)");
  if (o.metric == "loss") fail("--figure min-depth: --metric acc or seq_acc (a depth reaches a threshold)");
  const std::string col = csv.has("task_len") ? "task_len" : "len";
  for (const auto& c : {std::string("pe"), col, o.metric}) csv.column(c);
  const std::vector<size_t> selected = select_rows(csv, o.where);  // every split
  const auto facets = varying(csv, selected, {"task_group", "d_model", "heads", "steps", "batch"});
  const bool choose = csv.has(o.best_over);
  std::vector<std::string> config = {"pe", col};
  config.insert(config.end(), facets.begin(), facets.end());
  if (choose) config.push_back(o.best_over);
  const DepthFill fill =
      fill_skipped_depths(csv, selected, config, o.metric, o.split, o.min_layers, o.select_on);
  std::vector<std::string> where = o.where;
  where.push_back("split=" + o.split);
  auto rows = select_rows(csv, where);
  if (rows.empty()) fail("{}: no rows match the selection", o.csv);
  std::vector<std::string> keys = facets;
  keys.insert(keys.end(), {"pe", col, "layers"});
  std::string note;
  const std::vector<size_t> candidates = rows;
  if (choose) rows = chosen_rows(csv, o.csv, {o.best_over, o.select_on, o.where}, o.metric, keys, rows, false, note);

  // Per panel, its rows (and the rows its choice was made among) and its depths.
  auto by_panel = [&](const std::vector<size_t>& of) {
    std::map<Key, std::vector<size_t>> out;
    for (size_t r : of) {
      Key p;
      for (const auto& f : facets) p.push_back(csv.rows[r][csv.column(f)]);
      out[p].push_back(r);
    }
    return out;
  };
  auto panel_rows = by_panel(rows), panel_candidates = by_panel(candidates);
  std::vector<Key> panels;
  std::vector<std::map<std::pair<std::string, std::string>, MinDepth>> depths;
  for (const auto& [p, rs] : panel_rows) {
    panels.push_back(p);
    const ChoiceRows choice{o.best_over, panel_candidates[p]};
    depths.push_back(
        min_depths(csv, rs, "pe", col, o.metric, o.min_layers_by, o.min_layers, choose ? &choice : nullptr));
  }
  double deepest = 1;
  size_t undecided = 0, capped = 0, capped_below = 0, seeds = 0;
  for (const auto& panel : depths)
    for (const auto& [rc, d] : panel) {
      deepest = std::max(deepest, number(d.depth, "layers"));
      undecided += d.pending();
      capped += d.kind == MinDepth::Kind::none && d.cap && !d.pending();
      capped_below += !d.cap_below.empty();
      seeds = std::max(seeds, d.of);
    }
  const auto series = distinct(csv, rows, "pe");
  const auto xs = distinct(csv, rows, col);
  const double x_lo = number(xs.front(), col), x_hi = number(xs.back(), col), pad = std::max(1.0, (x_hi - x_lo) / 10);
  const YAxis axis{false, 0, deepest + 1, 1};

  std::string task = task_text(csv, rows, {"task_name"});
  if (csv.has("task_group") && distinct(csv, rows, "task_group").size() == 1)
    task += " (group " + distinct(csv, rows, "task_group")[0] + ")";
  const char* who = min_depth_who(o.min_layers_by);
  std::vector<std::string> caption = {fmt::format("{}: smallest depth where {} {} on {} ≥ {}",
                                                  task, who, o.metric, o.split,
                                                  o.min_layers)};
  caption.push_back(fmt::format(
      "Filled marker: that depth over {} seeds{}. Open marker with an upward arrow at D: no depth up to D "
      "reaches it{}.",
      seeds, choose ? fmt::format(" ({} chosen per encoding, length and depth on {}, as in table --min-layers)",
                                  o.best_over, o.select_on)
                    : "",
      capped ? fmt::format(" ({} of them budget-limited: a run at D ended at its step budget)", capped) : ""));
  if (capped_below)
    caption.push_back(fmt::format("Downward arrow: at the depth below, a run ended at its step budget short of the "
                                  "threshold, so a smaller depth is not ruled out ({} of the filled markers).",
                                  capped_below));
  caption.push_back(fmt::format(
      "Depths the adaptive depth search skipped count with the values of the shallower depth that passed ({} filled).",
      fill.filled));
  if (undecided)
    caption.push_back(fmt::format("Not drawn: {} encoding–length cells whose seeds have not all run at some depth "
                                  "below any that passed (pending), or at the deepest that none passed.",
                                  undecided));

  PanelGrid grid(panels.size());
  Svg svg;
  grid.top = draw_caption(svg, caption, grid.width);
  const auto styles = encoding_styles(series);
  for (size_t p = 0; p < panels.size(); ++p) {
    const double px = grid.x(p), py = grid.y(p);
    const Scale sx{x_lo - pad, x_hi + pad, px + kLeft, px + kPanelW - kRight};
    const Scale sy{axis.lo, axis.hi, py + kPanelH - kBottom, py + kTop};
    svg.open("g class=\"panel\"");
    const std::string title = panel_title(csv, panel_rows[panels[p]], facets, panels[p]);
    svg.text(px + (kLeft + kPanelW - kRight) / 2, py + kTop - 10, title, "middle", 11);
    draw_y_axis(svg, axis, sx, sy, "layers", px + 16);
    for (const auto& x : xs) {
      svg.line(sx(number(x, col)), sy.from, sx(number(x, col)), sy.from + 4, "stroke=\"#333333\"");
      svg.text(sx(number(x, col)), sy.from + 16, x, "middle", 10);
    }
    svg.text((sx.from + sx.to) / 2, py + kPanelH - 10, col == "task_len" ? "length (elements)" : "length (tokens)",
             "middle", 11);
    for (size_t s = 0; s < series.size(); ++s) {
      const EncodingStyle& style = styles[s];
      const double dodge = (double(s) - double(series.size() - 1) / 2) * 5;
      std::vector<std::vector<std::pair<double, double>>> lines(1);  // through consecutive passed depths
      svg.open(fmt::format("g class=\"series\" data-pe=\"{}\"", xml_escape(series[s])));
      for (const auto& x : xs) {
        const auto it = depths[p].find({series[s], x});
        if (it == depths[p].end() || it->second.pending()) {
          if (!lines.back().empty()) lines.emplace_back();
          continue;
        }
        const MinDepth& d = it->second;
        const double X = sx(number(x, col)) + dodge, Y = sy(number(d.depth, "layers"));
        const bool passed = d.kind == MinDepth::Kind::passed;
        svg.open(fmt::format("g class=\"point\" data-x=\"{}\" data-depth=\"{}\"{}", xml_escape(x), d.depth,
                             !passed ? " data-none=\"1\"" : d.cap_below.empty() ? "" : " data-cap-below=\"1\""));
        svg.title(fmt::format("{}, length {}: {}", series[s], x, min_depth_text(d)));
        if (passed) {
          lines.back().emplace_back(X, Y);
          if (!d.cap_below.empty()) draw_arrow(svg, X, Y + 5, Y + 16, style);
        } else {
          if (!lines.back().empty()) lines.emplace_back();
          draw_arrow(svg, X, Y - 5, Y - 16, style);
        }
        svg.marker(X, Y, style, !passed);
        svg.close("g");
      }
      for (const auto& l : lines)
        if (l.size() > 1) svg.polyline(l, stroke(style, 1.5));
      svg.close("g");
    }
    svg.close("g");
  }
  finish_figure(svg, grid, o.out, panels.size(), series, false);
}

}  // namespace pb
