// `pathbench plot CSV --figure F -o FIG.svg`: a figure from evals.csv with the built-in SVG
// writer. One series per encoding (fixed colour and marker, results.h), one panel per value of
// the settings that vary besides the axes, mean ± 1 sd over seeds, the best lr per point.
// The same CSV gives the same bytes. A PNG is written beside it when rsvg-convert is on PATH.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <tuple>

#include "core/error.h"
#include "core/io.h"
#include "core/spec.h"
#include "runners/commands.h"
#include "runners/results.h"
#include "runners/svg.h"

extern char** environ;

namespace pb {
namespace fs = std::filesystem;

namespace {

enum class Axis { Linear, Log2, Category };

struct Figure {
  std::string x;                    // column on the x axis
  Axis axis;
  bool error_rate;                  // y = 1 − metric on a log axis
  std::string x_label;
  std::vector<std::string> facets;  // columns that split panels when they vary
};

Figure figure_of(const std::string& name) {
  if (name == "acc-vs-depth") return {"layers", Axis::Linear, false, "layers", {"task", "d_model", "heads", "steps", "batch"}};
  if (name == "acc-vs-length")
    return {"len", Axis::Log2, false, "sequence length", {"train_task", "layers", "d_model", "heads", "steps", "batch"}};
  return {"split", Axis::Category, true, "evaluation split", {"task", "layers", "d_model", "heads", "steps", "batch"}};
}

struct PlotOptions {
  std::string csv, figure, out, split, metric = "acc", best_over = "lr", select_on = "val";
  std::vector<std::string> where;
};

constexpr double kPanelW = 300, kPanelH = 230, kLeft = 58, kRight = 14, kTop = 30, kBottom = 46;
constexpr double kLegendW = 190;

struct Scale {
  double lo, hi, from, to;  // data range -> pixel range
  double operator()(double v) const { return from + (v - lo) / (hi - lo) * (to - from); }
};

std::string spec_value(const std::string& spec, const std::string& key) {
  const auto at = spec.find(key + "=", spec.find(':'));
  if (spec.find(':') == std::string::npos || at == std::string::npos) return "";
  const char before = spec[at - 1];
  if (before != ':' && before != ',') return "";
  return spec.substr(at + key.size() + 1, spec.find(',', at) - at - key.size() - 1);
}

// Writes a PNG beside the SVG if rsvg-convert is installed (optional).
void write_png(const std::string& svg_path) {
  const char* path = std::getenv("PATH");
  bool found = false;
  for (std::string_view p = path ? path : ""; !found && !p.empty();) {
    const auto colon = p.find(':');
    found = ::access((std::string(p.substr(0, colon)) + "/rsvg-convert").c_str(), X_OK) == 0;
    p = colon == std::string_view::npos ? std::string_view() : p.substr(colon + 1);
  }
  if (!found) return;
  const std::string png = fs::path(svg_path).replace_extension(".png").string(), tmp = png + ".tmp";
  std::vector<std::string> args = {"rsvg-convert", "-o", tmp, svg_path};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  int status = 1;
  if (::posix_spawnp(&pid, "rsvg-convert", nullptr, nullptr, argv.data(), environ) == 0) ::waitpid(pid, &status, 0);
  if (status == 0 && std::rename(tmp.c_str(), png.c_str()) == 0) return;
  std::remove(tmp.c_str());
  fmt::print(stderr, "plot: rsvg-convert failed; no PNG written\n");
}

void run_plot(PlotOptions o) {
  const Figure fig = figure_of(o.figure);
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
  std::vector<std::string> facets;
  for (const auto& f : fig.facets)
    if (csv.has(f) && distinct(csv, rows, f).size() > 1) facets.push_back(f);
  std::vector<std::string> keys = facets;
  keys.insert(keys.end(), {"pe", fig.x});
  std::string note;  // the choices: `table --best-over` prints them; the figure names the rule
  if (csv.has(o.best_over))
    rows = chosen_rows(csv, o.csv, {o.best_over, o.select_on, user_where}, o.metric, keys, rows, false, note);
  const Cells cells = aggregate(csv, rows, keys, o.metric, "", false);
  if (cells.empty()) fail("{}: no values in column '{}' for the selection", o.csv, o.metric);

  // Panels, series and x positions, all in value order.
  std::vector<Key> panels;
  for (const auto& [key, st] : cells) {
    const Key p(key.begin(), key.begin() + static_cast<long>(facets.size()));
    if (panels.empty() || panels.back() != p) panels.push_back(p);
  }
  const auto series = distinct(csv, rows, "pe"), series_labels = labels("pe", series);
  const auto xs = distinct(csv, rows, fig.x);
  auto x_pos = [&](const std::string& v) {
    if (fig.axis == Axis::Category) return double(std::find(xs.begin(), xs.end(), v) - xs.begin());
    const double d = number(v, fig.x);
    return fig.axis == Axis::Log2 ? std::log2(d) : d;
  };
  const double x_lo = x_pos(xs.front()) - 0.5, x_hi = x_pos(xs.back()) + 0.5;

  // y: [0, 1], or error rates on a log axis reaching the resolution 1/n, where zeros are drawn.
  const std::string n_col = o.metric == "seq_acc" ? "n_seqs" : "n";
  double n_max = 0;
  if (fig.error_rate && csv.has(n_col))
    for (size_t r : rows)
      if (const auto& v = csv.rows[r][csv.column(n_col)]; !v.empty()) n_max = std::max(n_max, number(v, n_col));
  const double floor_y = n_max > 0 ? 1 / n_max : 1e-6;
  double y_min = floor_y;
  for (const auto& [key, st] : cells) {
    const double err = 1 - st.mean;
    if (err > 0) y_min = std::min(y_min, err - st.sd > 0 ? err - st.sd : err);
  }
  const double decade_lo = std::floor(std::log10(y_min));
  auto y_val = [&](double v) { return fig.error_rate ? std::log10(std::max(v, floor_y)) : v; };

  const size_t n_cols = std::min<size_t>(panels.size(), 3), n_rows = (panels.size() + n_cols - 1) / n_cols;
  Svg svg;
  for (size_t p = 0; p < panels.size(); ++p) {
    const double px = double(p % n_cols) * kPanelW, py = double(p / n_cols) * kPanelH;
    const Scale sx{x_lo, x_hi, px + kLeft, px + kPanelW - kRight};
    const Scale sy{fig.error_rate ? decade_lo : 0.0, fig.error_rate ? 0.0 : 1.0, py + kPanelH - kBottom, py + kTop};
    std::string title;
    for (size_t f = 0; f < facets.size(); ++f) {
      const auto values = distinct(csv, rows, facets[f]);
      const auto label = labels(facets[f], values)[std::find(values.begin(), values.end(), panels[p][f]) - values.begin()];
      const bool spec = facets[f] == "task" || facets[f] == "train_task";
      title += (f ? ", " : "") + (spec ? label : facets[f] + "=" + label);
    }
    svg.open("g class=\"panel\"");
    svg.text(px + (kLeft + kPanelW - kRight) / 2, py + kTop - 10, title, "middle", 11);
    svg.rect(sx.to < sx.from ? sx.to : sx.from, sy.to, sx.to - sx.from, sy.from - sy.to,
             "fill=\"none\" stroke=\"#333333\"");
    const std::string grid = "stroke=\"#dddddd\" stroke-width=\"0.8\"";
    if (fig.error_rate) {
      for (double d = decade_lo; d <= 0; d += 1) {
        svg.line(sx.from, sy(d), sx.to, sy(d), grid);
        svg.text(sx.from - 5, sy(d) + 4, d == 0 ? "1" : fmt::format("1e{}", d), "end", 10);
      }
    } else {
      for (int i = 0; i <= 5; ++i) {
        svg.line(sx.from, sy(i / 5.0), sx.to, sy(i / 5.0), grid);
        svg.text(sx.from - 5, sy(i / 5.0) + 4, fmt::format("{:.1f}", i / 5.0), "end", 10);
      }
    }
    for (const auto& x : xs) {
      svg.line(sx(x_pos(x)), sy.from, sx(x_pos(x)), sy.from + 4, "stroke=\"#333333\"");
      svg.text(sx(x_pos(x)), sy.from + 16, x, "middle", 10);
    }
    svg.text((sx.from + sx.to) / 2, py + kPanelH - 10, fig.x_label, "middle", 11);
    svg.text(px + 16, (sy.from + sy.to) / 2,
             fig.error_rate ? "error rate (1 − " + o.metric + ")" : o.metric == "acc" ? "accuracy" : o.metric,
             "middle", 11, -90);
    if (fig.axis == Axis::Log2 && csv.has("train_task")) {  // dashed line at the training length
      const size_t tt = std::find(facets.begin(), facets.end(), "train_task") - facets.begin();
      const auto trained = tt < facets.size() ? std::vector<std::string>{panels[p][tt]}
                                              : distinct(csv, rows, "train_task");
      double len;
      if (trained.size() == 1 && parse_float(spec_value(trained[0], "len"), len) && len > 0)
        svg.line(sx(std::log2(len)), sy.from, sx(std::log2(len)), sy.to,
                 "stroke=\"#666666\" stroke-dasharray=\"4,3\"");
    }
    for (size_t s = 0; s < series.size(); ++s) {
      const EncodingStyle style = encoding_style(series[s]);
      const double dodge = (double(s) - double(series.size() - 1) / 2) * 4;
      std::vector<std::pair<double, double>> line;
      std::vector<std::tuple<double, double, double, double, bool>> points;  // x, y, y_lo, y_hi, zero
      for (const auto& x : xs) {
        Key k = panels[p];
        k.insert(k.end(), {series[s], x});
        auto it = cells.find(k);
        if (it == cells.end()) continue;
        const Stat& st = it->second;
        const double v = fig.error_rate ? 1 - st.mean : st.mean;
        const double X = sx(x_pos(x)) + dodge;
        line.emplace_back(X, sy(y_val(v)));
        points.emplace_back(X, sy(y_val(v)), sy(y_val(v - st.sd)), sy(y_val(v + st.sd)), fig.error_rate && v <= 0);
      }
      if (points.empty()) continue;
      svg.open(fmt::format("g class=\"series\" data-pe=\"{}\"", xml_escape(series[s])));
      const std::string stroke = fmt::format("stroke=\"{}\" stroke-width=\"1.5\"", style.colour);
      if (fig.axis != Axis::Category && line.size() > 1) svg.polyline(line, stroke);
      for (const auto& [X, Y, lo, hi, zero] : points) {
        if (lo != hi) {
          svg.line(X, lo, X, hi, stroke);
          svg.line(X - 3, lo, X + 3, lo, stroke);
          svg.line(X - 3, hi, X + 3, hi, stroke);
        }
        svg.marker(X, Y, style, zero);
      }
      svg.close("g");
    }
    svg.close("g");
  }
  // Legend: encodings in the fixed order, then notes.
  const double lx = double(n_cols) * kPanelW + 10;
  double ly = kTop;
  svg.open("g class=\"legend\"");
  for (size_t s = 0; s < series.size(); ++s) {
    svg.marker(lx + 8, ly, encoding_style(series[s]), false);
    svg.text(lx + 20, ly + 4, series_labels[s], "start", 11);
    ly += 18;
  }
  std::vector<std::string> notes = {"mean ± 1 sd over seeds"};
  if (csv.has(o.best_over)) notes.push_back(fmt::format("{} chosen on {},", o.best_over, o.select_on));
  if (fig.error_rate) notes.push_back("open marker: no errors,");
  if (fig.error_rate) notes.push_back(n_max > 0 ? fmt::format("i.e. < 1/n (n = {:g})", n_max) : "drawn at 1e-6");
  if (!o.split.empty()) notes.push_back("split: " + o.split);
  for (const auto& note : notes) {
    ly += 4;
    svg.text(lx, ly + 4, note, "start", 9);
    ly += 14;
  }
  svg.close("g");
  const double width = double(n_cols) * kPanelW + kLegendW, height = std::max(double(n_rows) * kPanelH, ly + 10);
  write_file_atomic(o.out, svg.finish(width, height));
  fmt::print(stderr, "plot: {} ({} panels, {} encodings)\n", o.out, panels.size(), series.size());
  write_png(o.out);
}

}  // namespace

void add_plot_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plot", "Draw an SVG figure from evals.csv");
  auto o = std::make_shared<PlotOptions>();
  cmd->add_option("csv", o->csv, "evals.csv from `pathbench collect`")->type_name("FILE")->required();
  cmd->add_option("--figure", o->figure, "what to draw")
      ->required()
      ->check(CLI::IsMember({"acc-vs-depth", "acc-vs-length", "error-rate"}));
  cmd->add_option("-o,--out", o->out, "output .svg (a .png is added when rsvg-convert exists)")
      ->type_name("FILE")
      ->required();
  cmd->add_option("--split", o->split, "evaluation split (needed when the CSV has several, except error-rate)");
  cmd->add_option("--metric", o->metric, "acc or seq_acc")
      ->capture_default_str()
      ->check(CLI::IsMember({"acc", "seq_acc"}));
  cmd->add_option("--best-over", o->best_over,
                  "column (e.g. lr) chosen per series and x by its best mean on --select-on, as `table --best-over`")
      ->capture_default_str();
  cmd->add_option("--select-on", o->select_on, "split on which --best-over chooses")->capture_default_str();
  cmd->add_option("--where", o->where, "COLUMN=VALUE: keep only matching rows (repeatable)")
      ->allow_extra_args(false);
  cmd->callback([o] { run_plot(*o); });
}

}  // namespace pb
