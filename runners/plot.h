// Shared by the figures of `pathbench plot` (cmd_plot.cpp: a point and an interval per encoding
// and x; plot_curves.cpp: learning curves): options, page layout, axes, clipped intervals,
// captions, the legend and the file writer.
#pragma once
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "runners/results.h"
#include "runners/svg.h"

namespace pb {

struct PlotOptions {
  std::string csv, figure, out, split, metric = "acc", best_over = "lr", select_on = "val";
  std::string x;                       // acc-vs: the column on the x axis (e.g. task_n_back)
  std::vector<std::string> where;
  double min_layers = 0.9;             // min-depth: the threshold
  std::string min_layers_by = "mean";  // min-depth: mean | any | all (seeds)
};

constexpr double kPanelW = 300, kPanelH = 230, kLeft = 58, kRight = 14, kTop = 30, kBottom = 46;
constexpr double kLegendW = 190;

// Panels three to a row under the caption, the legend to their right.
struct PanelGrid {
  explicit PanelGrid(size_t panels)
      : cols(std::min<size_t>(panels, 3)), rows((panels + cols - 1) / cols), width(double(cols) * kPanelW + kLegendW) {}
  double x(size_t p) const { return double(p % cols) * kPanelW; }     // panel p's left edge
  double y(size_t p) const { return top + double(p / cols) * kPanelH; }  // its top edge
  size_t cols, rows;
  double width;     // of the page
  double top = 0;   // where the panels start: below the caption (draw_caption's result)
};

// "3 seeds" or "2–3 seeds", for the caption.
std::string seeds_text(size_t lo, size_t hi);

struct Scale {
  double lo, hi, from, to;  // data range -> pixel range
  double operator()(double v) const { return from + (v - lo) / (hi - lo) * (to - from); }
};

// A value axis: linear over [lo, hi], or logarithmic over the decades 10^lo … 10^hi.
struct YAxis {
  bool log = false;
  double lo = 0, hi = 1;
  double tick = 0;  // linear: the grid's spacing (0: five intervals)
  // v in axis coordinates, clamped to [lo, hi] (a log axis takes v <= 0 to its floor).
  double at(double v) const;
  // Whether v lies inside the axis range (0 on a log axis does not).
  bool inside(double v) const;
};

// An interval [lo, hi] on `axis`, in pixels (`sy` maps axis coordinates), cut to the plot area;
// an end that was cut gets no cap, so a bar that reaches the frame without a cap goes on past it.
struct Bar {
  double y_lo, y_hi;
  bool cap_lo, cap_hi;
};
Bar clip_bar(double lo, double hi, const YAxis& axis, const Scale& sy);

// The log axis of error rates: whole decades from below the smallest value > 0 of `values` up to
// 1 (at least one decade).
YAxis log_axis(const std::vector<double>& values);

// The settings among `candidates` that take several values on `rows` (one panel per combination).
std::vector<std::string> varying(const Csv& csv, const std::vector<size_t>& rows,
                                 const std::vector<std::string>& candidates);
// A panel's title from its values of `facets`.
std::string panel_title(const Csv& csv, const std::vector<size_t>& rows, const std::vector<std::string>& facets,
                        const Key& panel);
// The task of the figure for its caption: the one value of the first of `columns` the CSV has,
// else the one task_name, else "several tasks (panels)".
std::string task_text(const Csv& csv, const std::vector<size_t>& rows, const std::vector<std::string>& columns);
// "16384", or "val 16384, val_sparse 327680" when `column` differs by `by` ("" for none).
std::string per_value_text(const Csv& csv, const std::vector<size_t>& rows, const std::string& column,
                           const std::string& by);

// Draws the caption (first line as a title, every line wrapped to `width`) at the top of the page,
// in a group of class "caption" that also holds it unwrapped in a <desc>; returns its height.
double draw_caption(Svg& svg, const std::vector<std::string>& lines, double width);
// Draws the encodings' legend from (x, y): their markers, or with `line` line samples. Returns
// the y below it.
double draw_legend(Svg& svg, double x, double y, const std::vector<std::string>& pes, bool line);
// A vertical arrow in `style`'s colour, solid, from y_from to its head at y_to (marking a bound).
void draw_arrow(Svg& svg, double x, double y_from, double y_to, const EncodingStyle& style);
// Frame, grid and tick labels of a panel's value axis.
void draw_y_axis(Svg& svg, const YAxis& axis, const Scale& sx, const Scale& sy, const std::string& label,
                 double label_x);

// Draws the legend of `series` right of the panels of `grid` (line samples with `line`, else
// markers) and writes the page to `path` atomically, and a PNG beside it when rsvg-convert is on
// PATH.
void finish_figure(Svg& svg, const PanelGrid& grid, const std::string& path, size_t panels,
                   const std::vector<std::string>& series, bool line);

void plot_curves(const PlotOptions& o);
void plot_min_depth(const PlotOptions& o);

}  // namespace pb
