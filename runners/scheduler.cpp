#include "runners/scheduler.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/io.h"
#include "core/slow_call.h"
#include "runners/resume.h"
#include "runners/run_dir.h"
#include "runners/stack_group.h"
#include "runners/sweep_status.h"
#include "runners/trainer.h"
#if PATHBENCH_HAVE_CUDA
#include "core/cuda/runtime.h"
#endif

namespace pb {
namespace fs = std::filesystem;

namespace {

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
  RunLock lock;  // released once the run is reaped and recorded
};

// This process's environment with each of `extras` ("NAME=value"; "" adds nothing) added or
// replacing NAME.
std::vector<std::string> environment_with(const std::vector<std::string>& extras) {
  std::vector<std::string> env;
  auto replaced = [&](const std::string& e) {
    for (const auto& x : extras)
      if (!x.empty() && e.rfind(x.substr(0, x.find('=') + 1), 0) == 0) return true;
    return false;
  };
  for (char** e = environ; *e; ++e)
    if (!replaced(*e)) env.emplace_back(*e);
  for (const auto& x : extras)
    if (!x.empty()) env.push_back(x);
  return env;
}

// Starts `job`, claimed (`lock`) and its directory emptied or, with `resume`, kept to continue from
// its checkpoint (`train --resume`), in `slot`; the child inherits the lock (runners/run_dir.h) and
// its stdout and stderr go to log.txt (appended to when resuming).
Running launch(const Job& job, RunLock lock, bool resume, const sigset_t& child_mask, size_t slot,
               const std::string& slot_env) {
  const std::string log = job.dir + "/log.txt";
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | (resume ? O_APPEND : O_TRUNC) | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create '{}': {}", log, std::strerror(errno));
  std::vector<char*> argv;
  for (const auto& a : job.argv) argv.push_back(const_cast<char*>(a.c_str()));
  if (resume) argv.push_back(const_cast<char*>("--resume"));
  argv.push_back(nullptr);
  const char* exec = job.exec.empty() ? argv[0] : job.exec.c_str();
  const int lock_fd = lock.fd();
  const std::vector<std::string> env_strings =
      environment_with({slot_env, fmt::format("{}={}", kRunLockFdEnv, lock_fd)});
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
    ::fcntl(lock_fd, F_SETFD, 0);  // inherited through exec
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &child_mask, nullptr);
    ::execve(exec, argv.data(), envp.data());
    ::dprintf(2, "pathbench sweep: cannot run '%s': %s\n", exec, std::strerror(errno));
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(fd);
  return {pid, &job, now_s(), slot, std::move(lock)};
}

void signal_group(pid_t pid, int sig) {
  if (::kill(-pid, sig) != 0) ::kill(pid, sig);
}

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

void record_failure(const Job& job, const std::string& error, double wall_s) {
  const nlohmann::json failed = {{"status", "failed"}, {"error", error}, {"run_id", job.run_id}, {"wall_s", wall_s}};
  write_file_atomic(job.dir + "/result.json", failed.dump(2) + "\n");
}

namespace {

// The jobs not yet started, in order; a job's turn comes once every job of its `after` list has
// ended, so a slot passes over a job that waits and takes the next one whose turn it is.
class JobQueue {
 public:
  explicit JobQueue(const std::vector<Job>& jobs) : jobs_(jobs), state_(jobs.size(), kQueued), left_(jobs.size()) {}
  // The first queued job whose turn it is (those the rule skips are ended and counted in `out`),
  // or jobs.size() when none can start now.
  size_t take(const SkipRule& skip, JobsOutcome& out, SweepStatus& status) {
    for (size_t i = first_; i < jobs_.size(); ++i) {
      if (state_[i] != kQueued || !ready(jobs_[i])) continue;
      const std::string why = skip ? skip(jobs_[i]) : "";
      --left_;
      if (why.empty()) return state_[i] = kStarted, advance(), i;
      state_[i] = kEnded;
      ++out.skipped;
      status.event(fmt::format("skipped: {} ({}): {}", jobs_[i].label, jobs_[i].run_id, why));
    }
    advance();
    return jobs_.size();
  }
  void end(size_t i) { state_[i] = kEnded; }
  size_t left() const { return left_; }  // queued: not started, not skipped

