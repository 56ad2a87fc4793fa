// Shared by the tests that touch files or run the built binary: a scratch directory removed at
// the end of the test case, one kept for inspection after a failure, and `pathbench <args>` run through the shell with its exit status,
// stdout and stderr captured.
#pragma once
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/io.h"

namespace pb::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / fmt::format("pathbench-test-{}-{}", name, ::getpid())) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// An empty directory /tmp/pb_test_sweep_<name> (emptied if it exists), left behind afterwards.
inline std::filesystem::path fresh_dir(const std::string& name) {
  const std::filesystem::path d = std::filesystem::temp_directory_path() / ("pb_test_sweep_" + name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

struct RunResult {
  int code;  // exit status, −1 if killed by a signal
  std::string out, err;
};

// Runs `pathbench <args>` (args are shell words, quoted by the caller where needed). The captured
// output goes through files outside any TempDir, so a test can check that its directory stays empty.
inline RunResult run_pathbench(const std::string& args) {
  const TempDir capture("capture");
  const std::string out = capture.file("stdout.txt"), err = capture.file("stderr.txt");
  const int status = std::system(fmt::format("'{}' {} >'{}' 2>'{}'", PATHBENCH_EXE, args, out, err).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err)};
}

// A sweep of four short flip-flop runs (rope and path, seeds 0 and 1) named `name`, for the
// end-to-end tests; `base` adds lines to its [base] section.
inline std::string small_sweep(const std::string& name, const std::string& base = "") {
  return fmt::format(R"(
[sweep]
name = "{}"
task = "flipflop:len=8"
seeds = [0, 1]
[base]
d_model = 16
heads = 2
steps = 300
batch = 4
eval_n = 64
{}[grid]
pe = ["rope", "path"]
)", name, base);
}

}  // namespace pb::test
