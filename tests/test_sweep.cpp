// Sweeps: grid expansion and its errors, run ids and shards, the child process scheduler (with
// /bin/sh children). collect, table and plot are tests/test_results.cpp.
// [e2e] tests drive the built pathbench (PATHBENCH_EXE) with real `train` runs and kill them.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <set>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli.h"
#include "core/error.h"
#include "core/io.h"
#include "core/spec.h"
#include "runners/scheduler.h"
#include "runners/sweep.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

const pb::OptionKinds kOptions = {{"task", 's'},  {"pe", 's'},    {"layers", 'i'}, {"d-model", 'i'},
                                  {"heads", 'i'}, {"steps", 'i'}, {"batch", 'i'},  {"lr", 'f'},
                                  {"seed", 'i'},  {"out", 's'},   {"threads", 'i'}, {"device", 's'}};

pb::Sweep parse(const std::string& text) { return pb::parse_sweep(text, "x.toml", kOptions); }

}  // namespace

TEST_CASE("sweep: grid expansion order, labels and spec keys", "[sweep]") {
  const pb::Sweep s = parse(R"(
[sweep]
name = "t"
task = "flipflop"
seeds = [0, 1]
[base]
d_model = 16
task.len = 8
pe.beta_clip = 0.001
[grid]
pe = ["rope", "path:foo=1"]
layers = [1, 2]
lr = [1e-3, 3e-4]
)");
  CHECK(s.name == "t");
  REQUIRE(s.runs.size() == 16);
  CHECK(s.runs[0].args == std::vector<std::string>{"--task", "flipflop:len=8", "--d-model", "16", "--seed", "0",
                                                   "--pe", "rope:beta_clip=0.001", "--layers", "1", "--lr", "0.001"});
  CHECK(s.runs[0].label == "seed=0 pe=rope layers=1 lr=0.001");
  CHECK(s.runs[1].label == "seed=0 pe=rope layers=1 lr=0.0003");
  CHECK(s.runs[2].label == "seed=0 pe=rope layers=2 lr=0.001");
  CHECK(s.runs[4].label == "seed=0 pe=path:foo=1 layers=1 lr=0.001");
  CHECK(s.runs[4].args[7] == "path:foo=1,beta_clip=0.001");
  CHECK(s.runs[8].label == "seed=1 pe=rope layers=1 lr=0.001");

  const pb::Sweep tasks = parse("[sweep]\nname = \"u\"\ntask = [\"a\", \"b:x=1\"]\n[grid]\ntask.len = [4, 8]\n");
  REQUIRE(tasks.runs.size() == 4);
  CHECK(tasks.runs[1].args == std::vector<std::string>{"--seed", "0", "--task", "a:len=8"});
  CHECK(tasks.runs[2].args[3] == "b:x=1,len=4");
  CHECK(tasks.runs[3].label == "seed=0 task=b:x=1 task.len=8");

  // [sweep] outer: that key's values outermost, then seeds; rank numbers (value, seed) in run order.
  CHECK(s.runs[8].rank == 1);  // seed 1
  const pb::Sweep lengths = parse("[sweep]\nname = \"v\"\ntask = \"a\"\nseeds = [0, 1]\nouter = \"task.len\"\n"
                                  "[grid]\nlayers = [1, 2]\ntask.len = [4, 8]\n");
  REQUIRE(lengths.runs.size() == 8);
  std::vector<std::string> labels;
  std::vector<size_t> ranks;
  for (const auto& run : lengths.runs) labels.push_back(run.label), ranks.push_back(run.rank);
  CHECK(labels == std::vector<std::string>{"task.len=4 seed=0 layers=1", "task.len=4 seed=0 layers=2",
                                           "task.len=4 seed=1 layers=1", "task.len=4 seed=1 layers=2",
                                           "task.len=8 seed=0 layers=1", "task.len=8 seed=0 layers=2",
                                           "task.len=8 seed=1 layers=1", "task.len=8 seed=1 layers=2"});
  CHECK(ranks == std::vector<size_t>{0, 0, 1, 1, 2, 2, 3, 3});
}