 private:
  enum State : uint8_t { kQueued, kStarted, kEnded };
  bool ready(const Job& job) const {
    return std::all_of(job.after.begin(), job.after.end(), [&](size_t a) { return state_[a] == kEnded; });
  }
  void advance() {
    while (first_ < jobs_.size() && state_[first_] != kQueued) ++first_;
  }
  const std::vector<Job>& jobs_;
  std::vector<State> state_;
  size_t first_ = 0, left_;
};

// Counts a finished job as done or failed (naming the failure).
void count_finished(const Job& job, JobsOutcome& out, SweepStatus& status) {
  if (run_state(job.dir) != "failed") {
    ++out.done;
    return;
  }
  ++out.failed;
  const auto error = nlohmann::json::parse(read_file(job.dir + "/result.json"))["error"];
  status.event(fmt::format("failed: {} ({}): {}; see {}/log.txt", job.label, job.run_id,
                           error.is_string() ? error.get<std::string>() : "?", job.dir));
}

// The jobs in their queue's order, each claimed by exactly one worker process: its run directory's
// lock taken (RunLock::try_take) and the run still in its planned state, then the directory
// emptied, unless it holds a checkpoint of the pending run (runners/resume.h) to continue from. A
// job whose lock another process holds is put aside and tried again once no other is left; one
// that another process finished meanwhile is counted (JobsOutcome::by_others), not rerun.
class Claims {
 public:
  Claims(const std::vector<Job>& jobs, const SkipRule& skip, const std::string& sweep)
      : jobs_(jobs), skip_(skip), who_("pathbench sweep " + sweep), queue_(jobs) {}

  // The next job to run here, with its lock and, when it continues from a checkpoint, `resume`
  // (else null), or nullptr when none is free now (done() says whether any is left at all). end()
  // the job when its run has ended.
  const Job* next(RunLock& lock, std::shared_ptr<const ResumePoint>& resume, JobsOutcome& out, SweepStatus& status) {
    const Job* job = next_claimed(lock, out, status);
    resume.reset();
    if (job) resume = resume_point(*job, status);
    if (job && !resume) empty_run_dir(job->dir);
    return job;
  }
  void end(const Job& job) { queue_.end(size_t(&job - jobs_.data())); }
  size_t left() const { return queue_.left() + aside_.size(); }  // not started here
  bool done() const { return left() == 0; }

 private:
  const Job* next_claimed(RunLock& lock, JobsOutcome& out, SweepStatus& status) {
    for (size_t i; (i = queue_.take(skip_, out, status)) < jobs_.size();) {
      const Job& job = jobs_[i];
      if (claim(job, lock, out, status)) return &job;
      if (finished_) queue_.end(i);
      else if (!lock.held()) {
        aside_.push_back(&job);
        status.event(fmt::format("in use by another worker, tried again later: {} ({})", job.label, job.run_id));
      }
    }
    for (size_t i = 0; i < aside_.size(); ++i) {
      const Job& job = *aside_[i];
      const bool taken = claim(job, lock, out, status);
      if (finished_) end(job);
      if (taken || finished_) aside_.erase(aside_.begin() + static_cast<long>(i--));
      if (taken) return &job;
    }
    return nullptr;
  }

  // The checkpoint of a claimed pending run, or null (none, or one that read_resume refuses: the
  // run then starts again from step 0, which the sweep reports).
  static std::shared_ptr<const ResumePoint> resume_point(const Job& job, SweepStatus& status) {
    if (job.state != "pending" || !fs::exists(job.dir + "/" + kResumeFile)) return nullptr;
    try {
      auto point = std::make_shared<const ResumePoint>(read_resume(job.cfg));
      status.event(fmt::format("resuming: {} ({}) from step {}", job.label, job.run_id, point->state.step));
      return point;
    } catch (const Error& e) {
      status.event(fmt::format("restarting: {} ({}) from step 0: {}", job.label, job.run_id, e.what()));
      return nullptr;
    }
  }

  // Whether `job` is now this process's to run (`lock` then holds it); finished_ says whether
  // another process finished it.
  bool claim(const Job& job, RunLock& lock, JobsOutcome& out, SweepStatus& status) {
    finished_ = false;
    lock = RunLock::try_take(job.dir, who_);
    if (!lock.held()) return false;
    if (run_state(job.dir) != job.state) {
      finished_ = true;
      lock = RunLock();
      ++out.by_others;
      count_finished(job, out, status);
      return false;
    }
    return true;
  }

