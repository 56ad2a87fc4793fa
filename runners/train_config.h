// The fully resolved configuration of one training run. The same options serve `pathbench train`
// (as flags) and sweep files (as keys, dashes written as underscores); the run id is a hash of the
// semantic part of the resolved config, so a rerun of the same config finds the same directory.
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace pb {

struct TrainConfig {
  std::string task;          // task spec, canonical after resolve()
  std::string pe = "rope";   // position-encoding spec, canonical after resolve()
  int layers = 1;
  int d_model = 64;
  int heads = 2;
  double mlp_ratio = 4.0;
  int steps = 1000;
  int batch = 16;
  double lr = 1e-3;
  int warmup = 100;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  uint64_t seed = 0;
  int eval_every = 0;        // 0: evaluate at the end only
  int eval_n = 512;          // examples per eval split
  std::string data;          // optional `pathbench gen` file used instead of on-the-fly data
  // Not part of the run id:
  std::string device = "auto";  // auto | cpu | cuda
  bool tf32 = false;            // GPU matmuls on TF32 tensor cores (fp32 storage and accumulation)
  int threads = 0;              // CPU threads (0: all cores)
  std::string out;              // run directory
};

// Registers the training options on a (sub)command. Option names are the keys of sweep files.
void add_train_options(CLI::App& cmd, TrainConfig& cfg);

// Checks ranges and canonicalises the task and encoding specs (pb::Error on bad values).
void resolve(TrainConfig& cfg);

nlohmann::json to_json(const TrainConfig& cfg);            // every field
nlohmann::json semantic_json(const TrainConfig& cfg);      // the fields that define the result
std::string run_id(const TrainConfig& cfg);                // 16 hex digits of XXH3-128

}  // namespace pb

namespace pb {
// The config of a finished run, read back from its config.json (pb::Error if a field is missing).
TrainConfig config_from_json(const nlohmann::json& j, const std::string& path);
}  // namespace pb
