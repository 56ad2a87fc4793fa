// Resumable training through the built binary: a `train` killed by SIGTERM after a checkpoint and
// continued with --resume ends bit-identical to an uninterrupted run (the model, the logs and
// result.json but their time fields), also with early stopping across the interruption; bad
// resumes are refused with one line; both sweep engines continue an interrupted run from its
// checkpoint, and restart one whose checkpoint is corrupted.
#include <catch2/catch.hpp>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "cli.h"
#include "core/io.h"
#include "runners/build_info.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using pb::test::run_pathbench;
using pb::test::RunResult;
using pb::test::TempDir;
using pb::test::check_error;

namespace {

// ~15 ms a step on one thread: the SIGTERM sent at the first checkpoint (step 10) lands long
// before the end. kRun adds the optimizer's options to kModel.
const std::string kModel =
    "train --task flipflop:len=64 --pe path --d-model 32 --heads 2 --batch 16 --eval-n 64 --device cpu --threads 1 "
    "--checkpoint-every 10";
const std::string kRun = kModel + " --steps 300 --lr 3e-3 --warmup 20";

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(pb::read_file(p.string())); }

// The lines of a .jsonl file without the fields that depend on the clock.
std::vector<nlohmann::json> rows(const fs::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    for (const char* k : {"elapsed_s", "tokens_per_s"}) j.erase(k);
    out.push_back(j);
  }
  return out;
}

bool wait_for_file(const fs::path& p, double seconds = 120) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!fs::exists(p)) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::duration<double>(seconds)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// `pathbench <args> --out DIR` stopped by SIGTERM once its first checkpoint exists.
void interrupt(const std::string& args, const fs::path& dir) {
  std::vector<std::string> argv;
  std::istringstream words(args);
  for (std::string w; words >> w;) argv.push_back(w);
  argv.insert(argv.end(), {"--out", dir.string()});
  pb::test::Child c = pb::test::spawn(argv, dir.string() + ".log");
  REQUIRE(wait_for_file(dir / "resume.safetensors"));
  ::kill(c.pid, SIGTERM);
  REQUIRE(pb::test::wait_exit(c) == 128 + SIGTERM);
  REQUIRE_FALSE(fs::exists(dir / "result.json"));
}

// The run in `got` equals the one in `want` but for the clock and the attempt id.
void check_same_run(const fs::path& got, const fs::path& want) {
  const bool same_model =
      pb::read_file((got / "model.safetensors").string()) == pb::read_file((want / "model.safetensors").string());
  CHECK(same_model);
  CHECK(rows(got / "metrics.jsonl") == rows(want / "metrics.jsonl"));
  CHECK(rows(got / "eval.jsonl") == rows(want / "eval.jsonl"));
  auto a = read_json(got / "result.json"), b = read_json(want / "result.json");
  for (auto* r : {&a, &b}) r->erase("wall_s"), r->erase("eval_s"), r->erase("attempt");
  CHECK(a == b);
  CHECK_FALSE(fs::exists(got / "resume.safetensors"));  // a finished run keeps model.safetensors alone
}

}  // namespace