TEST_CASE("sweep: run ids through train's options are stable, built-in sweeps resolve", "[sweep]") {
  const pb::Sweep s = pb::parse_sweep(
      "[sweep]\nname = \"t\"\ntask = \"flipflop:len=8\"\n[base]\nd_model = 16\nsteps = 20\n[grid]\n"
      "pe = [\"rope\", \"path\"]\n", "t.toml", pb::train_option_kinds());
  REQUIRE(s.runs.size() == 2);
  CHECK(pb::run_id_of(s.runs[0].args) == "7023609306f34dc6");
  CHECK(pb::run_id_of(s.runs[1].args) == "d9271ebdcc4f891b");
  // The same config spelled differently (defaults, number spelling, order) has the same id.
  CHECK(pb::run_id_of({"--steps", "20", "--d-model", "16", "--task", "flipflop:p_ignore=0.80,len=8", "--lr", "1e-3"}) ==
        pb::run_id_of(s.runs[0].args));
  // Options added later (kv_conv) change the id only when set.
  CHECK(pb::run_id_of({"--task", "flipflop:len=8", "--d-model", "16", "--steps", "20", "--kv-conv", "0"}) ==
        pb::run_id_of(s.runs[0].args));
  CHECK(pb::run_id_of({"--task", "flipflop:len=8", "--d-model", "16", "--steps", "20", "--kv-conv", "1"}) !=
        pb::run_id_of(s.runs[0].args));
  CHECK_THROWS_WITH(pb::run_id_of({"--task", "flipflop", "--kv-conv", "2"}), Contains("--kv-conv must be 0 or 1"));
  CHECK_THROWS_WITH(pb::run_id_of({"--task", "flipflop", "--pe", "bogus"}), Contains("unknown position encoding 'bogus'"));
  CHECK_THROWS_WITH(pb::run_id_of({"--task", "flipflop", "--layers", "x"}), Contains("--layers"));
  for (const auto& e : fs::recursive_directory_iterator(fs::path(PATHBENCH_SOURCE_DIR) / "sweeps")) {
    if (e.path().extension() != ".toml") continue;
    INFO(e.path());
    const pb::Sweep sweep = pb::parse_sweep(pb::read_file(e.path().string()), e.path().string(), pb::train_option_kinds());
    CHECK(sweep.name == e.path().stem().string());
    std::set<std::string> ids;
    for (const auto& run : sweep.runs) {
      // The source of an init_from exists once the sweep before it has run (scripts/conversion.sh):
      // such runs are not resolved, and are told apart by their options.
      const auto from = std::find(run.args.begin(), run.args.end(), "--init-from");
      if (from == run.args.end()) {
        ids.insert(pb::run_id_of(run.args));
      } else {
        CHECK(from[1].find("{seed}") == std::string::npos);
        ids.insert(fmt::format("{}", fmt::join(run.args, " ")));
      }
    }
    CHECK(ids.size() == sweep.runs.size());
  }
}

TEST_CASE("sweep: shards take every n-th run", "[sweep]") {
  CHECK(pb::shard_indices(7, "1/3") == std::vector<size_t>{1, 4});
  CHECK(pb::shard_indices(7, "0/1").size() == 7);
  CHECK(pb::shard_indices(2, "2/3").empty());
  CHECK_THROWS_WITH(pb::shard_indices(7, "3/3"), Contains("expected i/n with 0 <= i < n"));
  CHECK_THROWS_WITH(pb::shard_indices(7, "a/b"), Contains("--shard 'a/b'"));
}

TEST_CASE("split_commas: the items of a comma-separated list, empty ones kept", "[sweep]") {
  using Items = std::vector<std::string>;
  CHECK(pb::split_commas("rope,path") == Items{"rope", "path"});
  CHECK(pb::split_commas("a,,b,") == Items{"a", "", "b", ""});
  CHECK(pb::split_commas("") == Items{""});
}

