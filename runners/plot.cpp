// The page, axes, clipping, caption, legend and file writer shared by the figures of `pathbench plot`.
#include "runners/plot.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/io.h"

extern char** environ;

namespace pb {

double YAxis::at(double v) const {
  const double a = log ? (v > 0 ? std::log10(v) : lo) : v;
  return std::clamp(a, lo, hi);
}

bool YAxis::inside(double v) const {
  if (log && v <= 0) return false;
  const double a = log ? std::log10(v) : v;
  return a >= lo && a <= hi;
}

Bar clip_bar(double lo, double hi, const YAxis& axis, const Scale& sy) {
  return {sy(axis.at(lo)), sy(axis.at(hi)), axis.inside(lo), axis.inside(hi)};
}

YAxis log_axis(const std::vector<double>& values) {
  double least = 1;
  for (double v : values)
    if (v > 0) least = std::min(least, v);
  return {true, std::min(std::floor(std::log10(least)), -1.0), 0};
}

std::vector<std::string> varying(const Csv& csv, const std::vector<size_t>& rows,
                                 const std::vector<std::string>& candidates) {
  std::vector<std::string> out;
  for (const auto& f : candidates)
    if (csv.has(f) && distinct(csv, rows, f).size() > 1) out.push_back(f);
  return out;
}

std::string panel_title(const Csv& csv, const std::vector<size_t>& rows, const std::vector<std::string>& facets,
                        const Key& panel) {
  std::string title;
  for (size_t f = 0; f < facets.size(); ++f) {
    const auto values = distinct(csv, rows, facets[f]);
    const auto label = labels(facets[f], values)[std::find(values.begin(), values.end(), panel[f]) - values.begin()];
    const bool spec = facets[f] == "task" || facets[f] == "train_task";
    std::string text = spec ? label : facets[f] + "=" + label;
    if (facets[f] == "distance_from" && csv.has("distance_to"))  // "distance 64–127"
      for (size_t r : rows)
        if (csv.rows[r][csv.column("distance_from")] == panel[f]) {
          text = fmt::format("distance {}–{}", panel[f], number(csv.rows[r][csv.column("distance_to")], "distance_to") - 1);
          break;
        }
    title += (f ? ", " : "") + text;
  }
  return title;
}

std::string task_text(const Csv& csv, const std::vector<size_t>& rows, const std::vector<std::string>& columns) {
  for (const auto& c : columns)
    if (csv.has(c)) {
      const auto values = distinct(csv, rows, c);
      if (values.size() == 1) return values[0];
      break;
    }
  if (csv.has("task_name") && distinct(csv, rows, "task_name").size() == 1) return distinct(csv, rows, "task_name")[0];
  return "several tasks (panels)";
}

std::string per_value_text(const Csv& csv, const std::vector<size_t>& rows, const std::string& column,
                           const std::string& by) {
  const auto all = distinct(csv, rows, column);
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : "–") + x;
    return s;
  };
  const std::string range = all.size() == 1 ? all[0] : join({all.front(), all.back()});
  if (all.size() == 1 || by.empty() || !csv.has(by)) return range;
  std::string out;
  const size_t b = csv.column(by);
  for (const auto& v : distinct(csv, rows, by)) {
    std::vector<size_t> of;
    for (size_t r : rows)
      if (csv.rows[r][b] == v) of.push_back(r);
    const auto values = distinct(csv, of, column);
    out += (out.empty() ? "" : ", ") + v + " " + (values.size() == 1 ? values[0] : join({values.front(), values.back()}));
  }
  return out;
}

std::string seeds_text(size_t lo, size_t hi) {
  return lo == hi ? fmt::format("{} seeds", lo) : fmt::format("{}–{} seeds", lo, hi);
}

