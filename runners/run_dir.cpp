#include "runners/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/io.h"

namespace pb {
namespace fs = std::filesystem;

namespace {

const std::string kLockName = ".lock";

// The files a run directory holds (docs/run-format.md), with the sweep's log and the lock.
const std::set<std::string> kRunFiles = {"config.json", "meta.json",          "metrics.jsonl",
                                         "eval.jsonl",  "model.safetensors",  "resume.safetensors",
                                         "result.json", "log.txt",            kLockName};

// A run file, or the temporary of one left by a killed writer (NAME.tmp.<pid>).
bool is_run_file(const std::string& name) {
  const size_t tmp = name.find(".tmp.");
  const std::string base = name.substr(0, tmp);
  return kRunFiles.count(base) &&
         (tmp == std::string::npos || name.find_first_not_of("0123456789", tmp + 5) == std::string::npos);
}

std::string holder_of(int fd) {
  char text[256] = "";
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  std::string who(text, n > 0 ? size_t(n) : 0);
  return who.empty() ? "another process" : who;
}

}  // namespace

RunLock::RunLock(RunLock&& other) noexcept : fd_(other.fd_), handed_down_(other.handed_down_) { other.fd_ = -1; }

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_, handed_down_ = other.handed_down_;
    other.fd_ = -1;
  }
  return *this;
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock unless a child still holds the descriptor
}

RunLock RunLock::try_take(const std::string& dir, const std::string& who) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create run directory '{}': {}", dir, ec.message());
  const std::string path = (fs::path(dir) / kLockName).string();
  RunLock lock;
  lock.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock.fd_ < 0) fail("cannot lock run directory '{}': cannot open '{}': {}", dir, path, std::strerror(errno));
  if (::flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) fail("cannot lock run directory '{}': {}", dir, std::strerror(errno));
    return RunLock();  // closes lock.fd_
  }
  char host[256] = "";
  ::gethostname(host, sizeof host - 1);
  const std::string text = fmt::format("{} (pid {} on {})", who, ::getpid(), host);
  if (::ftruncate(lock.fd_, 0) != 0 || ::pwrite(lock.fd_, text.data(), text.size(), 0) < 0)
    fail("cannot write '{}': {}", path, std::strerror(errno));
  return lock;
}

RunLock RunLock::take(const std::string& dir, const std::string& who) {
  const std::string path = (fs::path(dir) / kLockName).string();
  if (const char* env = std::getenv(kRunLockFdEnv)) {
    struct stat handed, file;
    const int fd = std::atoi(env);
    if (fd > 2 && ::fstat(fd, &handed) == 0 && ::stat(path.c_str(), &file) == 0 && handed.st_dev == file.st_dev &&
        handed.st_ino == file.st_ino) {
      ::fcntl(fd, F_SETFD, FD_CLOEXEC);
      RunLock lock;
      lock.fd_ = fd, lock.handed_down_ = true;
      return lock;
    }
  }
  RunLock lock = try_take(dir, who);
  if (lock.held()) return lock;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  const std::string holder = fd >= 0 ? holder_of(fd) : "another process";
  if (fd >= 0) ::close(fd);
  fail("run directory '{}' is in use by {}; wait for it to end or stop it", dir, holder);
}

void empty_run_dir(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename() != kLockName) fs::remove_all(e.path());
}

void prepare_run_dir(const std::string& dir, bool overwrite) {
  std::vector<std::string> others;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!is_run_file(name)) others.push_back(name);
  }
  const std::string result = (fs::path(dir) / "result.json").string();
  if (!overwrite && fs::exists(result)) {
    std::string what = "result.json";
    try {
      const auto r = nlohmann::json::parse(read_file(result));
      what = fmt::format("status {}, run {}", r.value("status", "?"), r.value("run_id", "?"));
    } catch (const nlohmann::json::exception&) {
    }
    fail("--out '{}' holds a finished run ({}); give another directory, or --overwrite to replace it", dir, what);
  }
  if (!overwrite && !others.empty())
    fail("--out '{}' is not a run directory: it holds '{}'{}; give a new or empty directory, or --overwrite to "
         "train there anyway (other files are left alone)",
         dir, others.front(), others.size() > 1 ? fmt::format(" and {} more", others.size() - 1) : "");
  if (!overwrite) return;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name != kLockName && is_run_file(name)) fs::remove_all(e.path());
  }
}

}  // namespace pb