  const std::vector<Job>& jobs_;
  const SkipRule& skip_;
  const std::string who_;
  JobQueue queue_;
  std::vector<const Job*> aside_;
  bool finished_ = false;
};

bool draining(const SweepProgress& p) { return p.drain_at > 0 && now_s() > p.drain_at; }

}  // namespace

JobsOutcome run_jobs(const std::vector<Job>& jobs, const std::vector<std::string>& slots,
                     const SweepProgress& before, const SkipRule& skip) {
  sigset_t waited, child_mask;
  sigemptyset(&waited);
  sigemptyset(&child_mask);
  for (int s : {SIGCHLD, SIGINT, SIGTERM}) sigaddset(&waited, s);
  const MaskGuard mask(waited);
  std::vector<Running> running;
  const Reaper reaper{running};
  SweepStatus status(before.name, before.total, before.done, before.failed, jobs.size());
  JobsOutcome out;
  Claims claims(jobs, skip, before.name);
  double kill_at = 0;
  bool changed = true;  // print the first line
  std::vector<bool> busy(slots.size(), false);
  while (true) {
    for (size_t slot = 0; slot < slots.size() && out.signal == 0 && !draining(before); ++slot) {
      if (busy[slot]) continue;
      RunLock lock;
      std::shared_ptr<const ResumePoint> resume;  // checked here, read again by the child
      const Job* job = claims.next(lock, resume, out, status);
      if (!job) break;
      busy[slot] = true;
      running.push_back(launch(*job, std::move(lock), resume != nullptr, child_mask, slot, slots[slot]));
    }
    status.show(out.done, out.failed, out.skipped, running.size(), changed);
    changed = false;
    if (running.empty() && (out.signal || draining(before) || claims.done())) break;
    const timespec tick{1, 0};
    const int sig = ::sigtimedwait(&waited, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      const bool again = out.signal != 0;
      if (!again) {
        out.signal = sig;
        kill_at = now_s() + 10;
        status.event(fmt::format("sweep {}: {}; stopping {} runs in flight (rerun the same command to "
                                 "finish the sweep)", before.name, strsignal(sig), running.size()));
      }
      for (const auto& r : running) signal_group(r.pid, again ? SIGKILL : sig);
    }
    if (out.signal && now_s() > kill_at)
      for (const auto& r : running) signal_group(r.pid, SIGKILL);
    for (size_t i = 0; i < running.size();) {
      int wstatus = 0;
      if (::waitpid(running[i].pid, &wstatus, WNOHANG) != running[i].pid) {
        ++i;
        continue;
      }
      const Job& job = *running[i].job;
      const double wall = now_s() - running[i].start;
      busy[running[i].slot] = false;
      const RunLock lock = std::move(running[i].lock);  // held while the end is recorded
      running.erase(running.begin() + static_cast<long>(i));
      claims.end(job);
      const bool recorded = fs::exists(job.dir + "/result.json");
      if (!recorded && out.signal) continue;  // stopped: pending
      if (!recorded) record_failure(job, exit_text(wstatus), wall);
      count_finished(job, out, status);
      changed = true;
    }
  }
  out.left = out.signal ? 0 : claims.left();
  return out;
}

namespace {

// One packed run on the calling thread (its slot's), claimed and its directory emptied, or
// continued from `resume`: the output into log.txt (appended to when resuming), anything it throws
// recorded as its failure. Returns false when it was cancelled.
bool run_in_thread(const Job& job, const ResumePoint* resume, const std::atomic<bool>& cancel, StackPool* stacks) {
  const double start = now_s();
  set_slow_call_run(fs::path(job.dir).filename().string());  // named in the runtime's slow-call lines
  const std::string log_path = job.dir + "/log.txt";
  std::FILE* log = std::fopen(log_path.c_str(), resume ? "ae" : "we");
  if (!log) fail("cannot create '{}': {}", log_path, std::strerror(errno));
  int rc = 0;
  try {
    rc = run_training(job.cfg, RunContext{log, &cancel, stacks}, resume);
  } catch (const std::exception& e) {
    fmt::print(log, "pathbench: error: {}\n", e.what());
    record_failure(job, e.what(), now_s() - start);
  }
  std::fclose(log);
  return rc != kRunCancelled;
}

// The jobs by depth, then shape (stack_shape), else in their order, so that the runs of a shape
// are taken together and fill their stacked group; `after` lists renumbered.
std::vector<Job> by_shape(const std::vector<Job>& jobs) {
  std::vector<std::string> key(jobs.size());
  std::vector<size_t> order(jobs.size()), at(jobs.size());  // new position → job, job → new position
  for (size_t i = 0; i < jobs.size(); ++i)
    key[i] = fmt::format("{:06d}|{}", jobs[i].cfg.layers, stack_shape(jobs[i].cfg)), order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key[a] < key[b]; });
  std::vector<Job> out;
  for (size_t k = 0; k < order.size(); ++k) at[order[k]] = k, out.push_back(jobs[order[k]]);
  for (Job& j : out)
    for (size_t& a : j.after) a = at[a];
  return out;
}

}  // namespace