TEST_CASE("sweep: --only keeps the runs with the listed values of every key", "[sweep]") {
  const pb::Sweep s = parse(
      "[sweep]\nname = \"t\"\ntask = \"flipflop\"\nseeds = [0, 1]\n[base]\nsteps = 5\n[grid]\n"
      "pe = [\"rope\", \"path\", \"sba\"]\nlr = [3e-4, 1e-3]\n");  // 12 runs: seed, pe, lr
  REQUIRE(s.runs.size() == 12);
  CHECK(s.runs[3].values == std::map<std::string, std::string>{{"seed", "0"}, {"pe", "path"}, {"lr", "0.001"}});
  CHECK(pb::select_runs(s, {}).size() == 12);
  CHECK(pb::select_runs(s, {"pe=path"}) == std::vector<size_t>{2, 3, 8, 9});
  // Values of one filter are alternatives, filters all hold; numbers compare by value.
  CHECK(pb::select_runs(s, {"pe=sba,rope", "lr=1e-3"}) == std::vector<size_t>{1, 5, 7, 11});
  CHECK(pb::select_runs(s, {"lr=3E-4", "seed=1"}) == std::vector<size_t>{6, 8, 10});
  CHECK_THROWS_WITH(pb::select_runs(s, {"pe=pth"}), Contains("--only 'pe=pth': no run of the sweep has pe=pth"));
  CHECK_THROWS_WITH(pb::select_runs(s, {"steps=5"}),
                    Contains("'steps' is not a list of the sweep; its lists: lr, pe, seed"));
  for (const char* bad : {"pe", "=rope", "pe="})
    CHECK_THROWS_WITH(pb::select_runs(s, {bad}), Contains("expected KEY=VALUE"));
}

TEST_CASE("sweep: bad files name the file, line and key", "[sweep]") {
  const std::string head = "[sweep]\nname = \"t\"\ntask = \"flipflop\"\n";
  CHECK_THROWS_WITH(parse(head + "[base]\nlayerz = 2\n"),
                    Contains("x.toml:5: [base] layerz: unknown key; valid keys: batch, d_model, device, heads"));
  CHECK_THROWS_WITH(parse(head + "[base]\nd-model = 2\n"), Contains("x.toml:5: [base] d-model: unknown key"));
  CHECK_THROWS_WITH(parse(head + "[grid]\nfoo.len = [2]\n"), Contains("x.toml:5: [grid] foo: unknown key"));
  CHECK_THROWS_WITH(parse(head + "[base]\nlayers = \"two\"\n"),
                    Contains("x.toml:5: [base] layers: expected an integer, got a string"));
  CHECK_THROWS_WITH(parse(head + "[grid]\nlr = [0.1, \"fast\"]\n"),
                    Contains("x.toml:5: [grid] lr: expected a number, got a string"));
  CHECK_THROWS_WITH(parse(head + "[grid]\nlayers = 2\n"), Contains("x.toml:5: [grid] layers: expected a list"));
  CHECK_THROWS_WITH(parse(head + "[grid]\nlayers = []\n"), Contains("x.toml:5: [grid] layers: empty list"));
  CHECK_THROWS_WITH(parse(head + "[base]\nlayers = [1, 2]\n"), Contains("x.toml:5: [base] layers: lists go in [grid]"));
  CHECK_THROWS_WITH(parse(head + "[base]\nseed = 1\n"), Contains("x.toml:5: [base] seed: list the seeds"));
  CHECK_THROWS_WITH(parse(head + "[base]\nthreads = 1\n"), Contains("set by the sweep itself"));
  CHECK_THROWS_WITH(parse(head + "[base]\nlayers = 1\n[grid]\nlayers = [1]\n"),
                    Contains("x.toml:7: [grid] layers: given twice"));
  CHECK_THROWS_WITH(parse(head + "[base]\ntask = \"a5\"\n"), Contains("x.toml:5: [base] task: given twice"));
  CHECK_THROWS_WITH(parse(head + "seedz = [1]\n"), Contains("x.toml:4: [sweep] seedz: unknown key"));
  CHECK_THROWS_WITH(parse(head + "outer = \"lr\"\n[grid]\nlayers = [1]\n"), Contains("x.toml:4: [sweep] outer: 'lr' is not a [grid] key"));
  CHECK_THROWS_WITH(parse(head + "outer = \"seed\"\n"), Contains("[sweep] outer: 'seed' is not a [grid] key"));
  CHECK_THROWS_WITH(parse(head + "outer = 3\n"), Contains("x.toml:4: [sweep] outer: expected the name of a [grid] key"));
  CHECK_THROWS_WITH(parse(head + "[grids]\n"), Contains("x.toml:4: unknown section or key 'grids'"));
  CHECK_THROWS_WITH(parse(head + "[base]\nlayers = \n"), Contains("x.toml:5:"));
  CHECK_THROWS_WITH(parse(head + "[base]\npe.x = 1\n"), Contains("x.toml: pe.KEY given without pe"));
  CHECK_THROWS_WITH(parse("[sweep]\ntask = \"a\"\n"), Contains("x.toml: [sweep] needs name"));
  CHECK_THROWS_WITH(parse("[sweep]\nname = \"../up\"\ntask = \"a\"\n"), Contains("x.toml:2: [sweep] name '../up'"));
  CHECK_THROWS_WITH(parse("[sweep]\nname = \"t\"\n"), Contains("x.toml: no task"));
  // Comments may hold any text; elsewhere a sweep file is ASCII (test_fuzz_regressions: why).
  CHECK_THROWS_WITH(parse(head + "# \xc2\xa7 \xce\xb2 \"\n[base]\nlayerz = 1 # \xc3\x97\n"),
                    Contains("x.toml:6: [base] layerz: unknown key"));
  // A product of 1e8 runs is refused before it is expanded in memory.
  std::string big = head + "[grid]\n";
  for (const char* key : {"lr", "batch", "d_model", "steps"})
    big += fmt::format("{} = [{}]\n", key, fmt::join(std::vector<int>(100, 1), ", "));
  CHECK_THROWS_WITH(parse(big), Contains("x.toml: the grid has 1e+08 runs; at most 1000000 per sweep file"));
}

