// Progress of a run on a stream (stderr, or the run's log.txt in a packed sweep): on a terminal one
// line rewritten in place (≤ 10 per second); elsewhere (logs, CI, Slurm) a plain line every 5% of
// the steps or 30 s. The line fits 80 columns: the label (task spec and encoding) shortened in the
// middle, a bar, the percentage, the loss, the elapsed time and the ETA.
#pragma once
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

namespace pb {

// "m:ss" below an hour, "h:mm:ss" above.
inline std::string format_duration(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  if (s < 3600) return fmt::format("{}:{:02}", s / 60, s % 60);
  return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
}

// `text` cut to `width` columns (ASCII) by replacing its middle with "...", keeping both ends: the
// task name and the encoding of a "task:spec pe" label.
inline std::string shorten_middle(const std::string& text, size_t width) {
  if (text.size() <= width) return text;
  if (width <= 3) return text.substr(0, width);
  const size_t head = (width - 3) / 2, tail = width - 3 - head;
  return text.substr(0, head) + "..." + text.substr(text.size() - tail);
}

// One progress line of at most kProgressWidth columns (79: the cursor stays on an 80-column line):
// "<label> [#####-----]  50% loss 0.1234 acc 0.987 1:02 ETA 1:02" (acc: the training accuracy on
// scored targets at the last logging step, once there is one).
constexpr size_t kProgressWidth = 79;
inline std::string progress_line(const std::string& label, int step, int total, double loss, double acc,
                                 double elapsed_s, double eta_s) {
  constexpr int kBar = 10;
  const double frac = total > 0 ? std::clamp(double(step) / total, 0.0, 1.0) : 1.0;
  const int filled = int(frac * kBar);
  const std::string acc_text = std::isnan(acc) ? "" : fmt::format(" acc {:.3f}", acc);
  const std::string tail = fmt::format(" [{}{}] {:3}% loss {:.4f}{} {} ETA {}", std::string(filled, '#'),
                                       std::string(kBar - filled, '-'), int(frac * 100), loss, acc_text,
                                       format_duration(elapsed_s), format_duration(eta_s));
  const size_t room = kProgressWidth > tail.size() + 8 ? kProgressWidth - tail.size() : 8;
  return shorten_middle(label, room) + tail;
}

class Progress {
 public:
  // `done`: the steps trained before this process started (a resumed run), left out of the ETA.
  Progress(int total, std::string label, std::FILE* out = stderr, int done = 0)
      : total_(total), done_(done), label_(std::move(label)), out_(out), tty_(isatty(fileno(out))),
        start_(clock::now()), last_(start_) {}

  // Logging steps: every 1% of the run and the last, where the caller records metrics.
  bool logs(int step) const { return step % std::max(1, total_ / 100) == 0 || step == total_; }

  // Prints the line when due; `acc` is the latest training accuracy (NaN before the first).
  void update(int step, double loss, double acc) {
    const auto now = clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    const int every = std::max(1, total_ / 20);
    const bool print = tty_ ? since > 0.1 || step == total_ : step % every == 0 || since > 30 || step == total_;
    if (print) {
      const double el = std::chrono::duration<double>(now - start_).count();
      const double eta = step > done_ ? el / (step - done_) * (total_ - step) : 0;
      const std::string line = progress_line(label_, step, total_, loss, acc, el, eta);
      if (tty_)
        fmt::print(out_, "\r{}\033[K", line);
      else
        fmt::print(out_, "{}\n", line);
      last_ = now;
      open_line_ = tty_;
    }
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
  int total_, done_;
  std::string label_;
  std::FILE* out_;
  bool tty_;
  clock::time_point start_, last_;
  bool open_line_ = false;
};

}  // namespace pb
