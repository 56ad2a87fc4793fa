// File helpers: atomic writes (temp file + fsync + rename, so a reader never sees half a file and an
// interruption loses nothing finished) and whole-file reads with clear errors.
#pragma once
#include <string>
#include <string_view>

namespace pb {

// Writes `bytes` to `path` atomically: `path.tmp.<pid>` is written, flushed to disk and renamed.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Appends one line (a '\n' is added) and flushes; used for metrics.jsonl / eval.jsonl.
void append_line(const std::string& path, std::string_view line);

// Reads a whole file; a missing or unreadable file is a pb::Error naming the path.
std::string read_file(const std::string& path);

}  // namespace pb