TEST_CASE("scheduler: failures recorded, stale files removed, logs kept", "[sweep]") {
  const fs::path d = pb::test::fresh_dir("sched");
  auto job = [&](const std::string& name, const std::string& script, const std::string& argv0 = "/bin/sh",
                 const std::string& exec = "") {
    const std::string dir = (d / name).string();
    return pb::Job{{argv0, "-c", script, "sh", dir}, {}, dir, name, "label-" + name, {}, "pending", exec};
  };
  fs::create_directories(d / "ok");
  pb::write_file_atomic((d / "ok" / "stale.txt").string(), "old");
  const std::vector<pb::Job> jobs = {
      job("ok", "echo hello; echo '{\"status\": \"ok\"}' > \"$1/result.json\""),
      job("killed", "echo dying; kill -9 $$"),
      job("exit3", "exit 3"),
      job("own", "echo '{\"status\": \"failed\", \"error\": \"diverged? no: bad input\"}' > \"$1/result.json\"; exit 2"),
      job("noexe", "exec /nonexistent/pathbench"),
      // Job::exec, not argv[0], is the file executed (a sweep's runs: /proc/self/exe).
      job("exec", "echo '{\"status\": \"ok\"}' > \"$1/result.json\"", "/nonexistent/sh", "/bin/sh")};
  const pb::JobsOutcome got = pb::run_jobs(jobs, {"", ""}, {"t", 6, 0, 0});
  CHECK(got.done == 2);
  CHECK(got.failed == 4);
  CHECK(got.signal == 0);
  CHECK_FALSE(fs::exists(d / "ok" / "stale.txt"));
  CHECK(pb::read_file((d / "ok" / "log.txt").string()) == "hello\n");
  CHECK(pb::run_state((d / "ok").string()) == "done");
  CHECK(pb::run_state((d / "exec").string()) == "done");
  auto error = [&](const char* name) {
    return nlohmann::json::parse(pb::read_file((d / name / "result.json").string()))["error"].get<std::string>();
  };
  CHECK_THAT(error("killed"), Contains("killed by signal 9"));
  CHECK(pb::read_file((d / "killed" / "log.txt").string()) == "dying\n");
  CHECK(error("exit3") == "exited with status 3 without writing result.json");
  CHECK(error("own") == "diverged? no: bad input");  // the child's own record is kept
  CHECK(error("noexe") == "exited with status 127 without writing result.json");
  CHECK(pb::run_state((d / "killed").string()) == "failed");
  CHECK(pb::run_state((d / "none").string()) == "pending");
}

// ---- End to end, with the real `pathbench train` ----

