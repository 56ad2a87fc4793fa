// The packed sweep engine (runs as threads of one process), early stopping, the evaluation batch,
// the adaptive depth search and `sweep --estimate`, on the CPU through the built binary. The GPU
// side (packed runs against the same runs alone) is tests/test_cuda_pack.cpp.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <thread>
#include <vector>
#include <fmt/ranges.h>

#include "cli.h"
#include "core/io.h"
#include "core/slow_call.h"
#include "core/writer_first_mutex.h"
#include "runners/scheduler.h"
#include "runners/trainer.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using pb::test::run_pathbench;
using pb::test::TempDir;

namespace {

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(pb::read_file(p.string())); }

// run_id -> "status eval" of every finished run of sweep `name` under `out`.
std::map<std::string, std::string> results(const fs::path& out, const std::string& name) {
  std::map<std::string, std::string> r;
  if (!fs::exists(out / name)) return r;
  for (const auto& e : fs::directory_iterator(out / name))
    if (fs::exists(e.path() / "result.json")) {
      const auto j = read_json(e.path() / "result.json");
      r[e.path().filename().string()] = j.value("status", "") + " " + j.value("eval", nlohmann::json()).dump();
    }
  return r;
}

const std::string kSweep = pb::test::small_sweep("pk", "device = \"cpu\"\n");

std::string sweep_file(const TempDir& d, const std::string& text) {
  const std::string f = d.file("s.toml");
  pb::write_file_atomic(f, text);
  return f;
}

}  // namespace

TEST_CASE("pack: packed runs equal the process engine's, bit for bit, and a finished sweep runs nothing", "[pack]") {
  const TempDir d("pack_eq");
  const std::string f = sweep_file(d, kSweep);
  REQUIRE(run_pathbench(fmt::format("sweep {} --out {} --jobs 2", f, d.file("proc"))).code == 0);
  const auto r = run_pathbench(fmt::format("sweep {} --out {} --pack 2", f, d.file("pack")));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.err, Contains("(packed, 2 slots)"));
  const auto expected = results(d.file("proc"), "pk");
  REQUIRE(expected.size() == 4);
  CHECK(results(d.file("pack"), "pk") == expected);
  for (const auto& e : fs::directory_iterator(fs::path(d.file("pack")) / "pk")) {
    if (!e.is_directory()) continue;
    CHECK_THAT(pb::read_file((e.path() / "log.txt").string()), Contains("eval val acc"));  // its own log
    CHECK(fs::exists(e.path() / "model.safetensors"));
  }
  const auto again = run_pathbench(fmt::format("sweep {} --out {} --pack 2", f, d.file("pack")));
  CHECK(again.code == 0);
  CHECK_THAT(again.err, Contains("4 runs: 4 done, 0 failed, 0 to run"));
  CHECK(run_pathbench(fmt::format("sweep {} --pack 2 --jobs 2", f)).code == 2);
  CHECK(run_pathbench(fmt::format("sweep {} --pack 0", f)).code == 2);
  CHECK(run_pathbench(fmt::format("sweep {} --estimate", f)).code == 2);  // needs --pack
}

TEST_CASE("pack: a run that fails is recorded, the others go on", "[pack]") {
  const TempDir d("pack_fail");
  std::string text = kSweep;
  text.replace(text.find("pe = [\"rope\", \"path\"]"), 21, "data = [\"\", \"/nonexistent/train.bin\"]");
  const std::string f = sweep_file(d, text);
  const auto r = run_pathbench(fmt::format("sweep {} --out {} --pack 3", f, d.path.string()));
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("2 runs failed"));
  size_t ok = 0, failed = 0;
  for (const auto& [id, s] : results(d.path, "pk")) (s.rfind("ok ", 0) == 0 ? ok : failed) += 1;
  CHECK(ok == 2);
  CHECK(failed == 2);
}

