// CLI-level tests: run the built `pathbench` binary (PATHBENCH_EXE) and check exit codes, the
// one-line "pathbench: error:" contract, that bad input leaves no output file, that `gen`
// output is identical for any thread count and readable by the dataset reader, what `list` and
// `--help` show; and the progress line's formatting.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "cli.h"
#include "core/device.h"
#include "core/io.h"
#include "runners/progress.h"
#include "tasks/dataset_file.h"

namespace {

namespace fs = std::filesystem;

using pb::test::RunResult;
using pb::test::check_refused;
using pb::test::TempDir;
using pb::test::run_pathbench;

}  // namespace

TEST_CASE("cli gen: bad input is one error line, exit 2, no output file", "[cli]") {
  const std::string tail = "--out {dir}/d.bin";
  check_refused("gen --task nosuch --n 3 " + tail, "unknown task 'nosuch'; valid: flipflop, wordproblem, mqrar");
  check_refused("gen --task flipflop:foo=1 --n 3 " + tail, "unknown key 'foo' for task 'flipflop'; valid keys: len, p_ignore");
  check_refused("gen --task flipflop --split test --n 3 " + tail, "unknown split 'test'");
  check_refused("gen --task flipflop --n abc " + tail, "--n needs a positive integer, got 'abc'");
  check_refused("gen --task flipflop --n 0 " + tail, "--n needs a positive integer");
  check_refused("gen --task flipflop --n=-5 " + tail, "--n needs a positive integer, got '-5'");
  check_refused("gen --task flipflop --n 3 --seed x " + tail, "--seed needs an integer >= 0, got 'x'");
  check_refused("gen --task flipflop:len=-3 --n 3 " + tail, "key 'len' must be an even integer in [4, 1048576], got -3");
  check_refused("gen --task flipflop:len=7 --n 3 " + tail, "key 'len' must be an even integer");
  check_refused("gen --task flipflop:len=abc --n 3 " + tail, "key 'len' needs an integer, got 'abc'");
  check_refused("gen --task wordproblem:group=a6 --n 3 " + tail, "must be one of a5, s5, a4xz5, z60");
  check_refused("gen --task flipflop --n 3 --format xml " + tail, "--format");
  check_refused("gen --task flipflop --n 3 --out {dir}/missing/d.bin", "does not exist");
  check_refused("gen --task flipflop --n 3 --format jsonl --out {dir}/missing/d.jsonl", "does not exist");
  check_refused("gen --task flipflop --n 3", "--out is required");
}

TEST_CASE("cli train: --precision takes fp32, tf32 or bf16, and not on the CPU engine", "[cli]") {
  for (const std::string cmd : {"train --task flipflop --out {dir}/run", "bench train --task flipflop"}) {
    check_refused(cmd + " --precision f16", "--precision must be fp32, tf32 or bf16, got 'f16'");
    check_refused(cmd + " --precision bf16 --device cpu", "--precision bf16 needs the CUDA engine");
    check_refused(cmd + " --precision tf32 --device cpu", "--precision tf32 needs the CUDA engine");
  }
  // bf16 attention kernels: head dims 32, 64, 128 (sba stays fp32, so any head dim is fine there).
  check_refused("train --task flipflop --d-model 32 --heads 2 --precision bf16 --out {dir}/run",
              "head dim (d_model / heads) of 32, 64 or 128, got 16");
}

