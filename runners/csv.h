// RFC 4180 CSV: a header row, then rows of the same width; fields holding a comma, a quote, CR or
// LF are quoted ("" for a quote inside); records end with CRLF. The reader accepts LF or CRLF and
// rejects ragged rows and stray quotes with the file and line.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace pb {

struct Csv {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;

  // Index of column `name`; a pb::Error listing the columns if there is none.
  size_t column(std::string_view name) const;
  bool has(std::string_view name) const;
};

std::string write_csv(const Csv& csv);
// `path` names the source in error messages.
Csv parse_csv(std::string_view text, const std::string& path);
Csv read_csv(const std::string& path);

}  // namespace pb