void prepare_packed_process() {
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  setenv("PB_CUDA_GRAPHS", "0", 0);
}

JobsOutcome run_packed(const std::vector<Job>& jobs, const std::vector<int>& slot_devices,
                       const SweepProgress& before, const SkipRule& skip, int stack) {
  sigset_t waited;
  sigemptyset(&waited);
  for (int s : {SIGINT, SIGTERM}) sigaddset(&waited, s);
  const MaskGuard mask(waited);  // before the threads start: they inherit it, the signals come here
  SweepStatus status(before.name, before.total, before.done, before.failed, jobs.size());
  JobsOutcome out;
  std::atomic<bool> cancel{false};
  std::mutex mutex;                 // guards claims, out, finished, running, and status's lines
  const std::vector<Job> ordered = stack > 0 ? by_shape(jobs) : jobs;
  Claims claims(ordered, skip, before.name);
  size_t running = 0;
  std::vector<const Job*> finished;  // ended since the last progress line, not yet counted
  std::vector<std::exception_ptr> errors(slot_devices.size());
  StackPool stacks(std::max(stack, 1));  // outlives the threads, whose runs' groups it keeps
#if PATHBENCH_HAVE_CUDA
  for (int d : std::set<int>(slot_devices.begin(), slot_devices.end()))
    if (d >= 0) cuda::set_device(d), cuda::block_in_waits();
#endif
  std::vector<std::thread> threads;
  for (size_t slot = 0; slot < slot_devices.size(); ++slot)
    threads.emplace_back([&, slot] {
      try {
#if PATHBENCH_HAVE_CUDA
        if (slot_devices[slot] >= 0) cuda::set_device(slot_devices[slot]);
#endif
        while (true) {
          const Job* job = nullptr;
          RunLock claim;  // released once the run has recorded its end
          std::shared_ptr<const ResumePoint> resume;
          {
            const std::lock_guard<std::mutex> lock(mutex);
            if (cancel || draining(before) || claims.done()) return;
            job = claims.next(claim, resume, out, status);
            running += job != nullptr;
          }
          if (!job) {  // the runs left wait for runs in flight, or are another worker's for now
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            continue;
          }
          const bool ended = run_in_thread(*job, resume.get(), cancel, stack > 0 ? &stacks : nullptr);
          const std::lock_guard<std::mutex> lock(mutex);
          --running;
          claims.end(*job);
          if (ended) finished.push_back(job);
        }
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex);
        errors[slot] = std::current_exception();
        cancel = true;
      }
    });
  bool changed = true;
  for (bool live = true; live;) {
    {
      const std::lock_guard<std::mutex> lock(mutex);
      for (const Job* job : finished) count_finished(*job, out, status), changed = true;
      finished.clear();
      live = running > 0 || (!cancel && !draining(before) && !claims.done());
      status.show(out.done, out.failed, out.skipped, running, changed);
      changed = false;
    }
    if (!live) break;
    const timespec tick{0, 200'000'000};
    const int sig = ::sigtimedwait(&waited, nullptr, &tick);
    if ((sig == SIGINT || sig == SIGTERM) && out.signal == 0) {
      const std::lock_guard<std::mutex> lock(mutex);
      out.signal = sig;
      cancel = true;
      status.event(fmt::format("sweep {}: {}; stopping {} runs in flight at their next step (rerun the same "
                               "command to finish the sweep)", before.name, strsignal(sig), running));
    }
  }
  for (auto& t : threads) t.join();
  for (const Job* job : finished) count_finished(*job, out, status);
  out.left = cancel ? 0 : claims.left();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

}  // namespace pb