TEST_CASE("pack: SIGTERM stops the runs in flight, which stay pending, and a rerun finishes identically", "[pack]") {
  const TempDir d("pack_term");
  const std::string f = sweep_file(d, kSweep);
  REQUIRE(run_pathbench(fmt::format("sweep {} --out {} --pack 2", f, d.file("ref"))).code == 0);
  const auto expected = results(d.file("ref"), "pk");
  const bool stack = GENERATE(false, true);  // packed, or stacked (resumed runs rejoin a group)
  INFO((stack ? "--stack 2" : "packed"));
  const fs::path out = d.file(stack ? "stacked" : "t");
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::FILE* log = std::fopen((d.path / "t.log").c_str(), "w");
    ::dup2(::fileno(log), 2);
    ::execl(PATHBENCH_EXE, PATHBENCH_EXE, "sweep", f.c_str(), "--out", out.c_str(), "--pack", "2", "--stack",
            stack ? "2" : "0", nullptr);
    ::_exit(127);
  }
  bool started = false;  // a run has trained some steps
  for (int i = 0; i < 20000 && !started; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (fs::exists(out / "pk"))
      for (const auto& e : fs::directory_iterator(out / "pk")) started |= fs::exists(e.path() / "metrics.jsonl");
  }
  REQUIRE(started);
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status));  // ended by the signal after stopping its runs (docs/guarantees.md)
  CHECK(WTERMSIG(status) == SIGTERM);
  const auto partial = results(out, "pk");
  CHECK(partial.size() < 4);
  for (const auto& [id, s] : partial) CHECK(s == expected.at(id));  // nothing recorded failed
  REQUIRE(run_pathbench(fmt::format("sweep {} --out {} --pack 2 --stack {}", f, out.string(), stack ? 2 : 0)).code == 0);
  CHECK(results(out, "pk") == expected);
}

TEST_CASE("train: --stop-at ends at the first evaluation that meets it, --patience, result.json says why", "[pack][train]") {
  const TempDir d("stop");
  const std::string base = "train --task flipflop:len=8 --pe path --d-model 16 --heads 2 --steps 400 --batch 8 "
                           "--eval-n 64 --eval-every 50 --device cpu --threads 1";
  auto r = run_pathbench(fmt::format("{} --stop-at 'val:acc>=0' --out {}", base, d.file("a")));
  REQUIRE(r.code == 0);
  auto j = read_json(d.file("a/result.json"));
  CHECK(j["stop"].get<std::string>().rfind("stop_at val:acc>=0 ", 0) == 0);
  CHECK(j["stopped_at_step"] == 50);
  CHECK(j["steps"] == 50);
  CHECK(j["eval"]["val"]["n_seqs"] == 64);  // the final evaluation is the full one
  CHECK(j["eval_s"].get<double>() >= 0);

  r = run_pathbench(fmt::format("{} --eval-every-n 16 --out {}", base, d.file("b")));
  REQUIRE(r.code == 0);
  j = read_json(d.file("b/result.json"));
  CHECK(j["stop"] == "steps");
  CHECK(j["stopped_at_step"].is_null());
  CHECK(j["steps"] == 400);
  const auto evals = pb::read_file(d.file("b/eval.jsonl"));
  CHECK_THAT(evals, Contains("\"n_seqs\":16"));  // periodic, on the subset
  CHECK_THAT(evals, Contains("\"n_seqs\":64"));  // final

  // A rule no run meets, and a learning rate too small to move a prediction: the accuracy of the
  // second evaluation does not improve on the first, and patience 1 ends the run there.
  r = run_pathbench(fmt::format("{} --stop-at 'val:acc>=2' --patience 1 --lr 1e-12 --warmup 0 --out {}", base, d.file("c")));
  REQUIRE(r.code == 0);
  j = read_json(d.file("c/result.json"));
  CHECK(j["stop"].get<std::string>().rfind("patience 1 (val:acc best ", 0) == 0);
  CHECK(j["steps"] == 100);
  // --patience-on judges another metric than the rule's (and is part of the run id).
  r = run_pathbench(fmt::format("{} --stop-at 'val:acc>=2' --patience 1 --patience-on val:loss --lr 1e-12 --warmup 0 --out {}",
                                base, d.file("d")));
  REQUIRE(r.code == 0);
  j = read_json(d.file("d/result.json"));
  CHECK(j["stop"].get<std::string>().rfind("patience 1 (val:loss best ", 0) == 0);
  CHECK(read_json(d.file("d/config.json"))["run_id"] != read_json(d.file("c/config.json"))["run_id"]);

  for (const char* bad : {"--stop-at 'val:acc>0.9' --eval-every 10", "--stop-at 'val:f1>=0.9' --eval-every 10",
                          "--stop-at 'nosplit:acc>=0.9' --eval-every 10", "--stop-at 'val:acc>=x' --eval-every 10",
                          "--stop-at 'val:acc>=0.9'", "--patience 3", "--patience -1 --eval-every 10",
                          "--eval-batch -1", "--eval-every-n -2", "--patience-on val:loss --eval-every 10",
                          "--patience 2 --patience-on val:f1 --eval-every 10", "--patience 2 --patience-on nosplit:loss --eval-every 10"}) {
    const auto e = run_pathbench(fmt::format("train --task flipflop:len=8 --device cpu {} --out {}", bad, d.file("x")));
    INFO(bad << ": " << e.err);
    CHECK(e.code == 2);
    CHECK_THAT(e.err, Contains("pathbench: error: "));
  }
}

