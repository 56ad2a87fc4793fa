// Progress of a run on a stream (stderr, or the run's log.txt in a packed sweep): on a terminal one
// line rewritten in place (≤ 10 per second); elsewhere (logs, CI, Slurm) a plain line every 5% of
// the steps or 30 s.
#pragma once
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace pb {

class Progress {
 public:
  Progress(int total, std::string label, std::FILE* out = stderr)
      : total_(total), label_(std::move(label)), out_(out), tty_(isatty(fileno(out))), start_(clock::now()),
        last_(start_) {}

  // Returns true on logging steps (every 1% of the run), where the caller records metrics.
  bool update(int step, double loss, double tokens_per_s) {
    const auto now = clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    const int every = std::max(1, total_ / 20);
    const bool print = tty_ ? since > 0.1 || step == total_ : step % every == 0 || since > 30 || step == total_;
    if (print) {
      const double el = std::chrono::duration<double>(now - start_).count();
      const double eta = step ? el / step * (total_ - step) : 0;
      const std::string line = fmt::format("{} step {}/{} loss {:.4f} {:.0f} tok/s ETA {:.0f}s", label_, step,
                                           total_, loss, tokens_per_s, eta);
      if (tty_)
        fmt::print(out_, "\r{}\033[K", line);
      else
        fmt::print(out_, "{}\n", line);
      last_ = now;
      open_line_ = tty_;
    }
    return step % std::max(1, total_ / 100) == 0;
  }

  void note(const std::string& msg) {  // a line of its own (evaluation results)
    finish();
    fmt::print(out_, "{} {}\n", label_, msg);
  }

  void finish() {
    if (open_line_) fmt::print(out_, "\n");
    open_line_ = false;
  }

 private:
  using clock = std::chrono::steady_clock;
  int total_;
  std::string label_;
  std::FILE* out_;
  bool tty_;
  clock::time_point start_, last_;
  bool open_line_ = false;
};

}  // namespace pb
