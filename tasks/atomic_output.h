// A file written atomically while streaming: bytes go to PATH.tmp.<pid>, commit() fsyncs and
// renames it to PATH, and destruction without commit() removes the temporary. So a failure or an
// interruption never leaves a partial PATH (core/io.h does the same for whole buffers).
#pragma once
#include <cstddef>
#include <string>

namespace pb {

class AtomicOutput {
 public:
  // Fails with a pb::Error if PATH's directory does not exist or the temporary cannot be created.
  explicit AtomicOutput(std::string path);
  ~AtomicOutput();
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  void write(const void* data, size_t n_bytes);
  void write_at(size_t offset, const void* data, size_t n_bytes);  // overwrite earlier bytes
  void commit();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

}  // namespace pb