TEST_CASE("evaluation: the same numbers at any evaluation batch", "[pack][train]") {
  pb::TrainConfig c;
  c.task = "flipflop:len=16", c.pe = "path", c.d_model = 16, c.heads = 2, c.eval_n = 100, c.threads = 1;
  pb::resolve(c);
  const auto task = pb::make_task(c.task);
  pb::Transformer<pb::Cpu32> model(pb::model_config(c, *task), 3);
  const auto a = pb::evaluate(model, *task, 1, 100, 7), b = pb::evaluate(model, *task, 1, 100, 64);
  CHECK(a.acc == b.acc);
  CHECK(a.seq_acc == b.seq_acc);
  CHECK(a.n == b.n);
  CHECK(a.loss == Approx(b.loss).epsilon(1e-5));
  // auto: at least the training batch, at most what is evaluated, bounded by memory
  c.batch = 8;
  CHECK(pb::eval_batch_size(c, *task) == 100);
  c.eval_batch = 5;
  CHECK(pb::eval_batch_size(c, *task) == 5);
  // MQRAR with 8K values: the logits bound it to a few sequences, so the training batch is used.
  c.eval_batch = 0, c.task = "mqrar:n_values=8160,len=768", c.d_model = 256, c.batch = 64;
  pb::resolve(c);
  const auto mq = pb::make_task(c.task);
  CHECK(4.0 * double(pb::floats_per_token(pb::model_config(c, *mq))) * mq->seq_len() * 64 > pb::kEvalBatchBytes);
  CHECK(pb::eval_batch_size(c, *mq) == 64);
}

TEST_CASE("sweep: depth_search skips deeper runs once a shallower one met the rule", "[pack][sweep]") {
  const TempDir d("depth");
  std::string text = kSweep;
  text.replace(text.find("[grid]"), 6, "[grid]\nlayers = [1, 2, 3]");
  text.replace(text.find("seeds = [0, 1]"), 14, "seeds = [0]\ndepth_search = \"val:acc>=0\"");
  const std::string f = sweep_file(d, text);
  auto r = run_pathbench(fmt::format("sweep {} --out {} --pack 1", f, d.path.string()));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.err, Contains("4 skipped by the depth search"));
  CHECK(results(d.path, "pk").size() == 2);  // layers = 1 of rope and path
  r = run_pathbench(fmt::format("sweep {} --out {} --dry-run", f, d.path.string()));
  size_t skipped = 0;
  for (size_t at = 0; (at = r.out.find("\tskipped\t", at)) != std::string::npos; ++at) ++skipped;
  CHECK(skipped == 4);
  // A rule no run meets skips nothing.
  text.replace(text.find("val:acc>=0"), 10, "val:acc>=2");
  const std::string g = sweep_file(d, text);
  r = run_pathbench(fmt::format("sweep {} --out {} --dry-run", g, d.file("none")));
  CHECK(r.out.find("skipped") == std::string::npos);
  // Runs go seed by seed, shallow before deep; with [sweep] outer, by its values first.
  auto order = [&](const std::string& sweep) {
    std::vector<std::string> labels;
    std::istringstream lines(run_pathbench(fmt::format("sweep {} --out {} --dry-run", sweep_file(d, sweep), d.file("order"))).out);
    for (std::string line; std::getline(lines, line);) labels.push_back(line.substr(line.rfind('\t') + 1));
    return fmt::format("{}", fmt::join(labels, ", "));
  };
  text.replace(text.find("seeds = [0]"), 11, "seeds = [0, 1]");
  CHECK(order(text) ==
        "seed=0 layers=1 pe=rope, seed=0 layers=1 pe=path, seed=0 layers=2 pe=rope, seed=0 layers=2 pe=path, "
        "seed=0 layers=3 pe=rope, seed=0 layers=3 pe=path, seed=1 layers=1 pe=rope, seed=1 layers=1 pe=path, "
        "seed=1 layers=2 pe=rope, seed=1 layers=2 pe=path, seed=1 layers=3 pe=rope, seed=1 layers=3 pe=path");
  std::string outer = text;
  outer.replace(outer.find("seeds = [0, 1]"), 14, "seeds = [0, 1]\nouter = \"pe\"");
  CHECK(order(outer) ==
        "pe=rope seed=0 layers=1, pe=rope seed=0 layers=2, pe=rope seed=0 layers=3, pe=rope seed=1 layers=1, "
        "pe=rope seed=1 layers=2, pe=rope seed=1 layers=3, pe=path seed=0 layers=1, pe=path seed=0 layers=2, "
        "pe=path seed=0 layers=3, pe=path seed=1 layers=1, pe=path seed=1 layers=2, pe=path seed=1 layers=3");
  text.replace(text.find("layers = [1, 2, 3]"), 18, "");
  CHECK(run_pathbench(fmt::format("sweep {} --dry-run", sweep_file(d, text))).code == 2);  // needs layers
}

