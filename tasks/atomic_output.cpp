// Streams to PATH.tmp.<pid> and renames on commit (see atomic_output.h).
#include "tasks/atomic_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace pb {

AtomicOutput::AtomicOutput(std::string path) : path_(std::move(path)) {
  const auto dir = std::filesystem::path(path_).parent_path();
  std::error_code ec;
  if (!dir.empty() && !std::filesystem::is_directory(dir, ec))
    fail("cannot write '{}': directory '{}' does not exist (create it first)", path_, dir.string());
  tmp_ = path_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create '{}': {}", tmp_, std::strerror(errno));
}

AtomicOutput::~AtomicOutput() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicOutput::write(const void* data, size_t n_bytes) {
  const char* p = static_cast<const char*>(data);
  while (n_bytes > 0) {
    const ssize_t n = ::write(fd_, p, n_bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot write '{}': {}", tmp_, std::strerror(errno));
    p += n, n_bytes -= static_cast<size_t>(n);
  }
}

void AtomicOutput::write_at(size_t offset, const void* data, size_t n_bytes) {
  const char* p = static_cast<const char*>(data);
  while (n_bytes > 0) {
    const ssize_t n = ::pwrite(fd_, p, n_bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot write '{}': {}", tmp_, std::strerror(errno));
    p += n, n_bytes -= static_cast<size_t>(n), offset += static_cast<size_t>(n);
  }
}

void AtomicOutput::commit() {
  if (::fsync(fd_) != 0) fail("cannot flush '{}': {}", tmp_, std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    fail("cannot rename '{}' to '{}': {}", tmp_, path_, std::strerror(err));
  }
}

}  // namespace pb
