#include "runners/scheduler.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "kernels/error.h"
#include "kernels/io.h"

namespace pb {
namespace fs = std::filesystem;

namespace {

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string duration_text(double s) {
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, t / 60 % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

std::string exit_text(int status) {
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({}){}", WTERMSIG(status), strsignal(WTERMSIG(status)),
                       WCOREDUMP(status) ? ", core dumped" : "");
  return fmt::format("exited with status {} without writing result.json", WEXITSTATUS(status));
}

struct Running {
  pid_t pid;
  const Job* job;
  double start;
  size_t slot;
};

// This process's environment with `extra` ("NAME=value") added or replacing NAME.
std::vector<std::string> environment_with(const std::string& extra) {
  std::vector<std::string> env;
  const std::string name = extra.substr(0, extra.find('=') + 1);
  for (char** e = environ; *e; ++e)
    if (extra.empty() || std::string(*e).rfind(name, 0) != 0) env.emplace_back(*e);
  if (!extra.empty()) env.push_back(extra);
  return env;
}

// Starts `job` in a fresh directory in `slot`; the child's stdout and stderr go to log.txt.
Running launch(const Job& job, const sigset_t& child_mask, size_t slot, const std::string& slot_env) {
  fs::remove_all(job.dir);
  fs::create_directories(job.dir);
  const std::string log = job.dir + "/log.txt";
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create '{}': {}", log, std::strerror(errno));
  std::vector<char*> argv;
  for (const auto& a : job.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::vector<std::string> env_strings = environment_with(slot_env);
  std::vector<char*> envp;
  for (const auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) fail("cannot start a run: fork: {}", std::strerror(errno));
  if (pid == 0) {  // child: only async-signal-safe calls until exec
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &child_mask, nullptr);
    ::execve(argv[0], argv.data(), envp.data());
    ::dprintf(2, "pathbench sweep: cannot run '%s': %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(fd);
  return {pid, &job, now_s(), slot};
}

void signal_group(pid_t pid, int sig) {
  if (::kill(-pid, sig) != 0) ::kill(pid, sig);
}

class Progress {
 public:
  Progress(const SweepProgress& before, size_t n_jobs)
      : b_(before), n_jobs_(n_jobs), tty_(::isatty(2)), start_(now_s()) {}
  ~Progress() {
    if (tty_ && shown_) fmt::print(stderr, "\n");
  }
  void event(const std::string& message) {  // a line of its own above the progress line
    fmt::print(stderr, "{}{}\n", tty_ ? "\r\033[K" : "", message);
  }
  // Redrawn on every call on a terminal; elsewhere a line only when something `changed`.
  void show(size_t done, size_t failed, size_t running, bool changed) {
    if (!tty_ && !changed) return;
    const double elapsed = now_s() - start_;
    const size_t finished = done + failed;
    const std::string eta = finished == 0 ? "?" : duration_text(elapsed / finished * (n_jobs_ - finished));
    fmt::print(stderr, "{}sweep {}: {}/{} done, {} failed, {} running, {} elapsed, ETA {}{}",
               tty_ ? "\r\033[K" : "", b_.name, b_.done + done, b_.total, b_.failed + failed, running,
               duration_text(elapsed), eta, tty_ ? "" : "\n");
    shown_ = true;
  }

 private:
  SweepProgress b_;
  size_t n_jobs_;
  bool tty_, shown_ = false;
  double start_;
};

// Kills and reaps children left behind when run_jobs exits by an exception.
struct Reaper {
  std::vector<Running>& running;
  ~Reaper() {
    for (const auto& r : running) signal_group(r.pid, SIGKILL);
    for (const auto& r : running) ::waitpid(r.pid, nullptr, 0);
  }
};

struct MaskGuard {
  sigset_t old;
  explicit MaskGuard(const sigset_t& block) { ::pthread_sigmask(SIG_BLOCK, &block, &old); }
  ~MaskGuard() { ::pthread_sigmask(SIG_SETMASK, &old, nullptr); }
};

}  // namespace

std::string run_state(const std::string& dir) {
  const std::string path = dir + "/result.json";
  if (!fs::exists(path)) return "pending";
  nlohmann::json result;
  try {
    result = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({}); delete it to rerun the run", path, e.what());
  }
  return result.value("status", "") == "failed" ? "failed" : "done";
}

JobsOutcome run_jobs(const std::vector<Job>& jobs, const std::vector<std::string>& slots,
                     const SweepProgress& before) {
  sigset_t waited, child_mask;
  sigemptyset(&waited);
  sigemptyset(&child_mask);
  for (int s : {SIGCHLD, SIGINT, SIGTERM}) sigaddset(&waited, s);
  const MaskGuard mask(waited);
  std::vector<Running> running;
  const Reaper reaper{running};
  Progress progress(before, jobs.size());
  JobsOutcome out;
  size_t next = 0;
  double kill_at = 0;
  bool changed = true;  // print the first line
  std::vector<bool> busy(slots.size(), false);
  while (true) {
    for (size_t slot = 0; slot < slots.size() && out.signal == 0 && next < jobs.size(); ++slot)
      if (!busy[slot]) busy[slot] = true, running.push_back(launch(jobs[next++], child_mask, slot, slots[slot]));
    progress.show(out.done, out.failed, running.size(), changed);
    changed = false;
    if (running.empty()) break;
    const timespec tick{1, 0};
    const int sig = ::sigtimedwait(&waited, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      const bool again = out.signal != 0;
      if (!again) {
        out.signal = sig;
        kill_at = now_s() + 10;
        progress.event(fmt::format("sweep {}: {}; stopping {} runs in flight (rerun the same command to "
                                   "finish the sweep)", before.name, strsignal(sig), running.size()));
      }
      for (const auto& r : running) signal_group(r.pid, again ? SIGKILL : sig);
    }
    if (out.signal && now_s() > kill_at)
      for (const auto& r : running) signal_group(r.pid, SIGKILL);
    for (size_t i = 0; i < running.size();) {
      int status = 0;
      if (::waitpid(running[i].pid, &status, WNOHANG) != running[i].pid) {
        ++i;
        continue;
      }
      const Job& job = *running[i].job;
      const double wall = now_s() - running[i].start;
      busy[running[i].slot] = false;
      running.erase(running.begin() + static_cast<long>(i));
      const std::string result = job.dir + "/result.json";
      if (!fs::exists(result) && out.signal) continue;  // stopped: pending
      if (!fs::exists(result)) {
        const nlohmann::json failed = {{"status", "failed"}, {"error", exit_text(status)},
                                       {"run_id", job.run_id}, {"wall_s", wall}};
        write_file_atomic(result, failed.dump(2) + "\n");
      }
      if (run_state(job.dir) == "failed") {
        ++out.failed;
        const auto error = nlohmann::json::parse(read_file(result))["error"];
        progress.event(fmt::format("failed: {} ({}): {}; see {}/log.txt", job.label, job.run_id,
                                   error.is_string() ? error.get<std::string>() : "?", job.dir));
      } else {
        ++out.done;
      }
      changed = true;
    }
  }
  return out;
}

}  // namespace pb
