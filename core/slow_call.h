// A line on stderr for every runtime call that takes longer than it should, so that a sweep's log
// says where packed runs waited (kernels/dev/pack_notes.md): "pathbench: slow call: WHAT took
// 12.3 s on thread 7, run RUN (at 512.0 s after the process started; NOTE)". The threshold is
// PB_SLOW_CALL_S seconds (default 1; 0 reports every call, a negative value none). Used by
// core/cuda/runtime.cu around the calls that can wait for other threads: the capture fence,
// allocations, stream synchronisation, graph capture and instantiation, cuBLAS handle creation.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace pb {

inline double slow_call_threshold_s() {
  static const double t = [] {
    const char* v = std::getenv("PB_SLOW_CALL_S");
    return v && *v ? std::atof(v) : 1.0;
  }();
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

// Times its scope; `note` (may be null; it must outlive the scope) is added to the line, e.g. who
// held a lock as the wait for it began.
class SlowCall {
 public:
  explicit SlowCall(const char* what, const char* note = nullptr, std::FILE* out = stderr)
      : what_(what), note_(note), out_(out), t0_(process_seconds()) {}
  SlowCall(const SlowCall&) = delete;
  SlowCall& operator=(const SlowCall&) = delete;
  ~SlowCall() {
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
};

}  // namespace pb
