// Data-parallel training (runners/data_parallel.h) on two GPUs against one: the same global batch
// gives the same loss curve, and rank 0 alone writes the run directory. With fewer than two GPUs
// the executable prints why and exits 77 (skipped).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>
#include <vector>

#include "core/device.h"
#include "cli.h"

namespace fs = std::filesystem;
using namespace pb::test;

namespace {

std::vector<double> losses(const std::string& dir) {
  std::vector<double> out;
  std::istringstream in(pb::read_file(dir + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return out;
}

}  // namespace

// Tolerance 1e-4 relative per step: the two runs add the same numbers in different orders (cuBLAS
// sums the weight gradients over B·T rows on one GPU but over B·T/2 rows then across GPUs in
// NCCL; the embedding gradient uses float atomics even on one GPU), i.e. differences of ~1e-7
// relative per step, which 20 AdamW steps grow by far less than 1e-4.
TEST_CASE("dp: --gpus 2 reproduces the one-GPU loss curve, rank 0 alone writes", "[cuda][dp]") {
  const TempDir tmp("dp");
  const std::string one = tmp.file("one"), two = tmp.file("two");
  const std::string args =
      "train --task flipflop:len=32 --pe path --layers 2 --d-model 64 --heads 2 --batch 32 --steps 20 "
      "--warmup 5 --eval-n 64 --device cuda --out ";
  const RunResult r1 = run_pathbench(args + one + " --gpus 1"), r2 = run_pathbench(args + two + " --gpus 2");
  INFO(r1.err << r2.err);
  REQUIRE(r1.code == 0);
  REQUIRE(r2.code == 0);
  const auto l1 = losses(one), l2 = losses(two);
  REQUIRE(l1.size() == 20);
  REQUIRE(l2.size() == l1.size());
  for (size_t i = 0; i < l1.size(); ++i) {
    INFO("step " << i + 1 << ": " << l1[i] << " vs " << l2[i]);
    CHECK(std::abs(l2[i] - l1[i]) <= 1e-4 * std::abs(l1[i]));
  }
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(two)) files.insert(e.path().filename().string());
  CHECK(files == std::set<std::string>{"config.json", "meta.json", "metrics.jsonl", "eval.jsonl",
                                       "model.safetensors", "result.json"});
  const auto meta = nlohmann::json::parse(pb::read_file(two + "/meta.json"));
  CHECK(meta["world_size"] == 2);
  // Same run id: --gpus is not part of it.
  CHECK(nlohmann::json::parse(pb::read_file(one + "/result.json"))["run_id"] ==
        nlohmann::json::parse(pb::read_file(two + "/result.json"))["run_id"]);
}

int main(int argc, char** argv) {
  if (const int n = pb::cuda_device_count(); n < 2) {
    std::fprintf(stderr, "%d CUDA device(s): the data-parallel test needs 2, skipped\n", n);
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
