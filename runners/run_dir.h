// Run directories as shared state: the lock that makes one process their writer, and what
// `train --out DIR` accepts to start in (docs/guarantees.md).
#pragma once
#include <string>

namespace pb {

// The environment variable through which a sweep hands a run's lock to its `train` child: the
// number of the inherited descriptor of DIR/.lock.
constexpr const char* kRunLockFdEnv = "PATHBENCH_RUN_LOCK_FD";

// An exclusive lock on a run directory: flock(2) on DIR/.lock, held while this object lives (and
// by a child process that inherits the descriptor). The file names its holder ("pathbench sweep
// quick (pid 123 on node7)") for the message of a process that finds it taken.
class RunLock {
 public:
  RunLock() = default;
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock();

  // Creates DIR if needed and takes its lock, recording `who` as the holder; a lock that is not
  // held() when another process holds it.
  static RunLock try_take(const std::string& dir, const std::string& who);
  // The same, or the lock a sweep handed down (kRunLockFdEnv, checked to be DIR/.lock's); a
  // pb::Error naming the holder when another process has it.
  static RunLock take(const std::string& dir, const std::string& who);

  bool held() const { return fd_ >= 0; }
  bool handed_down() const { return handed_down_; }  // by the sweep that started this process
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  bool handed_down_ = false;
};

// Removes everything in DIR but its .lock: a pending run restarted from scratch.
void empty_run_dir(const std::string& dir);

// Whether `train --out DIR` may start in DIR (its lock held): a missing or empty directory, or an
// unfinished run (only the files of a run, docs/run-format.md, and no result.json), which starts
// again from step 0 (`train --resume` continues it from its checkpoint instead). A finished run
// or other files are refused, naming them, unless `overwrite`, which removes the run's files first
// and leaves any other file alone.
void prepare_run_dir(const std::string& dir, bool overwrite);

}  // namespace pb
