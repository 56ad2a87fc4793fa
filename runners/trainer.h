// Training and evaluation of one run on the CPU (the reference engine): data generated on the fly
// from the task's counter-based generator, AdamW with warm-up + cosine decay, gradient clipping,
// periodic evaluation on every eval split, and the run directory of docs/run-format.md.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "models/transformer.h"
#include "runners/train_config.h"
#include "tasks/task.h"

namespace pb {

struct EvalResult {
  std::string split;
  double acc = 0, seq_acc = 0, loss = 0;  // over scored targets / sequences / targets
  int64_t n = 0, n_seqs = 0;
  nlohmann::json to_json() const;
};

// Evaluates `n_examples` examples of `split` (seed kEvalSeed) in batches of `batch`.
EvalResult evaluate(Transformer<float>& model, const Task& task, int split, int n_examples, int batch);

ModelConfig model_config(const TrainConfig& cfg, const Task& task);
void save_checkpoint(const Transformer<float>& model, const std::string& path);
void load_checkpoint(Transformer<float>& model, const std::string& path);

// Runs the training described by a resolved config into cfg.out. Returns the process exit code:
// 0 ok, 1 diverged or failed (result.json says which and why).
int run_training(const TrainConfig& cfg);

}  // namespace pb