TEST_CASE("sweep: --only runs the chosen runs and leaves the others pending", "[pack][sweep]") {
  const TempDir d("only");
  const std::string f = sweep_file(d, kSweep);  // seeds 0, 1 x pe rope, path
  auto r = run_pathbench(fmt::format("sweep {} --out {} --pack 1 --only pe=path --only seed=1", f, d.path.string()));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.err, Contains("1 runs with pe=path seed=1: 0 done, 0 failed, 1 to run"));
  CHECK(results(d.path, "pk").size() == 1);
  r = run_pathbench(fmt::format("sweep {} --out {} --dry-run", f, d.path.string()));
  CHECK_THAT(r.out, Contains("\tdone\tseed=1 pe=path"));
  CHECK_THAT(r.err, Contains("4 runs: 1 done, 0 failed, 3 to run"));
  // --shard splits what --only keeps; a value no run has is refused.
  r = run_pathbench(fmt::format("sweep {} --out {} --dry-run --only pe=rope --shard 1/2", f, d.path.string()));
  CHECK(r.out.find("\tpending\tseed=1 pe=rope\n") != std::string::npos);
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
  r = run_pathbench(fmt::format("sweep {} --out {} --only pe=nope", f, d.path.string()));
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Contains("--only 'pe=nope': no run of the sweep has pe=nope"));
}

TEST_CASE("sweep: with depth_search a deeper run waits for the shallower runs of its configuration", "[pack][sweep]") {
  const TempDir d("depth_wait");
  std::string text = kSweep;
  text.replace(text.find("[grid]"), 6, "[grid]\nlayers = [1, 2, 3]");
  text.replace(text.find("seeds = [0, 1]"), 14, "seeds = [0]\ndepth_search = \"val:acc>=0\"");
  const std::string f = sweep_file(d, text);
  // Three slots and two configurations: a slot never starts layers = 2 while layers = 1 runs, so
  // every deeper run is decided from a finished shallower one, at any pack size and either engine.
  for (const std::string engine : {"--pack 3", "--jobs 3"}) {
    const auto out = d.file(engine.substr(2, 4));
    const auto r = run_pathbench(fmt::format("sweep {} --out {} {}", f, out, engine));
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.err, Contains("4 skipped by the depth search"));
    CHECK(results(out, "pk").size() == 2);
  }
}

TEST_CASE("sweep --drain-after: no run starts after the deadline, a rerun finishes the sweep", "[pack][sweep]") {
  const TempDir d("drain");
  const std::string f = sweep_file(d, kSweep);
  for (const std::string engine : {"--pack 1", "--jobs 1"}) {
    const auto out = d.file(engine.substr(2, 4));
    auto r = run_pathbench(fmt::format("sweep {} --out {} {} --drain-after 1e-9", f, out, engine));
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK_THAT(r.err, Contains("0 of 4 runs done, 0 failed; drained: 4 runs not started"));
    r = run_pathbench(fmt::format("sweep {} --out {} {} --drain-after 3600", f, out, engine));
    REQUIRE(r.code == 0);
    CHECK_THAT(r.err, Contains("4 of 4 runs done, 0 failed\n"));
    CHECK(results(out, "pk").size() == 4);
  }
}

