// Runs sweep jobs as child processes, a few at a time, and records the failures the children
// could not record themselves. Each child gets its own process group, dies with the sweep
// (PR_SET_PDEATHSIG), and writes stdout and stderr to <dir>/log.txt. A child that exits without
// writing <dir>/result.json is recorded there as {"status": "failed", "error": "killed by signal
// 9 (Killed)"}; on SIGINT/SIGTERM the signal is forwarded to the children, whose directories are
// left without result.json (pending: rerun from scratch next time), and run_jobs returns.
#pragma once
#include <string>
#include <vector>

namespace pb {

struct Job {
  std::vector<std::string> argv;  // argv[0]: the executable's path
  std::string dir;                // run directory, emptied before the start
  std::string run_id;
  std::string label;              // for progress and failure lines
};

struct SweepProgress {            // the state before these jobs start, for the progress line
  std::string name;
  size_t total = 0;               // runs of the sweep (or shard)
  size_t done = 0;                // finished before (skipped)
  size_t failed = 0;              // failed before and not retried
};

struct JobsOutcome {
  size_t done = 0, failed = 0;    // of these jobs
  int signal = 0;                 // SIGINT or SIGTERM if the sweep was stopped, else 0
};

// Runs the jobs with one job per slot at a time. A slot's string is added to the environment of
// the jobs it runs (e.g. "CUDA_VISIBLE_DEVICES=1" pins them to GPU 1; "" adds nothing).
JobsOutcome run_jobs(const std::vector<Job>& jobs, const std::vector<std::string>& slots,
                     const SweepProgress& before);

// "done" (status ok or diverged), "failed" or "pending" (no result.json) of a run directory.
std::string run_state(const std::string& dir);

}  // namespace pb