TEST_CASE("cli gen: bin output is thread-count invariant and readable, jsonl has meta", "[cli]") {
  TempDir dir("ok");
  const std::string task = "mqrar:n_keys=8,n_values=300,len=50,n_back=2";
  const RunResult r1 = run_pathbench(fmt::format("gen --task {} --n 500 --seed 4 --threads 1 --out {}", task, dir.file("a.bin")));
  INFO(r1.err);
  REQUIRE(r1.code == 0);
  CHECK(r1.out.empty());  // the summary is human output, on stderr
  REQUIRE(run_pathbench(fmt::format("gen --task {} --n 500 --seed 4 --threads 2 --out {}", task, dir.file("b.bin"))).code == 0);
  CHECK(pb::read_file(dir.file("a.bin")) == pb::read_file(dir.file("b.bin")));
  const pb::DatasetReader reader(dir.file("a.bin"));
  CHECK(reader.n() == 500);
  CHECK(reader.spec() == task);
  CHECK(reader.split() == "train");
  CHECK(reader.seed() == 4);

  REQUIRE(run_pathbench(fmt::format("gen --task flipflop:len=8 --split val_dense --n 4 --format jsonl --out {}",
                               dir.file("c.jsonl"))).code == 0);
  const auto meta = nlohmann::json::parse(pb::read_file(dir.file("c.jsonl.meta.json")));
  CHECK(meta.at("task") == "flipflop:len=8,p_ignore=0.8");
  CHECK(meta.at("split") == "val_dense");
  CHECK(meta.at("seed") == pb::kEvalSeed);  // eval splits default to the fixed evaluation seed
  CHECK(meta.at("vocab") == nlohmann::json({"w", "r", "i", "0", "1"}));
  const std::string lines = pb::read_file(dir.file("c.jsonl"));
  CHECK(std::count(lines.begin(), lines.end(), '\n') == 4);
  for (const auto& entry : fs::directory_iterator(dir.path))
    CHECK(entry.path().string().find(".tmp.") == std::string::npos);
}

TEST_CASE("cli bench gen: prints tokens_per_s", "[cli]") {
  TempDir dir("bench");
  const RunResult r = run_pathbench("bench gen --task flipflop:len=64 --n 2000");
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("target=memory") != std::string::npos);
  CHECK(r.out.find("tokens_per_s=") != std::string::npos);
}

TEST_CASE("cli bench attention: bad arguments name the option, no GPU is one clear error", "[cli]") {
  const std::string shape = " --batch 1 --seq-len 64 --heads 2 --head-dim 64";
  check_refused("bench attention --pe path --dtype f16" + shape, "--dtype must be bf16 or f32, got 'f16'");
  check_refused("bench attention --pe sba --dtype bf16" + shape, "encoding 'sba' has no bf16 kernel");
  check_refused("bench attention --pe nosuch" + shape, "unknown position encoding 'nosuch'");
  check_refused("bench attention --pe path --batch 0 --seq-len 64 --heads 2 --head-dim 64", "--batch needs a positive integer, got 0");
  check_refused("bench attention --pe fox --batch 1 --seq-len 0 --heads 2 --head-dim 64", "--seq-len needs a positive integer, got 0");
  check_refused("bench attention --pe path --batch 1 --seq-len 64 --heads 2 --head-dim 48", "--head-dim 48");
  check_refused("bench attention --pe path --dtype f32 --batch 1 --seq-len 64 --heads 2 --head-dim 256", "--head-dim 256");
  check_refused("bench attention --pe path --iters 0" + shape, "--iters needs a positive integer, got 0");
  check_refused("bench attention --pe path --rotate 0" + shape, "--rotate needs a positive integer, got 0");
  check_refused("bench attention --pe path --batch 1 --seq-len 64 --heads 2", "--head-dim is required");

  const std::string ok = "bench attention --pe path_fox --backward --warmup 1 --iters 2 --rotate 2" + shape;
  if (pb::cuda_device_count() == 0) {  // CPU-only build or machine: one line naming the missing piece
    check_refused(ok, pb::cuda_built() ? "no CUDA device is visible" : "this build has no CUDA engine");
    check_refused(ok + " --dtype f32", "CUDA");
    return;
  }
  for (const std::string dtype : {"f32", "bf16"}) {
    const RunResult r = run_pathbench(ok + " --dtype " + dtype);
    INFO(dtype << ": " << r.err);
    CHECK(r.code == 0);
    CHECK(r.out.rfind("bench attention gpu=\"", 0) == 0);
    CHECK(r.out.find(" pe=path_fox dtype=" + dtype + " batch=1 seq_len=64 heads=2 head_dim=64 pass=fwd_bwd ms=") !=
          std::string::npos);
    CHECK(r.out.find(" tflops=") != std::string::npos);
    CHECK(r.out.find(" peak_mem_mib=") != std::string::npos);
  }
}

