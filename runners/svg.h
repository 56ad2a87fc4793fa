// A minimal SVG writer for the figures: elements are appended as text with fixed number
// formatting, so the same drawing calls give the same bytes.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runners/results.h"

namespace pb {

std::string xml_escape(std::string_view s);

class Svg {
 public:
  void open(std::string_view tag_and_attrs);  // e.g. open("g class=\"panel\"")
  void close(std::string_view tag);
  void line(double x1, double y1, double x2, double y2, std::string_view style);
  void polyline(const std::vector<std::pair<double, double>>& points, std::string_view style);
  void polygon(const std::vector<std::pair<double, double>>& points, std::string_view style);
  void rect(double x, double y, double w, double h, std::string_view style);
  void title(std::string_view s);  // a tooltip of the enclosing group
  void desc(std::string_view s);   // a text description of the enclosing group
  // anchor: start | middle | end; rotate: degrees about (x, y).
  void text(double x, double y, std::string_view s, std::string_view anchor, double size, double rotate = 0);
  // The encoding's marker centred at (x, y); hollow: white fill (used for "zero errors").
  void marker(double x, double y, const EncodingStyle& style, bool hollow);
  std::string finish(double width, double height) const;  // the whole document

 private:
  std::string body_;
  int depth_ = 1;
  void indent();
};

}  // namespace pb
