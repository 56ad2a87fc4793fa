// Shared by the tests that touch files or run the built binary: a scratch directory removed at
// the end of the test case, one kept for inspection after a failure, `pathbench <args>` run through
// the shell with its exit status, stdout and stderr captured, and `pathbench` started in the
// background (spawn) for the tests that signal or race it.
#pragma once
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
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

struct Child {
  pid_t pid;
  int status = -1;
};

// Starts `pathbench <args>` with stdout and stderr into `log` and the stop signals at their defaults.
inline Child spawn(const std::vector<std::string>& args, const std::filesystem::path& log) {
  std::vector<char*> argv;
  std::vector<std::string> all = {PATHBENCH_EXE};
  all.insert(all.end(), args.begin(), args.end());
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::FILE* f = std::fopen(log.c_str(), "w");
    ::dup2(::fileno(f), 1);
    ::dup2(::fileno(f), 2);
    for (const int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return {pid};
}

// The exit status, or 128 + the signal that ended it (as a shell shows it).
inline int wait_exit(Child& c) {
  ::waitpid(c.pid, &c.status, 0);
  return WIFEXITED(c.status) ? WEXITSTATUS(c.status) : 128 + WTERMSIG(c.status);
}

// The pid of a child process of `parent` (a running `train`), polling up to 60 s.
inline pid_t find_child(pid_t parent) {
  for (int tries = 0; tries < 60000; ++tries) {
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      const std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::string stat;
      try {
        stat = read_file((e.path() / "stat").string());
      } catch (const Error&) {
        continue;
      }
      int ppid = 0;
      std::sscanf(stat.c_str() + stat.rfind(')') + 2, "%*c %d", &ppid);
      if (ppid == parent) return std::stoi(name);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return 0;
}

// A finished command was refused: exit status 2 and exactly one stderr line "pathbench: error: ..."
// containing `needle`.
inline void check_error(const RunResult& r, const std::string& needle) {
  INFO("stderr: " << r.err);
  CHECK(r.code == 2);
  CHECK(r.err.rfind("pathbench: error: ", 0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.find(needle) != std::string::npos);
}

// `pathbench <args>` ("{dir}" in args: a fresh empty directory) is refused (check_error), and the
// directory stays empty.
inline void check_refused(const std::string& args, const std::string& needle) {
  TempDir dir("refused");
  const RunResult r = run_pathbench(fmt::format(fmt::runtime(args), fmt::arg("dir", dir.path.string())));
  INFO("args: " << args);
  check_error(r, needle);
  CHECK(std::filesystem::is_empty(dir.path));
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
