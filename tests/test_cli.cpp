// CLI-level tests: run the built `pathbench` binary (PATHBENCH_EXE) and check exit codes, the
// one-line "pathbench: error:" contract, that bad input leaves no output file, and that `gen`
// output is identical for any thread count and readable by the dataset reader.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "cli.h"
#include "kernels/io.h"
#include "tasks/dataset_file.h"

namespace {

namespace fs = std::filesystem;

using pb::test::RunResult;
using pb::test::TempDir;
using pb::test::run_pathbench;

// Exit code 2, exactly one stderr line "pathbench: error: ..." containing `needle`, and the
// directory holds no file afterwards (no output, no temporary).
void check_error(const std::string& args, const std::string& needle) {
  TempDir dir("err");
  const RunResult r = run_pathbench(fmt::format(fmt::runtime(args), fmt::arg("dir", dir.path.string())));
  INFO("args: " << args << "\nstderr: " << r.err);
  CHECK(r.code == 2);
  CHECK(r.err.rfind("pathbench: error: ", 0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.find(needle) != std::string::npos);
  CHECK(fs::is_empty(dir.path));
}

}  // namespace

TEST_CASE("cli gen: bad input is one error line, exit 2, no output file", "[cli]") {
  const std::string tail = "--out {dir}/d.bin";
  check_error("gen --task nosuch --n 3 " + tail, "unknown task 'nosuch'; valid: flipflop, wordproblem, mqrar");
  check_error("gen --task flipflop:foo=1 --n 3 " + tail, "unknown key 'foo' for task 'flipflop'; valid keys: len, p_ignore");
  check_error("gen --task flipflop --split test --n 3 " + tail, "unknown split 'test'");
  check_error("gen --task flipflop --n abc " + tail, "--n needs a positive integer, got 'abc'");
  check_error("gen --task flipflop --n 0 " + tail, "--n needs a positive integer");
  check_error("gen --task flipflop --n=-5 " + tail, "--n needs a positive integer, got '-5'");
  check_error("gen --task flipflop --n 3 --seed x " + tail, "--seed needs an integer >= 0, got 'x'");
  check_error("gen --task flipflop:len=-3 --n 3 " + tail, "key 'len' must be an even integer in [4, 1048576], got -3");
  check_error("gen --task flipflop:len=7 --n 3 " + tail, "key 'len' must be an even integer");
  check_error("gen --task flipflop:len=abc --n 3 " + tail, "key 'len' needs an integer, got 'abc'");
  check_error("gen --task wordproblem:group=a6 --n 3 " + tail, "must be one of a5, s5, a4xz5, z60");
  check_error("gen --task flipflop --n 3 --format xml " + tail, "--format");
  check_error("gen --task flipflop --n 3 --out {dir}/missing/d.bin", "does not exist");
  check_error("gen --task flipflop --n 3 --format jsonl --out {dir}/missing/d.jsonl", "does not exist");
  check_error("gen --task flipflop --n 3", "--out is required");
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
