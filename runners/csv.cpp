#include "runners/csv.h"

#include "core/error.h"
#include "core/io.h"

namespace pb {

size_t Csv::column(std::string_view name) const {
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return i;
  std::string list;
  for (const auto& h : header) list += (list.empty() ? "" : ", ") + h;
  fail("no column '{}'; columns: {}", name, list);
}

bool Csv::has(std::string_view name) const {
  for (const auto& h : header)
    if (h == name) return true;
  return false;
}

static void write_field(std::string& out, const std::string& f) {
  if (f.find_first_of(",\"\r\n") == std::string::npos) {
    out += f;
    return;
  }
  out += '"';
  for (char c : f) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  out += '"';
}

static void write_record(std::string& out, const std::vector<std::string>& fields) {
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) out += ',';
    write_field(out, fields[i]);
  }
  out += "\r\n";
}

std::string write_csv(const Csv& csv) {
  std::string out;
  write_record(out, csv.header);
  for (const auto& row : csv.rows) write_record(out, row);
  return out;
}

Csv parse_csv(std::string_view text, const std::string& path) {
  std::vector<std::vector<std::string>> records;
  std::vector<size_t> record_lines;
  std::vector<std::string> record;
  std::string field;
  size_t line = 1, i = 0;
  bool at_record_start = true;
  while (i < text.size()) {
    if (at_record_start) record_lines.push_back(line), at_record_start = false;
    if (text[i] == '"') {  // quoted field
      const size_t start_line = line;
      for (++i;; ++i) {
        if (i >= text.size()) fail("{}:{}: unterminated quoted field", path, start_line);
        if (text[i] == '"') {
          if (i + 1 < text.size() && text[i + 1] == '"') field += '"', ++i;
          else break;
        } else {
          line += text[i] == '\n';
          field += text[i];
        }
      }
      ++i;
      if (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r')
        fail("{}:{}: unexpected '{}' after a closing quote", path, line, text[i]);
    } else {
      while (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r') {
        if (text[i] == '"') fail("{}:{}: quote inside an unquoted field (quote the whole field)", path, line);
        field += text[i++];
      }
    }
    record.push_back(std::move(field));
    field.clear();
    if (i < text.size() && text[i] == ',') {
      ++i;
      if (i == text.size()) record.emplace_back();
      continue;
    }
    if (i < text.size() && text[i] == '\r') {
      if (i + 1 >= text.size() || text[i + 1] != '\n') fail("{}:{}: bare CR outside quotes", path, line);
      ++i;
    }
    ++i, ++line;  // past '\n' (or the end)
    records.push_back(std::move(record));
    record.clear();
    at_record_start = true;
  }
  if (records.empty()) fail("{}: empty CSV (expected a header row)", path);
  Csv csv;
  csv.header = std::move(records[0]);
  for (size_t r = 1; r < records.size(); ++r) {
    if (records[r].size() != csv.header.size())
      fail("{}:{}: row has {} fields, the header has {}", path, record_lines[r], records[r].size(),
           csv.header.size());
    csv.rows.push_back(std::move(records[r]));
  }
  return csv;
}

Csv read_csv(const std::string& path) { return parse_csv(read_file(path), path); }

}  // namespace pb