namespace {

using pb::test::Child;
using pb::test::find_child;
using pb::test::spawn;
using pb::test::wait_exit;

const std::string kE2eSweep = pb::test::small_sweep("e2e");

// run_id -> the "eval" object of its result.json, for every run of the e2e sweep under `out`.
std::map<std::string, std::string> results(const fs::path& out) {
  std::map<std::string, std::string> r;
  for (const auto& e : fs::directory_iterator(out / "e2e"))
    if (fs::exists(e.path() / "result.json")) {
      const auto j = nlohmann::json::parse(pb::read_file((e.path() / "result.json").string()));
      r[e.path().filename().string()] = j.value("status", "") + " " + j.value("eval", nlohmann::json()).dump();
    }
  return r;
}

}  // namespace

TEST_CASE("sweep e2e: killed child recorded as failed, killed sweep resumes identically", "[sweep][e2e]") {
  const fs::path d = pb::test::fresh_dir("e2e");
  const std::string file = (d / "e2e.toml").string();
  pb::write_file_atomic(file, kE2eSweep);
  const fs::path log = d / "sweep.log";

  // Reference: an uninterrupted sweep.
  Child ref = spawn({"sweep", file, "--out", (d / "ref").string(), "--jobs", "2"}, log);
  REQUIRE(wait_exit(ref) == 0);
  const auto expected = results(d / "ref");
  REQUIRE(expected.size() == 4);
  for (const auto& [id, r] : expected) CHECK(r.rfind("ok ", 0) == 0);
  CHECK(pb::read_file((d / "ref" / "e2e" / "sweep.toml").string()) == kE2eSweep);

  // SIGKILL one train child: recorded as failed, the sweep goes on (and exits non-zero).
  Child a = spawn({"sweep", file, "--out", (d / "a").string(), "--jobs", "2"}, log);
  const pid_t victim = find_child(a.pid);
  REQUIRE(victim > 0);
  ::kill(victim, SIGKILL);
  CHECK(wait_exit(a) != 0);
  auto got = results(d / "a");
  REQUIRE(got.size() == 4);
  size_t failed = 0;
  for (const auto& [id, r] : got) {
    if (r.rfind("failed", 0) != 0) continue;
    ++failed;
    const auto j = nlohmann::json::parse(pb::read_file((d / "a" / "e2e" / id / "result.json").string()));
    CHECK_THAT(j["error"].get<std::string>(), Contains("killed by signal 9"));
  }
  CHECK(failed == 1);
  Child retry = spawn({"sweep", file, "--out", (d / "a").string(), "--jobs", "2", "--retry-failed"}, log);
  CHECK(wait_exit(retry) == 0);
  CHECK(results(d / "a") == expected);

  // SIGKILL the sweep itself mid-run: the run in flight stays pending and is redone from scratch.
  Child b = spawn({"sweep", file, "--out", (d / "b").string(), "--jobs", "2"}, log);
  REQUIRE(find_child(b.pid) > 0);
  ::kill(b.pid, SIGKILL);
  wait_exit(b);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the orphan dies by PDEATHSIG
  CHECK(results(d / "b").size() < 4);
  Child b2 = spawn({"sweep", file, "--out", (d / "b").string(), "--jobs", "2"}, log);
  CHECK(wait_exit(b2) == 0);
  CHECK(results(d / "b") == expected);

  // SIGTERM: forwarded to the child, the sweep exits non-zero, nothing is recorded as failed.
  Child c = spawn({"sweep", file, "--out", (d / "c").string(), "--jobs", "2"}, log);
  REQUIRE(find_child(c.pid) > 0);
  ::kill(c.pid, SIGTERM);
  CHECK(wait_exit(c) != 0);
  for (const auto& [id, r] : results(d / "c")) CHECK(r.rfind("ok ", 0) == 0);
  CHECK(results(d / "c").size() < 4);
  Child c2 = spawn({"sweep", file, "--out", (d / "c").string(), "--jobs", "2"}, log);
  CHECK(wait_exit(c2) == 0);
  CHECK(results(d / "c") == expected);

  // A finished sweep runs nothing; --dry-run lists every run as done.
  Child dry = spawn({"sweep", file, "--out", (d / "c").string(), "--dry-run"}, log);
  CHECK(wait_exit(dry) == 0);
  const std::string listed = pb::read_file(log.string());
  CHECK_THAT(listed, Contains("4 runs: 4 done, 0 failed, 0 to run"));
  for (const auto& [id, r] : expected) CHECK_THAT(listed, Contains(id + "\tdone\tseed="));
}