TEST_CASE("sweep --estimate: a row per shape and the projected total, nothing run", "[pack][sweep]") {
  const TempDir d("estimate");
  const std::string f = sweep_file(d, kSweep);
  const auto r = run_pathbench(fmt::format("sweep {} --out {} --pack 2 --estimate", f, d.path.string()));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("| flipflop:len=8,p_ignore=0.8 rope:base=10000 L1 d16 H2 mlp4 B4 fp32 cpu | 2 | 2 |"));
  CHECK_THAT(r.out, Contains(" path:w_rank=32,beta_clip=0,block=64 L1 d16 H2 mlp4 B4 fp32 cpu | 2 | 2 |"));
  CHECK_THAT(r.out, Contains("projected: "));
  CHECK_THAT(r.out, Contains("for 4 runs"));
  CHECK_FALSE(fs::exists(d.path / "pk"));
}

// Every line of a run's metrics.jsonl without its clocks, then its eval.jsonl: what a run computed.
std::string computed(const fs::path& run) {
  std::string out, line;
  std::istringstream metrics(pb::read_file((run / "metrics.jsonl").string()));
  while (std::getline(metrics, line)) {
    auto j = nlohmann::json::parse(line);
    j.erase("tokens_per_s"), j.erase("elapsed_s");
    out += j.dump() + "\n";
  }
  return out + pb::read_file((run / "eval.jsonl").string());
}

TEST_CASE("sweep --stack: runs stacked in groups equal the same runs packed, bit for bit", "[pack][stacked]") {
  // Two shapes that stack (rope, path) and one that does not (kerple: trained alone), runs of two
  // lengths, so slots free up and are taken by later runs, and periodic evaluations, during which
  // a run is away from its group.
  const TempDir d("stack_eq");
  const std::string f = sweep_file(d, R"(
[sweep]
name = "st"
task = "flipflop:len=8"
seeds = [0, 1, 2]
[base]
d_model = 16
heads = 2
batch = 4
lr = 3e-3
warmup = 10
eval_every = 40
eval_every_n = 32
eval_n = 64
checkpoint_every = 30
device = "cpu"
[grid]
pe = ["rope", "path", "kerple"]
steps = [90, 130]
)");
  REQUIRE(run_pathbench(fmt::format("sweep {} --out {} --pack 3", f, d.file("pack"))).code == 0);
  const auto r = run_pathbench(fmt::format("sweep {} --out {} --pack 3 --stack 3", f, d.file("stack")));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto expected = results(d.file("pack"), "st");
  REQUIRE(expected.size() == 18);
  CHECK(results(d.file("stack"), "st") == expected);
  int runs = 0, shared = 0;  // runs, and runs in a slot other than 0: runs of a shape share groups
  for (const auto& e : fs::directory_iterator(fs::path(d.file("pack")) / "st"))
    if (e.is_directory()) {
      INFO(e.path().filename());
      const fs::path stacked = fs::path(d.file("stack")) / "st" / e.path().filename();
      CHECK(computed(stacked) == computed(e.path()));
      const bool kerple = pb::read_file((e.path() / "config.json").string()).find("kerple") != std::string::npos;
      const std::string log = pb::read_file((stacked / "log.txt").string());
      CHECK((log.find("stacked: slot") != std::string::npos) == !kerple);
      shared += log.find("stacked: slot 0") == std::string::npos && !kerple;
      ++runs;
    }
  CHECK(runs == 18);
  CHECK(shared >= 4);  // of 12 stacking runs in groups of 3, 8 in slots 1 and 2 when runs start together
  CHECK(run_pathbench(fmt::format("sweep {} --stack 2", f)).code == 2);  // needs --pack
  CHECK(run_pathbench(fmt::format("sweep {} --pack 2 --stack -1", f)).code == 2);
  CHECK(run_pathbench(fmt::format("sweep {} --pack 2 --stack 2 --estimate", f)).code == 2);  // projects packing
}

TEST_CASE("a slow runtime call is reported with its run and note, a fast one is not", "[pack]") {
  REQUIRE(pb::slow_call_threshold_s() == 1.0);  // PB_SLOW_CALL_S unset in the test environment
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  pb::set_slow_call_run("abc123");
  {
    const pb::SlowCall fast("a fast call", nullptr, out);
  }
  {
    const pb::SlowCall slow("waiting for the capture fence", "held alone for cudaMallocHost", out);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  }
  pb::set_slow_call_run("");
  std::rewind(out);
  char buf[512] = {};
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, out);
  std::fclose(out);
  const std::string text(buf, n);
  CHECK_THAT(text, !Contains("a fast call"));
  CHECK_THAT(text, Contains("pathbench: slow call: waiting for the capture fence took "));
  const size_t took = text.find(" took ");
  REQUIRE(took != std::string::npos);
  CHECK(std::atof(text.c_str() + took + 6) >= 1.1);
  CHECK_THAT(text, Contains(", run abc123 (at "));
  CHECK_THAT(text, Contains("; held alone for cudaMallocHost)"));
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);
}

