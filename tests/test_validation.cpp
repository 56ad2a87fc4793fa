// What pathbench refuses so that no result carries a wrong label: values that cannot be right
// (one error line, exit 2, nothing written), sizes that cannot fit (refused before allocating, or
// the allocation failure turned into that line), eval specs other than the trained task, corrupt
// checkpoints, dataset files whose tokens lie outside the task, and run directories `collect`
// cannot read as runs.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include "core/xxhash.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "cli.h"
#include "core/error.h"
#include "core/io.h"
#include "core/safetensors.h"
#include "tasks/dataset_file.h"

namespace {

namespace fs = std::filesystem;

using pb::test::RunResult;
using pb::test::check_refused;
using pb::test::TempDir;
using pb::test::run_pathbench;

// A tiny CPU run: a few steps, enough for a checkpoint and eval rows.
const char* const kTiny = "--layers 1 --d-model 8 --heads 2 --steps 3 --batch 2 --eval-n 4 --device cpu --threads 1";

// Trains the tiny run of `task` into `dir`.
void train_tiny(const std::string& task, const std::string& dir) {
  const RunResult r = run_pathbench(fmt::format("train --task {} {} --out '{}'", task, kTiny, dir));
  INFO(r.err);
  REQUIRE(r.code == 0);
}

size_t line_count(const std::string& path) {
  const std::string text = pb::read_file(path);
  return size_t(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

TEST_CASE("validation: train refuses values that cannot be right, before writing anything", "[validation]") {
  const std::string train = "train --task flipflop:len=8 --device cpu --steps 1 --out {dir}/run ";
  check_refused(train + "--lr 0", "--lr must be a finite number > 0, got 0");
  check_refused(train + "--lr=-1e-3", "--lr must be a finite number > 0");
  check_refused(train + "--lr inf", "--lr must be a finite number > 0, got inf");
  check_refused(train + "--lr nan", "--lr must be a finite number > 0");
  check_refused(train + "--weight-decay=-0.1", "--weight-decay must be a finite number >= 0");
  check_refused(train + "--weight-decay inf", "--weight-decay must be a finite number >= 0");
  check_refused(train + "--grad-clip nan", "--grad-clip must be a finite number >= 0");
  check_refused(train + "--grad-clip=-1", "--grad-clip must be a finite number >= 0");
  check_refused(train + "--warmup=-1", "--warmup must be >= 0");
  check_refused(train + "--mlp-ratio inf", "--mlp-ratio must be > 0");
  check_refused(train + "--seed 4294967296", "--seed must be in [0, 4294967295]");
  check_refused(train + "--seed=-1", "--seed");
  check_refused(train + "--threads 100000", "--threads must be in [0, ");
  check_refused(train + "--d-model 10 --heads 3", "--d-model (10) must be a positive multiple of --heads (3)");
  check_refused(train + "--d-model 2 --heads 4", "--d-model (2) must be a positive multiple of --heads (4)");
  check_refused(train + "--d-model 4194304", "--d-model must be <= 1048576");
  check_refused(train + "--layers 100000", "--layers must be in [1, 4096]");
  check_refused(train + "--eval-n 2000000000", "--eval-n must be in [1, ");
}

TEST_CASE("validation: every encoding parameter and the layer shape are checked up front", "[validation]") {
  const std::string train = "train --task flipflop:len=8 --device cpu --steps 1 --out {dir}/run --pe ";
  check_refused(train + "rope:base=0", "rope: base must be > 0");
  check_refused(train + "rope:base=-10000", "rope: base must be > 0");
  check_refused(train + "rope --d-model 6 --heads 2", "rope needs an even head dim (d_model / heads), got 3");
  for (const std::string pe : {"path", "path_fox"}) {
    check_refused(train + pe + ":beta_clip=2", pe + ": beta_clip must be in [0, 2)");
    check_refused(train + pe + ":beta_clip=-0.5", pe + ": beta_clip must be in [0, 2)");
    check_refused(train + pe + ":w_rank=0", pe + ": w_rank must be in [1, 65536], got 0");
    check_refused(train + pe + ":w_rank=4294967297", pe + ": w_rank must be in [1, 65536]");
    check_refused(train + pe + ":block=0", pe + ": block must be in [1, 1048576], got 0");
    check_refused(train + pe + ":block=4294967296", pe + ": block must be in [1, 1048576]");
  }
}

TEST_CASE("validation: task specs whose evaluation scores nothing are refused", "[validation]") {
  const std::string train = "train --device cpu --steps 1 --out {dir}/run --task ";
  check_refused(train + "mqrar:len=4,n_back=2", "n_back=2 scores nothing with len=4");
  check_refused(train + "mqrar:len=8,n_back=4", "len must be >= 10");
  check_refused(train + "mqrar:n_keys=1048576,n_back=1024,len=4096", "n_keys × n_back");
  check_refused(train + "wordproblem:len=0", "key 'len' must be an integer in [1, ");
  check_refused(train + "flipflop:len=2", "key 'len' must be an even integer in [4, ");
  check_refused("gen --task mqrar:len=4,n_back=2 --n 1 --out {dir}/d.bin", "n_back=2 scores nothing");
}

TEST_CASE("validation: sizes that cannot fit are refused before allocating", "[validation]") {
  const std::string train = "train --task flipflop:len=8 --device cpu --steps 1 --out {dir}/run ";
  // About 16 · 64 · 16 · 65536² bytes of parameters: refused by the estimate, nothing allocated.
  check_refused(train + "--d-model 65536 --heads 2 --layers 64", "GiB, more than this machine's memory (");
  check_refused(train + "--d-model 65536 --heads 2 --layers 64", "reduce --batch, --eval-batch, --d-model");
  check_refused("train --task flipflop:len=1048576 --device cpu --batch 4096 --out {dir}/run",
                "tokens per forward pass");
}

TEST_CASE("validation: host memory exhausted while allocating is one error line, exit 2", "[validation]") {
  // Within the machine's memory by the estimate (about 2 GiB), but the address space is capped at
  // 1 GB: the parameters' allocation fails and says what to reduce.
  TempDir dir("oom");
  const std::string err = dir.file("stderr.txt");
  const int status = std::system(
      fmt::format("ulimit -v 1000000; '{}' train --task flipflop:len=8 --device cpu --threads 1 --steps 1 "
                  "--d-model 1024 --heads 2 --layers 8 --out '{}' 2>'{}'",
                  PATHBENCH_EXE, dir.file("run"), err)
          .c_str());
  const std::string text = pb::read_file(err);
  INFO(text);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(text.rfind("pathbench: error: out of host memory", 0) == 0);
  CHECK(text.find("reduce --d-model") != std::string::npos);
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);
}

TEST_CASE("validation: eval applies --task or refuses it, nothing mislabelled reaches eval.jsonl", "[validation]") {
  TempDir dir("eval");
  const std::string ff = dir.file("ff"), mq = dir.file("mq");
  train_tiny("flipflop:len=8", ff);
  train_tiny("mqrar:n_keys=4,n_values=8,len=8", mq);
  const size_t ff_rows = line_count(ff + "/eval.jsonl"), mq_rows = line_count(mq + "/eval.jsonl");
  auto refused = [](const std::string& args, const std::string& needle) {
    const RunResult r = run_pathbench("eval --device cpu " + args);
    INFO(args << "\n" << r.err);
    CHECK(r.code == 2);
    CHECK(r.err.find(needle) != std::string::npos);
    CHECK(r.out.empty());
  };
  // flip-flop's p_ignore is the train split's: the evaluation splits would ignore it.
  refused(fmt::format("--run '{}' --task flipflop:len=8,p_ignore=0.5", ff), "key 'p_ignore' = 0.5 differs from the run's 0.8");
  refused(fmt::format("--run '{}' --task mqrar:len=8", ff), "is not the run's task 'flipflop:len=8,p_ignore=0.8'");
  // Same vocabulary (12 tokens), another task.
  refused(fmt::format("--run '{}' --task mqrar:n_keys=5,n_values=7,len=8", mq), "key 'n_keys' = 5 differs");
  refused(fmt::format("--run '{}' --task mqrar:n_keys=4,n_values=8,len=8,n_back=2", mq), "key 'n_back' = 2");
  refused(fmt::format("--run '{}' --n=-1", mq), "--n must be in [1, ");
  CHECK(line_count(ff + "/eval.jsonl") == ff_rows);
  CHECK(line_count(mq + "/eval.jsonl") == mq_rows);
  // Another len is applied and labelled.
  const RunResult ok = run_pathbench(fmt::format("eval --device cpu --run '{}' --task flipflop:len=16 --n 4", ff));
  INFO(ok.err);
  REQUIRE(ok.code == 0);
  CHECK(ok.out.find(R"("task":"flipflop:len=16,p_ignore=0.8")") != std::string::npos);
  CHECK(ok.out.find(R"("len":16)") != std::string::npos);
  CHECK(line_count(ff + "/eval.jsonl") == ff_rows + 3);
}

TEST_CASE("validation: checkpoints carry an xxh3_64 of their data, checked on load", "[validation]") {
  TempDir dir("ckpt");
  const std::string run = dir.file("run"), model = run + "/model.safetensors";
  train_tiny("flipflop:len=8", run);
  const std::string good = pb::read_file(model);
  uint64_t header_len = 0;
  std::memcpy(&header_len, good.data(), 8);
  const std::string header = good.substr(8, header_len);
  CHECK(header.find(fmt::format(R"("xxh3_64":"{:016x}")", XXH3_64bits(good.data() + 8 + header_len,
                                                                      good.size() - 8 - header_len))) !=
        std::string::npos);
  const size_t rows = line_count(run + "/eval.jsonl");

  std::string bad = good;
  bad[bad.size() - 3] ^= 0x10;  // one bit of the last tensor
  pb::write_file_atomic(model, bad);
  CHECK_THROWS_WITH(pb::read_safetensors(model), Catch::Contains("is corrupted") && Catch::Contains("xxh3_64"));
  const RunResult r = run_pathbench(fmt::format("eval --device cpu --run '{}'", run));
  CHECK(r.code == 2);
  CHECK(r.err == fmt::format("pathbench: error: '{}' is corrupted: the checksum of its tensor data (xxh3_64 {:016x}) "
                             "does not match the stored \"{:016x}\"\n",
                             model, XXH3_64bits(bad.data() + 8 + header_len, bad.size() - 8 - header_len),
                             XXH3_64bits(good.data() + 8 + header_len, good.size() - 8 - header_len)));
  CHECK(line_count(run + "/eval.jsonl") == rows);

  // A file without the key (written before it existed, or by another tool) loads unchecked.
  std::string unchecked = bad;
  const size_t key = unchecked.find("\"xxh3_64\"");
  REQUIRE(key < 8 + header_len);
  unchecked.replace(key, 9, "\"xxh3_xx\"");
  pb::write_file_atomic(model, unchecked);
  CHECK_NOTHROW(pb::read_safetensors(model));
  CHECK(run_pathbench(fmt::format("eval --device cpu --run '{}'", run)).code == 0);
}

TEST_CASE("validation: a dataset file with a valid checksum but tokens outside the task is refused", "[validation]") {
  TempDir dir("data");
  const std::string good_path = dir.file("good.bin"), bad_path = dir.file("bad.bin");
  REQUIRE(run_pathbench(fmt::format("gen --task flipflop:len=8 --n 4 --out '{}'", good_path)).code == 0);
  const std::string good = pb::read_file(good_path);
  // Header fields (tasks/README.md "Binary file layout"): header_bytes at 12, payload_xxh3 at 48,
  // header_xxh3 at 56 (of the header with that field zeroed). Records: input | target | scored.
  uint32_t header_bytes = 0;
  std::memcpy(&header_bytes, good.data() + 12, 4);
  const size_t T = 8;
  auto forge = [&](size_t offset, uint8_t value) {
    std::string f = good;
    f[header_bytes + offset] = char(value);
    const uint64_t payload = XXH3_64bits(f.data() + header_bytes, f.size() - header_bytes), zero = 0;
    std::memcpy(f.data() + 48, &payload, 8);
    std::memcpy(f.data() + 56, &zero, 8);
    const uint64_t head = XXH3_64bits(f.data(), header_bytes);
    std::memcpy(f.data() + 56, &head, 8);
    pb::write_file_atomic(bad_path, f);
  };
  const auto outside = Catch::Contains("holds data outside its task 'flipflop:len=8,p_ignore=0.8'");
  forge(T + 1, 3);  // record 0, target 1: a valid token
  CHECK_NOTHROW(pb::DatasetReader(bad_path));
  forge(2, 5);  // record 0, input 2: token 5 of a 5-token vocabulary
  CHECK_THROWS_WITH(pb::DatasetReader(bad_path), outside && Catch::Contains("input token 5 (record 0, position 2)"));
  check_refused(fmt::format("train --task flipflop:len=8 --device cpu --steps 1 --data '{}' --out {{dir}}/run", bad_path),
                "input token 5");
  forge(T + 3, 200);  // record 0, target 3
  CHECK_THROWS_WITH(pb::DatasetReader(bad_path), outside && Catch::Contains("target 200 (record 0, position 3)"));
  forge(2 * T + 7, 1);  // record 0, scored at the last position, which has no target
  CHECK_THROWS_WITH(pb::DatasetReader(bad_path), Catch::Contains("scored flag 1 (record 0, position 7)"));
}

TEST_CASE("validation: collect checks what it reads and names the file", "[validation]") {
  TempDir dir("collect");
  const fs::path runs = dir.path / "runs";
  const std::string good = (runs / "good").string();
  train_tiny("flipflop:len=8", good);
  const std::string out = "-o '" + dir.file("out") + "'";
  auto run_dir = [&](const std::string& name, const std::string& result, bool with_config) {
    const fs::path d = runs / name;
    fs::create_directories(d);
    pb::write_file_atomic((d / "result.json").string(), result);
    if (with_config) fs::copy_file(good + "/config.json", d / "config.json", fs::copy_options::overwrite_existing);
    return d;
  };
  auto refused = [&](const std::string& needle) {
    const RunResult r = run_pathbench(fmt::format("collect '{}' {}", runs.string(), out));
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.err.find(needle) != std::string::npos);
  };
  const fs::path bad = run_dir("bad", "[1, 2]", true);
  refused((bad / "result.json").string() + ": not a run result: expected a JSON object");
  run_dir("bad", R"({"final_loss": 0.5})", true);
  refused((bad / "result.json").string() + ": not a run result: no \"status\" string");
  run_dir("bad", R"({"status": "ok", "final_loss": "low"})", true);
  refused((bad / "result.json").string() + ": \"final_loss\" must be a number, got \"low\"");
  run_dir("bad", R"({"status": "ok", "eval": {"val": {"acc": [1]}}})", true);
  refused("(eval.val): \"acc\" must be a number");
  fs::remove_all(bad);
  run_dir("bad", R"({"status": "ok", "final_loss": 0.5})", false);
  refused((bad / "config.json").string() + ": missing");
  pb::write_file_atomic((bad / "config.json").string(), R"({"task": "flipflop"})");
  refused((bad / "config.json").string() + ": not a run config: no \"pe\" spec string");
  pb::write_file_atomic((bad / "config.json").string(), R"({"task": "flipflop", "pe": "rope", "lr": "fast"})");
  refused((bad / "config.json").string() + ": \"lr\" must be a number");
  fs::remove_all(bad);

  // An eval.jsonl row of another task (or a malformed one) never reaches evals.csv.
  const std::string evals = good + "/eval.jsonl", rows = pb::read_file(evals);
  pb::write_file_atomic(evals, rows + R"({"split":"val","step":3,"acc":0.5,"n":4,"task":"flipflop:len=8,p_ignore=0.5"})" "\n");
  refused(fmt::format("{}:{}: task 'flipflop:len=8,p_ignore=0.5': key 'p_ignore'", evals, line_count(evals)));
  pb::write_file_atomic(evals, rows + R"({"split":"val","step":3,"acc":"high","n":4})" "\n");
  refused(fmt::format("{}:{}: \"acc\" must be a number", evals, line_count(evals)));
  pb::write_file_atomic(evals, rows);

  // A failed run that never wrote config.json keeps its row (status and error), the others too.
  run_dir("failed", R"({"status": "failed", "error": "boom"})", false);
  const RunResult r = run_pathbench(fmt::format("collect '{}' {}", runs.string(), out));
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.err.find("collect: 2 runs") != std::string::npos);
}