TEST_CASE("resume: a run stopped after a checkpoint and resumed ends bit-identical", "[resume]") {
  const TempDir d("resume");
  const fs::path ref = d.path / "ref", run = d.path / "run";
  REQUIRE(run_pathbench(kRun + " --out " + ref.string()).code == 0);
  CHECK_FALSE(fs::exists(ref / "resume.safetensors"));
  interrupt(kRun, run);
  CHECK(rows(run / "metrics.jsonl").size() < rows(ref / "metrics.jsonl").size());

  // Refusals leave the run as it was.
  const std::string before = pb::read_file((run / "metrics.jsonl").string());
  check_error(run_pathbench(fmt::format("{} --steps 301 --lr 3e-3 --warmup 20 --out {} --resume", kModel, run.string())),
              "has another config: steps is 300 there, 301 here");
  check_error(run_pathbench(fmt::format("{} --out {} --resume", kRun, ref.string())), "holds a finished run");
  check_error(run_pathbench(fmt::format("{} --out {} --resume", kRun, (d.path / "none").string())), "is not a directory");
  CHECK_FALSE(fs::exists(d.path / "none"));
  check_error(run_pathbench(fmt::format("{} --out {} --resume --overwrite", kRun, run.string())), "excludes");
  const fs::path bare = d.path / "bare", bad = d.path / "bad", again = d.path / "again";
  fs::copy(run, bare), fs::copy(run, bad), fs::copy(run, again);
  // Without --resume an interrupted run starts again from step 0.
  REQUIRE(run_pathbench(fmt::format("{} --out {}", kRun, again.string())).code == 0);
  CHECK_FALSE(read_json(again / "meta.json").contains("resumed_from_step"));
  CHECK(read_json(again / "meta.json").value("sources", "") == pb::kSourcesDigest);  // the code it ran
  check_same_run(again, ref);
  fs::remove(bare / "resume.safetensors");
  check_error(run_pathbench(fmt::format("{} --out {} --resume", kRun, bare.string())), "has no checkpoint");
  {
    std::fstream f(bad / "resume.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
  }
  check_error(run_pathbench(fmt::format("{} --out {} --resume", kRun, bad.string())), "is corrupted");
  CHECK(pb::read_file((run / "metrics.jsonl").string()) == before);

  const RunResult r = run_pathbench(fmt::format("{} --out {} --resume", kRun, run.string()));
  REQUIRE(r.code == 0);
  const int from = read_json(run / "meta.json").value("resumed_from_step", 0);
  CHECK(from >= 10);
  CHECK_THAT(r.err, Contains(fmt::format("resumed from step {}", from)));
  check_same_run(run, ref);
}

// The early stopping's memory crosses the interruption: at a learning rate too small to change a
// prediction the accuracy never improves on the first evaluation's (step 10), and patience 8 ends
// the run at step 90, not 8 evaluations after the resume.
TEST_CASE("resume: early stopping continues across the interruption", "[resume]") {
  const TempDir d("resume_stop");
  const std::string args =
      kModel + " --steps 300 --lr 1e-12 --warmup 0 --eval-every 10 --eval-every-n 16 --patience 8 --patience-on val:acc";
  const fs::path ref = d.path / "ref", run = d.path / "run";
  REQUIRE(run_pathbench(args + " --out " + ref.string()).code == 0);
  REQUIRE(read_json(ref / "result.json")["stopped_at_step"] == 90);
  interrupt(args, run);
  REQUIRE(run_pathbench(fmt::format("{} --out {} --resume", args, run.string())).code == 0);
  CHECK(read_json(run / "meta.json").value("resumed_from_step", 0) >= 10);
  check_same_run(run, ref);
}

// Both engines: a sweep stopped by SIGTERM after a checkpoint continues its run from it when
// started again (its log says so) and ends with the uninterrupted sweep's results; a corrupted
// checkpoint is not used: the run starts again from step 0, with the same results.
TEST_CASE("resume: sweeps continue an interrupted run from its checkpoint", "[resume][sweep]") {
  const TempDir d("resume_sweep");
  const std::string file = d.file("r.toml");
  pb::write_file_atomic(file, R"([sweep]
name = "r"
task = "flipflop:len=64"
seeds = [0]
[base]
d_model = 32
heads = 2
steps = 120
batch = 16
lr = 3e-3
eval_n = 64
device = "cpu"
checkpoint_every = 10
[grid]
pe = ["path"]
)");
  const fs::path ref = d.path / "ref";
  REQUIRE(run_pathbench(fmt::format("sweep {} --out {}", file, ref.string())).code == 0);
  REQUIRE(fs::exists(ref / "r"));
  fs::path ref_run;
  for (const auto& e : fs::directory_iterator(ref / "r"))
    if (fs::is_directory(e)) ref_run = e.path();
  const std::string id = ref_run.filename().string();

  for (const std::string engine : {"--jobs", "--pack"}) {
    for (const bool corrupt : {false, true}) {
      INFO(engine << (corrupt ? ", corrupted checkpoint" : ""));
      const fs::path out = d.path / fmt::format("out{}{}", engine, corrupt);
      pb::test::Child c = pb::test::spawn({"sweep", file, "--out", out.string(), engine, "1"}, out.string() + ".log");
      REQUIRE(wait_for_file(out / "r" / id / "resume.safetensors"));
      ::kill(c.pid, SIGTERM);
      REQUIRE(pb::test::wait_exit(c) == 128 + SIGTERM);
      REQUIRE_FALSE(fs::exists(out / "r" / id / "result.json"));
      if (corrupt) {
        std::fstream f(out / "r" / id / "resume.safetensors", std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(-5, std::ios::end);
        f.put('\x7f');
      }
      const RunResult r = run_pathbench(fmt::format("sweep {} --out {} {} 1", file, out.string(), engine));
      REQUIRE(r.code == 0);
      const std::string log = pb::read_file((out / "r" / id / "log.txt").string());
      if (corrupt) {
        CHECK_THAT(r.err, Contains("restarting: ") && Contains("is corrupted"));
        CHECK_THAT(log, !Contains("resumed from step"));
        CHECK_FALSE(read_json(out / "r" / id / "meta.json").contains("resumed_from_step"));
      } else {
        const int from = read_json(out / "r" / id / "meta.json").value("resumed_from_step", 0);
        CHECK(from >= 10);
        CHECK_THAT(r.err, Contains(fmt::format("resuming: seed=0 ({}) from step {}", id, from)));
        CHECK_THAT(log, Contains(fmt::format("resumed from step {}", from)));
      }
      check_same_run(out / "r" / id, ref_run);
    }
  }
}

// With --init-from the resume checkpoint wins (docs/conversion.md): the resumed run continues from
// its own weights and moments, and ends as the uninterrupted run does; loading the source again
// at the resume would not.
TEST_CASE("resume: a run started --init-from resumes from its checkpoint, not from the source", "[resume]") {
  const TempDir d("resume_init");
  const fs::path src = d.path / "src", ref = d.path / "ref", run = d.path / "run";
  REQUIRE(run_pathbench(fmt::format("{} --steps 20 --out {}", kModel, src.string())).code == 0);
  const std::string args = fmt::format("{} --init-from {}", kRun, src.string());
  REQUIRE(run_pathbench(args + " --out " + ref.string()).code == 0);
  interrupt(args, run);
  REQUIRE(run_pathbench(fmt::format("{} --out {} --resume", args, run.string())).code == 0);
  CHECK(read_json(run / "meta.json").value("resumed_from_step", 0) >= 10);
  check_same_run(run, ref);
}
