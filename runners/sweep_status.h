// The sweep's progress line on stderr, shared by both engines (runners/scheduler.h): redrawn in
// place on a terminal, one line per change otherwise (Slurm logs), with events (failures, the
// stop) on lines of their own above it.
#pragma once
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace pb {

inline double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

inline std::string duration_text(double s) {
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, t / 60 % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

class SweepStatus {
 public:
  // `name`, the runs of the sweep (or shard) `total`, those done and failed before this start,
  // and the jobs this start runs.
  SweepStatus(std::string name, size_t total, size_t done_before, size_t failed_before, size_t n_jobs)
      : name_(std::move(name)), total_(total), done0_(done_before), failed0_(failed_before), n_jobs_(n_jobs),
        tty_(::isatty(2)), start_(now_s()) {}
  ~SweepStatus() {
    if (tty_ && shown_) fmt::print(stderr, "\n");
  }
  void event(const std::string& message) {  // a line of its own above the progress line
    fmt::print(stderr, "{}{}\n", tty_ ? "\r\033[K" : "", message);
  }
  // Redrawn on every call on a terminal; elsewhere a line only when something `changed`.
  void show(size_t done, size_t failed, size_t skipped, size_t running, bool changed) {
    if (!tty_ && !changed) return;
    const double elapsed = now_s() - start_;
    const size_t finished = done + failed + skipped;
    const std::string eta = finished == 0 ? "?" : duration_text(elapsed / finished * (n_jobs_ - finished));
    fmt::print(stderr, "{}sweep {}: {}/{} done, {} failed, {}{} running, {} elapsed, ETA {}{}",
               tty_ ? "\r\033[K" : "", name_, done0_ + done, total_, failed0_ + failed,
               skipped ? fmt::format("{} skipped, ", skipped) : "", running, duration_text(elapsed), eta,
               tty_ ? "" : "\n");
    shown_ = true;
  }

 private:
  std::string name_;
  size_t total_, done0_, failed0_, n_jobs_;
  bool tty_, shown_ = false;
  double start_;
};

}  // namespace pb
