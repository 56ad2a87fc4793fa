// A line on stderr for every runtime call that takes longer than it should, so that a sweep's log
// says where packed runs waited (kernels/dev/pack_notes.md): "pathbench: slow call: WHAT took
// 12.3 s on thread 7, run RUN (at 512.0 s after the process started; NOTE)". The threshold is
// PB_SLOW_CALL_S seconds (default 1; 0 reports every call, a negative value none). Used by
// core/cuda/runtime.cu around the calls that can wait for other threads: the capture fence,
// allocations, stream synchronisation, graph capture and instantiation, cuBLAS handle creation.
//
// A line after the call names only its length. While a call is still open PB_STALL_TRACE_S seconds
// (default 60; 0 or less: never), a watchdog thread writes "pathbench: stalled call: WHAT open for
// 60.0 s, run RUN; the stack of its thread follows" and has that thread write its own stack
// (SIGUSR2, glibc's backtrace; once per call), so a log names the call a stall waits in.
#pragma once
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>

namespace pb {

inline double env_seconds(const char* name, double fallback) {  // a number of seconds from the environment
  const char* v = std::getenv(name);
  return v && *v ? std::atof(v) : fallback;
}

inline double slow_call_threshold_s() {
  static const double t = env_seconds("PB_SLOW_CALL_S", 1.0);
  return t;
}

inline const std::chrono::steady_clock::time_point g_process_start = std::chrono::steady_clock::now();

inline double process_seconds() {  // since the process started (its static initialisation)
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - g_process_start).count();
}

inline int slow_call_thread_id() {  // small numbers, in the order threads first report a slow call
  static std::atomic<int> next{0};
  thread_local const int id = next++;
  return id;
}

// The run the calling thread trains, named in its lines (a packed sweep's slot thread sets it).
// A plain array, alive for thread-local objects that report as their thread exits (a capture's
// timer, runtime.cu).
inline thread_local char t_slow_call_run[40] = {};
inline void set_slow_call_run(const std::string& run) {
  std::snprintf(t_slow_call_run, sizeof(t_slow_call_run), "%s", run.c_str());
}

// Seconds a call may stay open before its stack is written (PB_STALL_TRACE_S); settable by tests.
inline std::atomic<double>& stall_trace_s() {
  static std::atomic<double> t{env_seconds("PB_STALL_TRACE_S", 60.0)};
  return t;
}

namespace stall {

struct Open {  // one open SlowCall, as the watchdog sees it
  bool used = false, traced = false;
  pthread_t thread{};
  const char* what = nullptr;
  char run[40] = {};
  double t0 = 0;
  int fd = -1;
};

struct Registry {  // made once and never destroyed: the watchdog may outlive static destruction
  std::mutex mutex;
  Open open[256];  // more open calls at once than this go unwatched
  std::atomic<int> fd{-1};  // where the signalled thread writes its stack
  std::atomic<bool> written{false};
};

inline Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// Runs on the stalled thread: only async-signal-safe work (backtrace is, once loaded, below).
inline void write_stack(int) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, registry().fd.load());
  registry().written = true;
}

inline void watch() {
  Registry& r = registry();
  for (;;) {
    const double limit = stall_trace_s();
    std::this_thread::sleep_for(std::chrono::duration<double>(limit > 0 && limit < 4 ? limit / 4 : 1.0));
    if (limit <= 0) continue;
    const std::lock_guard<std::mutex> lock(r.mutex);  // the thread stays in its call until we are done
    for (Open& o : r.open) {
      const double open_s = process_seconds() - o.t0;
      if (!o.used || o.traced || open_s < limit) continue;
      o.traced = true;
      dprintf(o.fd, "pathbench: stalled call: %s open for %.1f s%s%s; the stack of its thread follows\n", o.what,
              open_s, o.run[0] ? ", run " : "", o.run);
      r.fd = o.fd;
      r.written = false;
      if (pthread_kill(o.thread, SIGUSR2) != 0) continue;
      for (int i = 0; i < 2000 && !r.written; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

// Starts the watchdog with the first watched call, where SIGUSR2 is free for it.
inline bool start() {
  static const bool started = [] {
    struct sigaction old {};
    if (::sigaction(SIGUSR2, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) return false;
    void* frame[1];
    backtrace(frame, 1);  // loads libgcc's unwinder now, not inside the handler
    struct sigaction sa {};
    sa.sa_handler = write_stack;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (::sigaction(SIGUSR2, &sa, nullptr) != 0) return false;
    std::thread(watch).detach();
    return true;
  }();
  return started;
}

inline int add(const char* what, double t0, std::FILE* out) {  // the call's slot, or -1: unwatched
  if (stall_trace_s() <= 0 || !start()) return -1;
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  for (int i = 0; i < int(std::size(r.open)); ++i) {
    Open& o = r.open[i];
    if (o.used) continue;
    o = Open{true, false, pthread_self(), what, {}, t0, fileno(out)};
    std::snprintf(o.run, sizeof(o.run), "%s", t_slow_call_run);
    return i;
  }
  return -1;
}

inline void remove(int slot) {
  if (slot < 0) return;
  const std::lock_guard<std::mutex> lock(registry().mutex);
  registry().open[slot].used = false;
}

}  // namespace stall

// Times its scope; `note` (may be null; it must outlive the scope) is added to the line, e.g. who
// held a lock as the wait for it began.
class SlowCall {
 public:
  explicit SlowCall(const char* what, const char* note = nullptr, std::FILE* out = stderr)
      : what_(what), note_(note), out_(out), t0_(process_seconds()), slot_(stall::add(what, t0_, out)) {}
  SlowCall(const SlowCall&) = delete;
  SlowCall& operator=(const SlowCall&) = delete;
  ~SlowCall() {
    stall::remove(slot_);
    const double limit = slow_call_threshold_s(), dt = process_seconds() - t0_;
    if (limit < 0 || dt < limit) return;
    const bool note = note_ && *note_;
    const bool run = t_slow_call_run[0] != 0;
    std::fprintf(out_, "pathbench: slow call: %s took %.3f s on thread %d%s%s (at %.1f s after the process "
                 "started%s%s)\n", what_, dt, slow_call_thread_id(), run ? ", run " : "",
                 run ? t_slow_call_run : "", t0_, note ? "; " : "", note ? note_ : "");
    std::fflush(out_);
  }

 private:
  const char* what_;
  const char* note_;
  std::FILE* out_;
  double t0_;
  int slot_;
};

}  // namespace pb
