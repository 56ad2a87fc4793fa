// `pathbench plot CSV --figure F -o FIG.svg`: a figure from evals.csv (or, for --figure curves,
// history.csv) with the built-in SVG writer. One series per encoding (fixed colour and marker,
// results.h), one panel per combination of the settings that vary besides the axes, panels and x
// values in value order (numbers by value, also inside specs). A point is the mean over seeds of
// the configuration `table --best-over --select-on` chooses; its interval is the one `table`
// prints: the 95% nested bootstrap from seqstats.csv beside the CSV, else ± 1 sd over seeds (the
// caption says which). Intervals are cut at the axis; on the log axis of error rates a cell
// without any error is drawn as the upper bound 3/N with a downward arrow. The caption names the
// task, split, metric, sequences per evaluation and seeds per point. The same CSV gives the same
// bytes. A PNG is written beside it when rsvg-convert is on PATH.
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>

#include "core/error.h"
#include "core/spec.h"
#include "runners/commands.h"
#include "runners/plot.h"

namespace pb {

namespace {

enum class Axis { Linear, Log2, Category };

struct Figure {
  std::string x;                    // column on the x axis
  Axis axis;
  bool error_rate;                  // y = 1 − metric on a log axis
  std::string x_label;
  std::vector<std::string> facets;  // columns that split panels when they vary
};

Figure figure_of(const std::string& name, const std::string& x) {
  if (name == "acc-vs") {  // any numeric setting; a task parameter (task_<key>) varies the task within a panel
    if (x.empty()) fail("--figure acc-vs needs --x COLUMN, e.g. --x task_n_back");
    const bool task_param = x.rfind("task_", 0) == 0;
    std::vector<std::string> facets;
    for (const std::string f : {"task", "layers", "d_model", "heads", "steps", "batch"})
      if (f != x && !(task_param && f == "task")) facets.push_back(f);
    return {x, Axis::Linear, false, task_param ? x.substr(5) : x, facets};
  }
  if (name == "acc-vs-depth") return {"layers", Axis::Linear, false, "layers", {"task", "d_model", "heads", "steps", "batch"}};
  if (name == "acc-vs-length")
    return {"len", Axis::Log2, false, "sequence length", {"train_task", "layers", "d_model", "heads", "steps", "batch"}};
  if (name == "error-rate")
    return {"split", Axis::Category, true, "evaluation split", {"task", "layers", "d_model", "heads", "steps", "batch"}};
  fail("--figure {}: unknown; use acc-vs-depth, acc-vs-length, acc-vs, error-rate, min-depth or curves", name);
}

std::string spec_value(const std::string& spec, const std::string& key) {
  for (const auto& [k, v] : spec_items(spec))
    if (k == key) return v;
  return "";
}

// One encoding at one x of one panel, in the figure's units (error rate or the metric).
struct Point {
  double y = 0, lo = 0, hi = 0;  // mean over seeds and its interval
  bool bound = false;            // no error in N: y is the upper bound 3/N
  size_t seeds = 0;
};

// The column a figure reads: error-rate figures of acc read error_rate where the CSV has it, as
// `table --metric error_rate` does.
std::string value_column(const Csv& csv, const PlotOptions& o, const Figure& fig) {
  return fig.error_rate && o.metric == "acc" && csv.has("error_rate") ? "error_rate" : o.metric;
}

// The points of every cell with the statistics of `table`: the nested bootstrap when every row
// has its counts in seqstats.csv (`bootstrap` says whether), else ± 1 sd.
std::map<Key, Point, KeyLess> points_of(const Csv& csv, const PlotOptions& o, const Figure& fig,
                                        const std::vector<size_t>& rows, const std::vector<std::string>& keys,
                                        bool& bootstrap) {
  const std::string column = value_column(csv, o, fig);
  const bool flip = fig.error_rate && column != "error_rate";  // the figure draws 1 − column
  const Cells cells = aggregate(csv, rows, keys, column, "", false);
  if (cells.empty()) fail("{}: no values in column '{}' for the selection", o.csv, column);
  auto by_cell = cell_rows(csv, rows, keys, column);
  const SeqStats stats = seqstats_beside(o.csv);
  bootstrap = !stats.empty();
  for (const auto& [key, rs] : by_cell)
    for (size_t r : rs) bootstrap = bootstrap && row_hist(csv, stats, r) != nullptr;
  HistMetric hm{};
  parse_hist_metric(o.metric, hm);
  if (fig.error_rate && hm == HistMetric::acc) hm = HistMetric::error_rate;
  const std::string n_col = o.metric == "seq_acc" ? "n_seqs" : "n";
  std::map<Key, Point, KeyLess> out(KeyLess{keys});
  for (const auto& [key, st] : cells) {
    Point p;
    p.seeds = st.n;
    p.y = flip ? 1 - st.mean : st.mean;
    if (bootstrap) {
      const CellInterval ci = cell_interval(csv, stats, by_cell[key], hm);
      const bool complement = fig.error_rate && hm == HistMetric::seq_acc;  // 1 − seq_acc
      p.lo = complement ? 1 - ci.ci.hi : ci.ci.lo;
      p.hi = complement ? 1 - ci.ci.lo : ci.ci.hi;
      if (ci.no_error() && fig.error_rate) p.bound = true, p.y = p.lo = p.hi = ci.bound();
      if (ci.no_error() && !fig.error_rate) p.lo = 1 - ci.bound(), p.hi = 1;
    } else {
      p.lo = p.y - st.sd, p.hi = p.y + st.sd;
      if (fig.error_rate && p.y <= 0) {
        double n = 0;
        for (size_t r : by_cell[key]) n += number(csv.rows[r][csv.column(n_col)], n_col);
        p.bound = n > 0, p.y = p.lo = p.hi = n > 0 ? 3 / n : 0;
      }
    }
    out.emplace(key, p);
  }
  return out;
}

void draw_point(Svg& svg, const Point& pt, double X, const YAxis& axis, const Scale& sy, const EncodingStyle& style,
                const std::string& x, const std::string& pe) {
  svg.open(fmt::format("g class=\"point\" data-x=\"{}\" data-y=\"{:.6g}\" data-lo=\"{:.6g}\" data-hi=\"{:.6g}\"{}",
                       xml_escape(x), pt.y, pt.lo, pt.hi, pt.bound ? " data-bound=\"1\"" : ""));
  svg.title(pt.bound ? fmt::format("{}, {}: < {:.3g} (no error), {} seeds", pe, x, pt.y, pt.seeds)
                         : fmt::format("{}, {}: {:.4g} [{:.4g}, {:.4g}], {} seeds", pe, x, pt.y, pt.lo, pt.hi, pt.seeds));
  const std::string line = stroke({style.colour, style.sides, style.rotation, ""}, 1.5);  // error bars solid
  const double Y = sy(axis.at(pt.y));
  if (pt.bound) {  // an upper bound: the open marker at 3/N and an arrow down, inside the frame
    const double end = std::min(Y + 16, sy.from);
    if (end > Y + 6) draw_arrow(svg, X, Y + 5, end, style);
  } else if (pt.lo != pt.hi) {
    const Bar bar = clip_bar(pt.lo, pt.hi, axis, sy);
    svg.line(X, bar.y_lo, X, bar.y_hi, line);
    if (bar.cap_lo) svg.line(X - 3, bar.y_lo, X + 3, bar.y_lo, line);
    if (bar.cap_hi) svg.line(X - 3, bar.y_hi, X + 3, bar.y_hi, line);
  }
  svg.marker(X, Y, style, pt.bound);
  svg.close("g");
}

void run_plot(PlotOptions o) {
  if (!o.x.empty() && o.figure != "acc-vs") fail("--x is for --figure acc-vs");
  if (o.figure == "curves") return plot_curves(o);
  if (o.figure == "min-depth") return plot_min_depth(o);
  const Figure fig = figure_of(o.figure, o.x);
  if (o.metric == "loss") fail("--metric loss: only --figure curves draws the loss");
  const Csv csv = read_csv(o.csv);
  const std::vector<std::string> user_where = o.where;
  if (!o.split.empty()) o.where.push_back("split=" + o.split);
  auto rows = select_rows(csv, o.where);
  for (const auto& c : {std::string("pe"), fig.x, o.metric}) csv.column(c);
  if (!fig.error_rate && o.split.empty() && csv.has("split")) {
    const auto splits = distinct(csv, rows, "split");
    std::string list;
    for (const auto& s : splits) list += (list.empty() ? "" : ", ") + s;
    if (splits.size() > 1) fail("{}: several splits ({}); choose one with --split", o.csv, list);
  }
  if (rows.empty()) fail("{}: no rows match the selection", o.csv);
  const std::vector<std::string> facets = varying(csv, rows, fig.facets);
  std::vector<std::string> keys = facets;
  keys.insert(keys.end(), {"pe", fig.x});
  std::string note;  // the choices: `table --best-over` prints them; the caption names the rule
  const bool choose = csv.has(o.best_over);
  const std::string column = value_column(csv, o, fig);
  if (choose)
    rows = chosen_rows(csv, o.csv, {o.best_over, o.select_on, user_where}, column, keys, rows, column == "error_rate",
                       note);
  bool bootstrap = false;
  const auto points = points_of(csv, o, fig, rows, keys, bootstrap);

  // Panels, series and x positions, all in value order.
  std::vector<Key> panels;
  size_t seeds_lo = SIZE_MAX, seeds_hi = 0;
  bool any_bound = false, any_cut = false;
  std::vector<double> ends;  // every value > 0 that the log axis must show
  for (const auto& [key, pt] : points) {
    const Key p(key.begin(), key.begin() + static_cast<long>(facets.size()));
    if (panels.empty() || panels.back() != p) panels.push_back(p);
    seeds_lo = std::min(seeds_lo, pt.seeds), seeds_hi = std::max(seeds_hi, pt.seeds);
    any_bound = any_bound || pt.bound;
    for (double v : {pt.y, pt.lo, pt.hi}) ends.push_back(v);
    if (pt.bound) ends.push_back(pt.y / 10);  // room for the arrow
  }
  const auto series = distinct(csv, rows, "pe");
  const auto xs = distinct(csv, rows, fig.x);
  auto x_pos = [&](const std::string& v) {
    if (fig.axis == Axis::Category) return double(std::find(xs.begin(), xs.end(), v) - xs.begin());
    const double d = number(v, fig.x);
    return fig.axis == Axis::Log2 ? std::log2(d) : d;
  };
  const double x_lo = x_pos(xs.front()) - 0.5, x_hi = x_pos(xs.back()) + 0.5;
  const YAxis axis = fig.error_rate ? log_axis(ends) : YAxis{false, 0, 1};
  for (const auto& [key, pt] : points)
    any_cut = any_cut || (!pt.bound && pt.lo != pt.hi && (!axis.inside(pt.lo) || !axis.inside(pt.hi)));

  // Caption: what is drawn, from which statistics, over how many sequences and seeds.
  const std::string what = fig.error_rate ? "error rate (1 − " + o.metric + ")" : o.metric == "acc" ? "accuracy" : o.metric;
  const std::string split_text = fig.x == "split" ? fmt::format("{}", fmt::join(xs, ", ")) : o.split;
  std::vector<std::string> caption = {fmt::format(
      "{}: {}{}", task_text(csv, rows, {fig.axis == Axis::Log2 ? "train_task" : "task", "task"}), what,
      split_text.empty() ? "" : " on " + split_text)};
  caption.push_back(fmt::format(
      "Point: mean over seeds{}. Bar: {}.", choose ? fmt::format(" ({} chosen per encoding on {}, as in table)", o.best_over, o.select_on) : "",
      bootstrap ? fmt::format("95% nested bootstrap interval (seeds, then sequences within each seed; {} replicates)",
                              kBootstrapReplicates)
                : "± 1 sd over seeds (no bootstrap interval: not every point has its per-sequence counts in a "
                  "seqstats.csv beside the CSV)"));
  const std::string n_seqs = csv.has("n_seqs") ? per_value_text(csv, rows, "n_seqs", fig.x) : "";
  caption.push_back(fmt::format("{}{} per point.", n_seqs.empty() ? "" : "n = " + n_seqs + " sequences per evaluation; ",
                                seeds_text(seeds_lo, seeds_hi)));
  if (any_bound)
    caption.push_back(fmt::format("Open marker with a downward arrow: no error in N {} over all seeds, drawn at the "
                                  "upper bound 3/N (one-sided 95%).", o.metric == "seq_acc" ? "sequences" : "scored targets"));
  if (any_cut) caption.push_back("A bar end without a cap continues beyond the axis.");

  PanelGrid grid(panels.size());
  Svg svg;
  grid.top = draw_caption(svg, caption, grid.width);
  for (size_t p = 0; p < panels.size(); ++p) {
    const double px = grid.x(p), py = grid.y(p);
    const Scale sx{x_lo, x_hi, px + kLeft, px + kPanelW - kRight};
    const Scale sy{axis.lo, axis.hi, py + kPanelH - kBottom, py + kTop};
    svg.open("g class=\"panel\"");
    svg.text(px + (kLeft + kPanelW - kRight) / 2, py + kTop - 10, panel_title(csv, rows, facets, panels[p]), "middle", 11);
    draw_y_axis(svg, axis, sx, sy, what, px + 16);
    for (const auto& x : xs) {
      svg.line(sx(x_pos(x)), sy.from, sx(x_pos(x)), sy.from + 4, "stroke=\"#333333\"");
      svg.text(sx(x_pos(x)), sy.from + 16, x, "middle", 10);
    }
    svg.text((sx.from + sx.to) / 2, py + kPanelH - 10, fig.x_label, "middle", 11);
    if (fig.axis == Axis::Log2 && csv.has("train_task")) {  // dashed line at the training length
      const size_t tt = std::find(facets.begin(), facets.end(), "train_task") - facets.begin();
      const auto trained = tt < facets.size() ? std::vector<std::string>{panels[p][tt]}
                                              : distinct(csv, rows, "train_task");
      double len;
      if (trained.size() == 1 && parse_float(spec_value(trained[0], "len"), len) && len > 0)
        svg.line(sx(std::log2(len)), sy.from, sx(std::log2(len)), sy.to,
                 "stroke=\"#666666\" stroke-dasharray=\"4,3\"");
    }
    const auto styles = encoding_styles(series);
    for (size_t s = 0; s < series.size(); ++s) {
      const EncodingStyle& style = styles[s];
      const double dodge = (double(s) - double(series.size() - 1) / 2) * 4;
      std::vector<std::pair<double, double>> line;
      std::vector<std::pair<std::string, const Point*>> here;
      for (const auto& x : xs) {
        Key k = panels[p];
        k.insert(k.end(), {series[s], x});
        const auto it = points.find(k);
        if (it == points.end()) continue;
        here.emplace_back(x, &it->second);
        line.emplace_back(sx(x_pos(x)) + dodge, sy(axis.at(it->second.y)));
      }
      if (here.empty()) continue;
      svg.open(fmt::format("g class=\"series\" data-pe=\"{}\"", xml_escape(series[s])));
      if (fig.axis != Axis::Category && line.size() > 1)
        svg.polyline(line, stroke(style, 1.5));
      for (const auto& [x, pt] : here) draw_point(svg, *pt, sx(x_pos(x)) + dodge, axis, sy, style, x, series[s]);
      svg.close("g");
    }
    svg.close("g");
  }
  finish_figure(svg, grid, o.out, panels.size(), series, false);
}

}  // namespace

void add_plot_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plot", "Draw an SVG figure from evals.csv (or history.csv: --figure curves)");
  cmd->footer(
      "Points are means over seeds of the configuration `table --best-over/--select-on` chooses; bars are the 95% "
      "nested bootstrap interval `table` prints when seqstats.csv lies beside the CSV, else ± 1 sd over seeds (the "
      "caption says which). On the log axis of error-rate, a cell with no error in N is drawn at the bound 3/N with "
      "a downward arrow. curves: history.csv, x = step, the mean over seeds with a min–max band, lr chosen on the "
      "final evaluation (evals.csv beside it, else the last point of each run).");
  auto o = std::make_shared<PlotOptions>();
  cmd->add_option("csv", o->csv, "evals.csv (history.csv for curves) from `pathbench collect`")
      ->type_name("FILE")
      ->required();
  cmd->add_option("--figure", o->figure, "acc-vs-depth, acc-vs-length, acc-vs (with --x), error-rate, min-depth or curves")
      ->required();
  cmd->add_option("--x", o->x, "acc-vs: the numeric column on the x axis, e.g. task_n_back")->type_name("COLUMN");
  cmd->add_option("-o,--out", o->out, "output .svg (a .png is added when rsvg-convert exists)")
      ->type_name("FILE")
      ->required();
  cmd->add_option("--split", o->split, "evaluation split (needed when the CSV has several, except error-rate)");
  cmd->add_option("--metric", o->metric, "acc or seq_acc (curves also: loss)")
      ->capture_default_str()
      ->check(CLI::IsMember({"acc", "seq_acc", "loss"}));
  cmd->add_option("--best-over", o->best_over,
                  "column (e.g. lr) chosen per series and panel by its best mean on --select-on, as `table --best-over`")
      ->capture_default_str();
  cmd->add_option("--select-on", o->select_on, "split on which --best-over chooses, SPLIT[,COLUMN=VALUE...] as in table")
      ->capture_default_str();
  cmd->add_option("--min-layers", o->min_layers, "min-depth: the threshold the metric must reach")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--min-layers-by", o->min_layers_by, "min-depth: the mean over seeds, any seed or all seeds")
      ->capture_default_str()
      ->check(CLI::IsMember({"mean", "any", "all"}));
  cmd->add_option("--where", o->where, "COLUMN=VALUE: keep only matching rows (repeatable)")
      ->allow_extra_args(false);
  cmd->callback([o] { run_plot(*o); });
}

}  // namespace pb