TEST_CASE("cli: an unknown command is named, with the valid ones", "[cli]") {
  check_refused("nosuch", "unknown command 'nosuch'; valid: list, gen, train, convert, eval, generate, attention, bench, sweep, collect");
  check_refused("list --nosuch", "not expected: --nosuch");  // errors inside a command keep CLI11's message
}

TEST_CASE("cli list: each task names its splits", "[cli]") {
  const RunResult r = run_pathbench("list tasks");
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("splits: train, val, val_sparse, val_dense\n") != std::string::npos);
  // wordproblem and mqrar: val selects, test reports
  const std::string tested = "splits: train, val, test\n";
  const size_t first = r.out.find(tested);
  REQUIRE(first != std::string::npos);
  CHECK(r.out.find(tested, first + 1) != std::string::npos);
  CHECK(r.out.find("splits: train, val\n") == std::string::npos);
}

TEST_CASE("cli --help: options that take numbers, specs, files or directories say so", "[cli]") {
  const auto help = [](const std::string& cmd) {
    const RunResult r = run_pathbench(cmd + " --help");
    INFO(cmd << ": " << r.err);
    CHECK(r.code == 0);
    return r.out;
  };
  const std::string gen = help("gen"), train = help("train"), sweep = help("sweep");
  for (const std::string opt : {"--task SPEC", "--n INT", "--seed INT", "--threads INT", "--out FILE"})
    CHECK(gen.find(opt) != std::string::npos);
  CHECK(gen.find("--n TEXT") == std::string::npos);
  for (const std::string opt : {"--task SPEC", "--pe SPEC", "--data FILE", "--out DIR", "--steps INT", "--lr FLOAT"})
    CHECK(train.find(opt) != std::string::npos);
  for (const std::string opt : {"file FILE", "--out DIR", "--shard I/N", "--pack K|auto"})
    CHECK(sweep.find(opt) != std::string::npos);
  CHECK(help("eval").find("--run DIR") != std::string::npos);
  CHECK(help("collect").find("-o,--out DIR") != std::string::npos);
  CHECK(help("table").find("csv FILE") != std::string::npos);
  CHECK(help("plot").find("-o,--out FILE") != std::string::npos);
}

TEST_CASE("progress line: fits 80 columns, keeps both ends of a long label", "[cli]") {
  const std::string label = "mqrar:n_keys=32,n_values=8160,len=768,n_back=3 path_fox:beta_clip=0.001";
  for (const double loss : {0.0123, 12.3456})
    for (const double eta : {3.0, 7200.0, 360000.0}) {
      const std::string line = pb::progress_line(label, 2500, 10000, loss, eta > 5000 ? 0.98765 : NAN, 61, eta);
      INFO(line);
      CHECK(line.size() <= 80);
      CHECK(line.rfind("mqrar:", 0) == 0);
      CHECK(line.find("...") != std::string::npos);
      CHECK(line.find("0.001 [##--------]  25% loss ") != std::string::npos);
      CHECK(line.find(" 1:01 ETA ") != std::string::npos);
      CHECK((line.find(" acc 0.988 1:01") != std::string::npos) == (eta > 5000));
    }
  CHECK(pb::progress_line("flipflop rope", 10, 10, 0.5, NAN, 3725, 0) ==
        "flipflop rope [##########] 100% loss 0.5000 1:02:05 ETA 0:00");
  CHECK(pb::progress_line("flipflop rope", 10, 10, 0.5, 1.0, 3725, 0) ==
        "flipflop rope [##########] 100% loss 0.5000 acc 1.000 1:02:05 ETA 0:00");
  CHECK(pb::format_duration(59.6) == "1:00");
  CHECK(pb::shorten_middle("abcdefghij", 7) == "ab...ij");
}
