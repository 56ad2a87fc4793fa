#include "runners/svg.h"

#include <fmt/format.h>

#include <cmath>

namespace pb {

std::string xml_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

static std::string n(double v) {
  const std::string s = fmt::format("{:.2f}", v);
  return s == "-0.00" ? "0.00" : s;
}

void Svg::indent() { body_.append(2 * static_cast<size_t>(depth_), ' '); }

void Svg::open(std::string_view tag_and_attrs) {
  indent();
  body_ += fmt::format("<{}>\n", tag_and_attrs);
  ++depth_;
}

void Svg::close(std::string_view tag) {
  --depth_;
  indent();
  body_ += fmt::format("</{}>\n", tag);
}

void Svg::line(double x1, double y1, double x2, double y2, std::string_view style) {
  indent();
  body_ += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" {}/>\n", n(x1), n(y1), n(x2), n(y2), style);
}

void Svg::polyline(const std::vector<std::pair<double, double>>& points, std::string_view style) {
  std::string pts;
  for (const auto& [x, y] : points) pts += fmt::format("{}{},{}", pts.empty() ? "" : " ", n(x), n(y));
  indent();
  body_ += fmt::format("<polyline points=\"{}\" fill=\"none\" {}/>\n", pts, style);
}

void Svg::polygon(const std::vector<std::pair<double, double>>& points, std::string_view style) {
  std::string pts;
  for (const auto& [x, y] : points) pts += fmt::format("{}{},{}", pts.empty() ? "" : " ", n(x), n(y));
  indent();
  body_ += fmt::format("<polygon points=\"{}\" {}/>\n", pts, style);
}

void Svg::title(std::string_view s) {
  indent();
  body_ += fmt::format("<title>{}</title>\n", xml_escape(s));
}

void Svg::desc(std::string_view s) {
  indent();
  body_ += fmt::format("<desc>{}</desc>\n", xml_escape(s));
}

void Svg::rect(double x, double y, double w, double h, std::string_view style) {
  indent();
  body_ += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" {}/>\n", n(x), n(y), n(w), n(h), style);
}

void Svg::text(double x, double y, std::string_view s, std::string_view anchor, double size, double rotate) {
  indent();
  const std::string turn = rotate == 0 ? "" : fmt::format(" transform=\"rotate({} {} {})\"", n(rotate), n(x), n(y));
  body_ += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"{}\" text-anchor=\"{}\"{}>{}</text>\n", n(x), n(y),
                       n(size), anchor, turn, xml_escape(s));
}

void Svg::marker(double x, double y, const EncodingStyle& style, bool hollow) {
  const std::string paint = fmt::format("fill=\"{}\" stroke=\"{}\" stroke-width=\"1.5\"",
                                        hollow ? "#ffffff" : style.colour, style.colour);
  indent();
  if (style.sides == 0) {
    body_ += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"4.00\" {}/>\n", n(x), n(y), paint);
    return;
  }
  std::string pts;
  const double r = style.sides == 3 ? 5.5 : 5.0, pi = 3.14159265358979323846;
  for (int i = 0; i < style.sides; ++i) {
    const double a = (style.rotation + 360.0 * i / style.sides) * pi / 180;
    pts += fmt::format("{}{},{}", i ? " " : "", n(x + r * std::sin(a)), n(y - r * std::cos(a)));
  }
  body_ += fmt::format("<polygon points=\"{}\" {}/>\n", pts, paint);
}

std::string Svg::finish(double width, double height) const {
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"Helvetica, Arial, sans-serif\">\n"
      "  <rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"#ffffff\"/>\n{2}</svg>\n",
      n(width), n(height), body_);
}

}  // namespace pb
