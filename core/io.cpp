#include "core/io.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace pb {

namespace {

// The registry of live temporaries: fixed slots, so that a signal handler walks it without a lock
// or an allocation. state: 0 free, 1 being filled, 2 live.
constexpr int kMaxTemporaries = 256;
struct TempSlot {
  std::atomic<int> state{0};
  char path[PATH_MAX];
};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler reads the slots' state");
TempSlot g_temporaries[kMaxTemporaries];

// A slot now holding `path`, or −1 when every slot is taken (that temporary then stays behind if a
// signal ends the process, as any file does after SIGKILL).
int register_temporary(const std::string& path) {
  if (path.size() >= PATH_MAX) return -1;
  for (int i = 0; i < kMaxTemporaries; ++i) {
    int expected = 0;
    if (!g_temporaries[i].state.compare_exchange_strong(expected, 1)) continue;
    std::memcpy(g_temporaries[i].path, path.c_str(), path.size() + 1);
    g_temporaries[i].state.store(2);
    return i;
  }
  return -1;
}

void release_temporary(int& slot) {
  if (slot >= 0) g_temporaries[slot].state.store(0);
  slot = -1;
}

void write_all(int fd, const char* p, size_t n_bytes, const std::string& path) {
  while (n_bytes > 0) {
    const ssize_t n = ::write(fd, p, n_bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot write '{}': {}", path, std::strerror(errno));
    p += n, n_bytes -= static_cast<size_t>(n);
  }
}

const char* kind_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

void remove_live_temporaries() {
  for (auto& slot : g_temporaries)
    if (slot.state.load() == 2) ::unlink(slot.path);
}

AtomicOutput::AtomicOutput(std::string path) : path_(std::move(path)) {
  struct stat st;
  if (::lstat(path_.c_str(), &st) != 0) {
    if (errno != ENOENT) fail("cannot write '{}': {}", path_, std::strerror(errno));
    const auto dir = std::filesystem::path(path_).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec))
      fail("cannot write '{}': directory '{}' does not exist (create it first)", path_, dir.string());
    target_ = path_;
  } else {
    const bool link = S_ISLNK(st.st_mode);
    if (link && ::stat(path_.c_str(), &st) != 0)
      fail("cannot write '{}': a symbolic link to nothing ({})", path_, std::strerror(errno));
    if (S_ISREG(st.st_mode)) {
      target_ = path_;
      if (link) {
        char* resolved = ::realpath(path_.c_str(), nullptr);
        if (!resolved) fail("cannot write '{}': cannot resolve the link: {}", path_, std::strerror(errno));
        target_ = resolved;
        std::free(resolved);
      }
    } else if (!S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode)) {
      fail("cannot write '{}': it is {}; give a file name", path_, kind_name(st.st_mode));
    }
  }
  if (target_.empty()) {  // a FIFO or a character device: written in place
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) fail("cannot write '{}': {}", path_, std::strerror(errno));
    return;
  }
  tmp_ = target_ + ".tmp." + std::to_string(::getpid());
  slot_ = register_temporary(tmp_);  // before the file exists, so a signal never misses it
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    release_temporary(slot_);
    fail("cannot write '{}': cannot create '{}': {}", path_, tmp_, std::strerror(err));
  }
}

AtomicOutput::~AtomicOutput() {
  if (fd_ >= 0) {
    ::close(fd_);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
  }
  release_temporary(slot_);
}

void AtomicOutput::write(const void* data, size_t n_bytes) {
  write_all(fd_, static_cast<const char*>(data), n_bytes, path_);
}

void AtomicOutput::write_at(size_t offset, const void* data, size_t n_bytes) {
  const char* p = static_cast<const char*>(data);
  while (n_bytes > 0) {
    const ssize_t n = ::pwrite(fd_, p, n_bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ESPIPE) fail("cannot write '{}': this format needs a file it can seek in", path_);
    if (n < 0) fail("cannot write '{}': {}", path_, std::strerror(errno));
    p += n, n_bytes -= static_cast<size_t>(n), offset += static_cast<size_t>(n);
  }
}

void AtomicOutput::commit() {
  if (!tmp_.empty() && ::fsync(fd_) != 0) fail("cannot flush '{}': {}", tmp_, std::strerror(errno));
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) {
    const int err = errno;
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
    fail("cannot write '{}': {}", path_, std::strerror(err));
  }
  if (!tmp_.empty() && ::rename(tmp_.c_str(), target_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    fail("cannot rename '{}' to '{}': {}", tmp_, target_, std::strerror(err));
  }
  release_temporary(slot_);
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicOutput out(path);
  out.write(bytes.data(), bytes.size());
  out.commit();
}

void append_line(const std::string& path, std::string_view line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot open '{}': {}", path, std::strerror(errno));
  std::string buf(line);
  buf += '\n';
  try {
    write_all(fd, buf.data(), buf.size(), path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read '{}': {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace pb
