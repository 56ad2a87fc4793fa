// The two sweep engines. Both take the sweep's pending runs as jobs, claim each by locking its run
// directory (runners/run_dir.h: one worker process per run, so several sweeps of one directory share
// the work), start it in its emptied directory, or continue it from the checkpoint an interrupted
// start left there (runners/resume.h), with its output in <dir>/log.txt, fill a slot as soon as its
// run ends (a pool, no barrier at the slowest run), record the failures a run could not record
// itself, and on SIGINT/SIGTERM stop the runs in flight, whose directories stay without result.json
// (pending: continued from their last checkpoint next time). A run locked by another process is
// put aside and tried again when nothing else is left, so each engine returns once every job has
// finished here or elsewhere.
//   run_jobs     one child process (`pathbench train`) per run. Each child has its own process
//                group, dies with the sweep (PR_SET_PDEATHSIG), and is recorded as {"status":
//                "failed", "error": "killed by signal 9 (Killed)"} when it exits without
//                result.json.
//   run_packed   every run a thread of this process, K per GPU (`sweep --pack K`): each run has its
//                own CUDA stream, cuBLAS handle, scratch and CUDA graph (core/cuda/runtime.h),
//                so the runs of a GPU share one context and their kernels run side by side, where
//                processes would time-slice the GPU. A run that throws is recorded failed; a crash
//                of the process (or a CUDA error that poisons the context) ends every run in
//                flight, which then stay pending.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "runners/train_config.h"

namespace pb {

struct Job {
  std::vector<std::string> argv;  // argv[0]: the executable's path (run_jobs)
  TrainConfig cfg;                // the same run, resolved, with out, threads and device (run_packed)
  std::string dir;                // run directory, emptied before the start
  std::string run_id;
  std::string label;              // for progress and failure lines
  std::vector<size_t> after;      // jobs (indices into the same list) that must end before it starts
  std::string state = "pending";  // when planned: "pending", or "failed" to rerun (--retry-failed)
  std::string exec{};             // run_jobs: the file to execute when not argv[0] ("/proc/self/exe":
                                  // this process's own binary, even if its path was rebuilt since)
};

struct SweepProgress {            // the state before these jobs start, for the progress line
  std::string name;
  size_t total = 0;               // runs of the sweep (or shard)
  size_t done = 0;                // finished before (skipped)
  size_t failed = 0;              // failed before and not retried
  double drain_at = 0;            // now_s() after which no job starts (`sweep --drain-after`); 0: never
};

struct JobsOutcome {
  size_t done = 0, failed = 0;    // of these jobs
  size_t by_others = 0;           // of done + failed: finished by another worker process
  size_t skipped = 0;             // not started: the skip rule said so
  size_t left = 0;                // not started: the sweep drained (SweepProgress::drain_at)
  int signal = 0;                 // SIGINT or SIGTERM if the sweep was stopped, else 0
};

// Asked when a job's turn comes (every job of its `after` list has ended): why not to run it
// (adaptive depth search), or "" to run it.
using SkipRule = std::function<std::string(const Job&)>;

// Runs the jobs with one job per slot at a time. A slot's string is added to the environment of
// the jobs it runs (e.g. "CUDA_VISIBLE_DEVICES=1" pins them to GPU 1; "" adds nothing).
JobsOutcome run_jobs(const std::vector<Job>& jobs, const std::vector<std::string>& slots,
                     const SweepProgress& before, const SkipRule& skip = {});

// Runs the jobs as threads of this process, one per slot at a time; a slot's value is the CUDA
// device its runs use, or −1 for the CPU. With stack > 0 (`sweep --stack N`) runs of one shape on
// one device train as the slots of stacked groups of N runs (runners/stack_group.h), and the runs
// are taken shape by shape (shallow before deep), so that those of a shape run together.
JobsOutcome run_packed(const std::vector<Job>& jobs, const std::vector<int>& slot_devices,
                       const SweepProgress& before, const SkipRule& skip = {}, int stack = 0);

// Sets up this process for run_packed; call it before the process's first CUDA call. Kernels load
// when the process starts (CUDA_MODULE_LOADING=EAGER): a kernel loaded at its first launch may
// wait for the device to be idle, which runs packed beside it never let happen. Training steps
// launch op by op (PB_CUDA_GRAPHS=0), measured faster packed than captured graphs. Either is
// left as the environment sets it. Measurements: kernels/dev/pack_notes.md.
void prepare_packed_process();

// "done" (status ok or diverged), "failed" or "pending" (no result.json) of a run directory.
std::string run_state(const std::string& dir);

// Records a run that ended without writing its result.json as failed, with `error`.
void record_failure(const Job& job, const std::string& error, double wall_s);

}  // namespace pb