double draw_caption(Svg& svg, const std::vector<std::string>& lines, double width) {
  svg.open("g class=\"caption\"");
  std::string whole;
  for (const auto& l : lines) whole += (whole.empty() ? "" : whole.back() == '.' ? " " : ". ") + l;
  svg.desc(whole);
  double y = 6;
  for (size_t i = 0; i < lines.size(); ++i) {
    const double size = i == 0 ? 12 : 10;
    const size_t per_line = std::max<size_t>(20, size_t((width - 20) / (0.55 * size)));
    std::string line;
    auto flush = [&] {
      y += size + 4;
      svg.text(10, y, line, "start", size);
      line.clear();
    };
    for (size_t at = 0; at < lines[i].size();) {  // words, wrapped at spaces
      const size_t end = std::min(lines[i].find(' ', at), lines[i].size());
      const std::string word = lines[i].substr(at, end - at);
      if (!line.empty() && line.size() + 1 + word.size() > per_line) flush();
      line += (line.empty() ? "" : " ") + word;
      at = end + 1;
    }
    if (!line.empty()) flush();
  }
  svg.close("g");
  return y + 8;
}

double draw_legend(Svg& svg, double x, double y, const std::vector<std::string>& pes, bool line) {
  const auto names = labels("pe", pes);
  const auto styles = encoding_styles(pes);
  svg.open("g class=\"legend\"");
  for (size_t s = 0; s < pes.size(); ++s) {
    const EncodingStyle& style = styles[s];
    if (line) svg.line(x, y, x + 16, y, stroke(style, 2));
    else svg.marker(x + 8, y, style, false);
    svg.text(x + 22, y + 4, names[s], "start", 11);
    y += 18;
  }
  svg.close("g");
  return y;
}

void draw_y_axis(Svg& svg, const YAxis& axis, const Scale& sx, const Scale& sy, const std::string& label,
                 double label_x) {
  svg.rect(std::min(sx.from, sx.to), sy.to, std::abs(sx.to - sx.from), sy.from - sy.to,
           "class=\"frame\" fill=\"none\" stroke=\"#333333\"");
  const std::string grid = "stroke=\"#dddddd\" stroke-width=\"0.8\"";
  if (axis.log) {
    for (double d = axis.lo; d <= axis.hi; d += 1) {
      svg.line(sx.from, sy(d), sx.to, sy(d), grid);
      svg.text(sx.from - 5, sy(d) + 4, d == 0 ? "1" : fmt::format("1e{}", d), "end", 10);
    }
  } else {
    const int n = axis.tick > 0 ? int(std::lround((axis.hi - axis.lo) / axis.tick)) : 5;
    for (int i = 0; i <= n; ++i) {
      const double v = axis.lo + (axis.hi - axis.lo) * i / n;
      svg.line(sx.from, sy(v), sx.to, sy(v), grid);
      svg.text(sx.from - 5, sy(v) + 4, fmt::format("{:.3g}", v), "end", 10);
    }
  }
  svg.text(label_x, (sy.from + sy.to) / 2, label, "middle", 11, -90);
}

void draw_arrow(Svg& svg, double x, double y_from, double y_to, const EncodingStyle& style) {
  const std::string line = stroke({style.colour, style.sides, style.rotation, ""}, 1.5);
  const double back = y_to > y_from ? 4 : -4;  // the head's barbs, towards y_from
  svg.line(x, y_from, x, y_to, line);
  svg.polyline({{x - 3, y_to - back}, {x, y_to}, {x + 3, y_to - back}}, line);
}

namespace {

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
  namespace fs = std::filesystem;
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

void write_figure(const std::string& path, const Svg& svg, double width, double height, size_t panels,
                  size_t series) {
  write_file_atomic(path, svg.finish(width, height));
  fmt::print(stderr, "plot: {} ({} panels, {} encodings)\n", path, panels, series);
  write_png(path);
}

}  // namespace

void finish_figure(Svg& svg, const PanelGrid& grid, const std::string& path, size_t panels,
                   const std::vector<std::string>& series, bool line) {
  const double legend_end = draw_legend(svg, double(grid.cols) * kPanelW + 10, grid.top + kTop, series, line);
  const double height = std::max(grid.top + double(grid.rows) * kPanelH, legend_end + 10);
  write_figure(path, svg, grid.width, height, panels, series.size());
}

}  // namespace pb