TEST_CASE("a call still open past PB_STALL_TRACE_S has its thread's stack written, once", "[pack]") {
  REQUIRE(pb::stall_trace_s() == 60.0);  // PB_STALL_TRACE_S unset in the test environment
  std::FILE* out = std::tmpfile();
  REQUIRE(out);
  pb::stall_trace_s() = 0.2;
  std::thread stalled([out] {
    pb::set_slow_call_run("stalled1");
    {
      const pb::SlowCall fast("a short call", nullptr, out);
    }
    const pb::SlowCall slow("a stalled call", nullptr, out);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // sleep_for resumes after the signal
  });
  stalled.join();
  pb::stall_trace_s() = 60.0;
  std::rewind(out);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), out)) > 0;) text.append(buf, n);
  std::fclose(out);
  CHECK_THAT(text, !Contains("a short call"));
  const size_t head = text.find("pathbench: stalled call: a stalled call open for ");
  REQUIRE(head != std::string::npos);
  CHECK(text.find("pathbench: stalled call:", head + 1) == std::string::npos);  // once, though open 1.3 s longer
  CHECK_THAT(text, Contains(", run stalled1; the stack of its thread follows\n"));
  const size_t slow = text.find("pathbench: slow call: a stalled call took ");
  REQUIRE(slow != std::string::npos);
  // backtrace_symbols_fd's lines, between the two: "BINARY(SYMBOL+OFFSET) [ADDRESS]", this test's
  // binary among them
  const std::string stack = text.substr(head, slow - head);
  CHECK(std::count(stack.begin(), stack.end(), '\n') >= 4);
  CHECK_THAT(stack, Contains("test_pack("));
}

// Four threads take the mutex shared for 2 ms at a time, back to back, so some thread always holds
// it; a fifth takes it alone. How long the fifth waits, and whether readers shared it and never
// held it beside the writer.
template <class M>
double writer_wait_s(bool& shared_at_once, bool& beside_writer) {
  M m;
  std::atomic<int> readers{0}, most{0};
  std::atomic<bool> writing{false}, stop{false}, clash{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      while (!stop && std::chrono::steady_clock::now() < end) {
        const std::shared_lock<M> l(m);
        most = std::max(most.load(), ++readers);
        if (writing) clash = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        --readers;
      }
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto t0 = std::chrono::steady_clock::now();
  double waited;
  {
    const std::unique_lock<M> l(m);
    waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    writing = true;
    if (readers > 0) clash = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    writing = false;
  }
  stop = true;
  for (auto& t : threads) t.join();
  shared_at_once = most >= 2, beside_writer = clash;
  return waited;
}

TEST_CASE("the capture fence's mutex lets a thread that wants it alone in while others keep it shared", "[pack]") {
  bool shared = false, clash = true;
  const double waited = writer_wait_s<pb::WriterFirstMutex>(shared, clash);
  INFO("waited " << waited << " s");
  CHECK(waited < 0.5);  // a reader-first mutex waits for the readers to stop, 3 s
  CHECK(shared);
  CHECK_FALSE(clash);
}

TEST_CASE("sweep --pack sets up its process: kernels loaded at start, steps op by op, unless the environment says", "[pack]") {
  unsetenv("CUDA_MODULE_LOADING");
  unsetenv("PB_CUDA_GRAPHS");
  pb::prepare_packed_process();
  CHECK(std::string(std::getenv("CUDA_MODULE_LOADING")) == "EAGER");
  CHECK(std::string(std::getenv("PB_CUDA_GRAPHS")) == "0");
  setenv("CUDA_MODULE_LOADING", "LAZY", 1);
  setenv("PB_CUDA_GRAPHS", "1", 1);
  pb::prepare_packed_process();
  CHECK(std::string(std::getenv("CUDA_MODULE_LOADING")) == "LAZY");
  CHECK(std::string(std::getenv("PB_CUDA_GRAPHS")) == "1");
  unsetenv("CUDA_MODULE_LOADING");
  unsetenv("PB_CUDA_GRAPHS");
}
