// Never lose or mislabel a result (docs/guarantees.md): what an output path may be, the run
// directory lock, refusals to clobber finished work (train --out, the sweep's grid record), two
// sweeps sharing one directory, exit statuses, signals and the standard streams.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "cli.h"
#include "core/error.h"
#include "core/io.h"
#include "runners/run_dir.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using pb::test::Child;
using pb::test::RunResult;
using pb::test::TempDir;
using pb::test::check_error;
using pb::test::run_pathbench;
using pb::test::spawn;
using pb::test::wait_exit;

namespace {

// Entries of `dir` whose name holds ".tmp." (temporaries of atomic writes).
size_t temporaries(const fs::path& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().find(".tmp.") != std::string::npos;
  return n;
}

const std::string kTrain =
    "train --task flipflop:len=8 --pe rope --layers 1 --d-model 16 --heads 2 --steps 5 --batch 4 --eval-n 8 "
    "--threads 1";

// Whether the child has not exited yet (it is left to wait_exit to reap).
bool running(const Child& c) {
  siginfo_t info{};
  return ::waitid(P_PID, id_t(c.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
}

// Polls `done` every 50 ms for up to `seconds`.
bool wait_for(const std::function<bool()>& done, double seconds = 300) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

// The number that the one group of `pattern` matches first in `log`, or 0.
size_t number_in(const std::string& log, const std::string& pattern) {
  std::smatch m;
  return std::regex_search(log, m, std::regex(pattern)) ? std::stoul(m[1]) : 0;
}

}  // namespace

TEST_CASE("atomic writes: regular files replaced, links followed, FIFOs and devices written in place", "[safety]") {
  const TempDir tmp("atomic");
  const std::string file = tmp.file("file"), link = tmp.file("link");
  pb::write_file_atomic(file, "old");
  fs::create_symlink(file, link);
  pb::write_file_atomic(link, "new");
  CHECK(fs::is_symlink(link));  // the link stays, the file it names is replaced
  CHECK(pb::read_file(file) == "new");

  const std::string fifo = tmp.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  std::string got;
  std::thread reader([&] { got = pb::read_file(fifo); });
  pb::write_file_atomic(fifo, "through the pipe");
  reader.join();
  CHECK(got == "through the pipe");
  CHECK(fs::is_fifo(fifo));

  const std::string null = tmp.file("null");  // a character device of our own (root only): /dev/null's numbers
  if (::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    pb::write_file_atomic(null, "gone");
    CHECK(fs::is_character_file(null));
  } else {
    WARN("not root: the character-device case is not checked");
  }

  fs::create_symlink(tmp.file("missing"), tmp.file("dangling"));
  CHECK_THROWS_WITH(pb::write_file_atomic(tmp.file("dangling"), "x"), Contains("a symbolic link to nothing"));
  CHECK_FALSE(fs::exists(tmp.file("missing")));
  fs::create_directory(tmp.file("dir"));
  CHECK_THROWS_WITH(pb::write_file_atomic(tmp.file("dir"), "x"), Contains("it is a directory"));
  CHECK(temporaries(tmp.path) == 0);
}

TEST_CASE("atomic writes: live temporaries are registered for the signal handler", "[safety]") {
  const TempDir tmp("live");
  pb::AtomicOutput out(tmp.file("data"));
  out.write("abc", 3);
  REQUIRE(temporaries(tmp.path) == 1);
  pb::remove_live_temporaries();
  CHECK(temporaries(tmp.path) == 0);
  CHECK_FALSE(fs::exists(tmp.file("data")));
}

TEST_CASE("signals: SIGINT, SIGTERM, SIGHUP end gen by the signal and leave no temporary", "[safety][cli]") {
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    const TempDir tmp(fmt::format("sig{}", sig));
    Child gen = spawn({"gen", "--task", "flipflop:len=128", "--split", "train", "--n", "2000000", "--format", "bin",
                       "--out", tmp.file("d.bin")},
                      tmp.path / "log.txt");
    REQUIRE(wait_for([&] { return temporaries(tmp.path) == 1; }, 60));
    ::kill(gen.pid, sig);
    CHECK(wait_exit(gen) == 128 + sig);
    CHECK(temporaries(tmp.path) == 0);
    CHECK_FALSE(fs::exists(tmp.file("d.bin")));
  }
}

TEST_CASE("exit statuses: filesystem errors on given paths are user errors (2), messages stay one line", "[safety][cli]") {
  const TempDir tmp("status");
  pb::write_file_atomic(tmp.file("plain"), "a regular file");
  check_error(run_pathbench(kTrain + " --out " + tmp.file("plain") + "/run"), "cannot create run directory");
  pb::write_file_atomic(tmp.file("s.toml"), pb::test::small_sweep("s"));
  const RunResult sweep = run_pathbench("sweep " + tmp.file("s.toml") + " --out " + tmp.file("plain"));
  CHECK(sweep.code == 2);  // after the sweep's summary line
  CHECK_THAT(sweep.err, Contains("\npathbench: error: ") && Contains(tmp.file("plain")));
  // Input echoed in a message, newline and all, stays on the message's one line.
  check_error(run_pathbench("train --task flipflop:len=8 --pe 'ro\npe' --out " + tmp.file("x")), "'ro\\npe'");
}

TEST_CASE("standard streams: stdout write errors are reported, a closed stderr is harmless", "[safety][cli]") {
  // `pathbench <args>` with its stdout redirected by `redirect`, stderr captured.
  auto run_redirected = [](const std::string& args, const std::string& redirect) {
    const TempDir capture("stdout");
    const std::string err = capture.file("stderr.txt");
    const int s = std::system(fmt::format("'{}' {} {} 2>'{}'", PATHBENCH_EXE, args, redirect, err).c_str());
    return RunResult{WIFEXITED(s) ? WEXITSTATUS(s) : -1, "", pb::read_file(err)};
  };
  for (const std::string redirect : {">/dev/full", ">&-"}) {
    INFO(redirect);
    check_error(run_redirected("list", redirect), "cannot write to standard output");
    check_error(run_redirected("--version", redirect), "cannot write to standard output");
  }
  const TempDir tmp("closed");
  const std::string exe = PATHBENCH_EXE;
  auto status = [&](const std::string& args) {
    const int s = std::system(fmt::format("'{}' {} 2>&- >'{}'", exe, args, tmp.file("out")).c_str());
    return WIFEXITED(s) ? WEXITSTATUS(s) : -1;
  };
  CHECK(status("gen --task nonesuch --split train --n 1 --format bin --out " + tmp.file("d.bin")) == 2);
  CHECK(status("list") == 0);
  CHECK_THAT(pb::read_file(tmp.file("out")), Contains("flipflop"));
}

TEST_CASE("train --out: locked, finished or foreign directories are refused, --overwrite forces, eval --run "
          "takes the lock too", "[safety][cli]") {
  const TempDir tmp("trainout");
  const std::string run = tmp.file("run");
  {
    const pb::RunLock held = pb::RunLock::try_take(run, "the test");
    REQUIRE(held.held());
    check_error(run_pathbench(kTrain + " --out " + run), "is in use by the test (pid");
    CHECK_FALSE(fs::exists(run + "/config.json"));
  }
  REQUIRE(run_pathbench(kTrain + " --out " + run).code == 0);
  {  // eval appends to the run's eval.jsonl: not while another process holds the run
    const pb::RunLock held = pb::RunLock::try_take(run, "the test");
    REQUIRE(held.held());
    const std::string evals = pb::read_file(run + "/eval.jsonl");
    check_error(run_pathbench("eval --run " + run + " --n 8"), "is in use by the test (pid");
    CHECK(pb::read_file(run + "/eval.jsonl") == evals);
  }
  REQUIRE(run_pathbench("eval --run " + run + " --n 8").code == 0);
  const std::string first = pb::read_file(run + "/meta.json");
  check_error(run_pathbench(kTrain + " --out " + run), "holds a finished run (status ok, run ");
  CHECK(pb::read_file(run + "/meta.json") == first);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // meta.json's start_time moves on
  REQUIRE(run_pathbench(kTrain + " --out " + run + " --overwrite").code == 0);
  CHECK(pb::read_file(run + "/meta.json") != first);

  // An unfinished run (no result.json) is restarted; a directory with other files is not a run.
  fs::remove(run + "/result.json");
  pb::write_file_atomic(run + "/result.json.tmp.99", "left by a killed writer");
  CHECK(run_pathbench(kTrain + " --out " + run).code == 0);
  const std::string other = tmp.file("other");
  fs::create_directories(other);
  pb::write_file_atomic(other + "/notes.txt", "mine");
  check_error(run_pathbench(kTrain + " --out " + other), "is not a run directory: it holds 'notes.txt'");
  CHECK_FALSE(fs::exists(other + "/config.json"));
  REQUIRE(run_pathbench(kTrain + " --out " + other + " --overwrite").code == 0);
  CHECK(pb::read_file(other + "/notes.txt") == "mine");
  CHECK(fs::exists(other + "/result.json"));
}

TEST_CASE("sweep grid record: a changed grid is refused, --overwrite records it and keeps finished runs", "[safety][cli]") {
  const fs::path d = pb::test::fresh_dir("grid");
  auto sweep_file = [&](const std::string& pes) {
    pb::write_file_atomic((d / "g.toml").string(),
                          "[sweep]\nname = \"g\"\ntask = \"flipflop:len=8\"\nseeds = [0]\n[base]\nd_model = 16\n"
                          "heads = 2\nsteps = 5\nbatch = 4\neval_n = 8\n[grid]\npe = [" + pes + "]\n");
  };
  const std::string sweep = "sweep " + (d / "g.toml").string() + " --out " + (d / "out").string();
  sweep_file("\"rope\", \"path\"");
  REQUIRE(run_pathbench(sweep).code == 0);
  const auto grid = nlohmann::json::parse(pb::read_file((d / "out" / "g" / "grid.json").string()));
  REQUIRE(grid["runs"].size() == 2);
  const std::string rope = grid["runs"][0]["run_id"], rope_result = (d / "out" / "g" / rope / "result.json").string();
  const std::string kept = pb::read_file(rope_result);
  CHECK(run_pathbench(sweep).code == 0);  // unchanged: resumes

  sweep_file("\"rope\", \"fox\"");
  for (const std::string extra : {"", " --shard 1/2"})
    check_error(run_pathbench(sweep + extra), "1 run added (seed=0 pe=fox), 1 run removed (seed=0 pe=path)");
  const RunResult dry = run_pathbench(sweep + " --dry-run");
  CHECK(dry.code == 0);
  CHECK_THAT(dry.err, Contains("warning") && Contains("1 run added"));
  REQUIRE(run_pathbench(sweep + " --overwrite").code == 0);
  CHECK(pb::read_file(rope_result) == kept);
  const std::string recorded = pb::read_file((d / "out" / "g" / "grid.json").string());
  CHECK_THAT(recorded, Contains("pe=fox") && !Contains("pe=path"));
  CHECK(run_pathbench(sweep).code == 0);
}

TEST_CASE("sweep: a run locked by another process is left to it and counted when it ends", "[safety][cli]") {
  for (const std::string engine : {"--jobs 2", "--pack 2"}) {
    INFO(engine);
    const fs::path d = pb::test::fresh_dir("locked");
    const std::string file = (d / "l.toml").string();
    pb::write_file_atomic(file, pb::test::small_sweep("l"));
    const RunResult dry = run_pathbench("sweep " + file + " --out " + (d / "out").string() + " --dry-run");
    REQUIRE(dry.code == 0);
    const std::string held_id = dry.out.substr(0, dry.out.find('\t'));
    const fs::path held_dir = d / "out" / "l" / held_id;
    pb::RunLock held = pb::RunLock::try_take(held_dir.string(), "the test");
    REQUIRE(held.held());
    std::vector<std::string> args = {"sweep", file, "--out", (d / "out").string()};
    args.push_back(engine.substr(0, engine.find(' ')));
    args.push_back(engine.substr(engine.find(' ') + 1));
    Child sweep = spawn(args, d / "log.txt");
    auto finished = [&] {
      size_t n = 0;
      for (const auto& e : fs::directory_iterator(d / "out" / "l")) n += fs::exists(e.path() / "result.json");
      return n;
    };
    REQUIRE(wait_for([&] { return finished() == 3; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    CHECK(running(sweep));  // waiting for the held run
    CHECK_FALSE(fs::exists(held_dir / "result.json"));
    pb::write_file_atomic((held_dir / "result.json").string(),
                          nlohmann::json{{"status", "ok"}, {"run_id", held_id}}.dump());
    held = pb::RunLock();
    CHECK(wait_exit(sweep) == 0);
    const std::string log = pb::read_file((d / "log.txt").string());
    INFO(log);
    CHECK_THAT(log, Contains("in use by another worker") && Contains("4 of 4 runs done, 0 failed (1 of them by other workers)"));
  }
}

TEST_CASE("sweep: two sweeps on one directory train every run exactly once", "[safety][cli]") {
  const fs::path d = pb::test::fresh_dir("coop");
  const std::string file = (d / "c.toml").string();
  pb::write_file_atomic(file, pb::test::small_sweep("c"));
  Child a = spawn({"sweep", file, "--out", (d / "out").string()}, d / "a.txt");
  Child b = spawn({"sweep", file, "--out", (d / "out").string()}, d / "b.txt");
  CHECK(wait_exit(a) == 0);
  CHECK(wait_exit(b) == 0);
  size_t trained = 0;
  for (const char* name : {"a.txt", "b.txt"}) {
    const std::string log = pb::read_file((d / name).string());
    INFO(log);
    CHECK_THAT(log, Contains("4 of 4 runs done, 0 failed"));
    trained += number_in(log, "(\\d+) to run") - number_in(log, "\\((\\d+) of them by other workers\\)");
  }
  CHECK(trained == 4);
  size_t runs = 0;
  for (const auto& e : fs::directory_iterator(d / "out" / "c")) {
    if (!e.is_directory()) continue;
    ++runs;
    CHECK(nlohmann::json::parse(pb::read_file((e.path() / "result.json").string()))["status"] == "ok");
    CHECK(fs::exists(e.path() / "config.json"));
    int last = 0;  // the metrics of one training: steps strictly increasing
    std::istringstream metrics(pb::read_file((e.path() / "metrics.jsonl").string()));
    for (std::string line; std::getline(metrics, line);) {
      const int step = nlohmann::json::parse(line)["step"];
      CHECK(step > last);
      last = step;
    }
    CHECK(last == 300);
  }
  CHECK(runs == 4);
}

TEST_CASE("sweep: Ctrl-C ends it by SIGINT (status 130), the runs in flight stay pending", "[safety][cli]") {
  const fs::path d = pb::test::fresh_dir("sigint");
  const std::string file = (d / "i.toml").string();
  pb::write_file_atomic(file, pb::test::small_sweep("i"));
  Child sweep = spawn({"sweep", file, "--out", (d / "out").string()}, d / "log.txt");
  REQUIRE(pb::test::find_child(sweep.pid) > 0);
  ::kill(sweep.pid, SIGINT);
  CHECK(wait_exit(sweep) == 130);
  CHECK_THAT(pb::read_file((d / "log.txt").string()), Contains("stopped by Interrupt"));
}

TEST_CASE("collect: a run folder whose files come from two attempts of the run is refused", "[safety][cli]") {
  const TempDir tmp("attempts");
  const std::string run = tmp.file("runs/r");
  REQUIRE(run_pathbench(kTrain + " --out " + run).code == 0);
  const auto result = nlohmann::json::parse(pb::read_file(run + "/result.json"));
  const auto meta = nlohmann::json::parse(pb::read_file(run + "/meta.json"));
  CHECK(std::regex_match(result.value("attempt", ""), std::regex("[0-9a-f]{16}")));
  CHECK(result["attempt"] == meta["attempt"]);
  const std::string collect = "collect " + tmp.file("runs") + " -o " + tmp.file("out");
  CHECK(run_pathbench(collect).code == 0);
  // `eval --run` appends evaluations after the final one: still one attempt.
  REQUIRE(run_pathbench("eval --run " + run + " --n 8").code == 0);
  CHECK(run_pathbench(collect).code == 0);

  // Each file of an older attempt, restored beside the newer result.json.
  const auto with = [&](const std::string& file, const std::string& text, const std::string& needle) {
    const std::string kept = pb::read_file(run + "/" + file);
    pb::write_file_atomic(run + "/" + file, text);
    INFO(file);
    check_error(run_pathbench(collect), needle);
    pb::write_file_atomic(run + "/" + file, kept);
    CHECK(run_pathbench(collect).code == 0);
  };
  auto other = meta;
  other["attempt"] = "0123456789abcdef";
  with("meta.json", other.dump(), "come from two attempts of it (result.json is attempt ");
  std::string evals;
  std::istringstream lines(pb::read_file(run + "/eval.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    auto e = nlohmann::json::parse(line);
    e["acc"] = 0.125;  // the older attempt evaluated other weights
    evals += e.dump() + "\n";
  }
  with("eval.jsonl", evals, "evaluation is not in eval.jsonl");
  const std::string metrics = pb::read_file(run + "/metrics.jsonl");
  with("metrics.jsonl", metrics.substr(0, metrics.find('\n') + 1), "metrics.jsonl ends at step 1, result.json at 5");
}
