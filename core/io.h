// File helpers: atomic writes (temp file + fsync + rename, so a reader never sees half a file and an
// interruption loses nothing finished) and whole-file reads with clear errors.
//
// What an output path may be (docs/guarantees.md): a regular file or a missing path is replaced by
// the rename; a symbolic link is followed (the file it resolves to is replaced, the link stays); a
// FIFO or a character device (/dev/stdout, /dev/null) is written in place, with no temporary; a
// directory, a block device, a socket or a link to nothing is a pb::Error.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace pb {

// A file written while streaming: bytes go to PATH.tmp.<pid>, commit() fsyncs and renames it to
// PATH, and destruction without commit() removes the temporary, so a failure or an interruption
// never leaves a partial PATH. The temporary is registered for remove_live_temporaries().
class AtomicOutput {
 public:
  // Fails with a pb::Error if PATH's directory does not exist, PATH is of a kind that is refused
  // (above), or the temporary cannot be created.
  explicit AtomicOutput(std::string path);
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  void write(const void* data, size_t n_bytes);
  void write_at(size_t offset, const void* data, size_t n_bytes);  // overwrite earlier bytes
  void commit();

 private:
  std::string path_;    // as given, for messages
  std::string target_;  // the file replaced (path_ with its links resolved), or "" when in place
  std::string tmp_;     // target_.tmp.<pid>, or "" when in place
  int fd_ = -1;
  int slot_ = -1;       // in the registry of live temporaries
};

// Writes `bytes` to `path` atomically (an AtomicOutput written once and committed).
void write_file_atomic(const std::string& path, std::string_view bytes);

// Removes the temporaries of every AtomicOutput alive in this process. Async-signal-safe: the
// signal handlers of the CLI call it before the process dies (runners/main.cpp).
void remove_live_temporaries();

// Appends one line (a '\n' is added) and flushes; used for metrics.jsonl / eval.jsonl.
void append_line(const std::string& path, std::string_view line);

// Reads a whole file; a missing or unreadable file is a pb::Error naming the path.
std::string read_file(const std::string& path);

}  // namespace pb
