// Training and evaluation of one run on an engine (the CPU reference or the CUDA engine): data
// generated on the fly from the task's counter-based generator (the next batch while the GPU runs
// the current step), AdamW with warm-up + cosine decay, gradient clipping, periodic evaluation on
// every eval split, and the run directory of docs/run-format.md.
#pragma once
#include <nlohmann/json.hpp>

#include <atomic>
#include <bit>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "models/transformer.h"
#include "runners/train_config.h"
#include "tasks/task.h"

namespace pb {

class DatasetReader;
class StackPool;
struct ResumePoint;

struct EvalResult {
  std::string split;
  double acc = 0, seq_acc = 0, loss = 0;  // over scored targets / sequences / targets
  int64_t n = 0, n_seqs = 0;
  // (wrong, scored) -> sequences with `wrong` of their `scored` targets wrong: what a bootstrap
  // over sequences resamples (runners/bootstrap.h).
  std::map<std::pair<int64_t, int64_t>, int64_t> seq_errors;
  // Accuracy by recall distance, for a task that defines it (Task::distances): entry k counts the
  // scored targets at a distance in [2^k, 2^(k+1)) as (correct, scored); empty for other tasks.
  std::vector<std::pair<int64_t, int64_t>> by_distance;
  // With seq_errors as "seq_errors": [[wrong, scored, sequences], ...] when asked.
  nlohmann::json to_json(bool with_seq_errors = false) const;
};

// A line of eval.jsonl (docs/run-format.md): `r` (with its per-sequence counts when asked), its
// accuracy by distance as "by_distance": [[from, to, correct, scored], ...] (non-empty ranges,
// distances from ≤ d < to) where the task defines one, and the step, split, task spec and sequence
// length it was evaluated at.
nlohmann::json eval_row(const EvalResult& r, int step, const Task& task, bool with_seq_errors);

// One evaluated sequence with at least one wrong scored target (`pathbench eval --errors`).
struct WrongSequence {
  int64_t index = 0;                       // example index within the split (seed kEvalSeed)
  std::vector<int32_t> input, target, pred;  // (T)
  std::vector<uint8_t> scored;             // (T)
};

struct Batch {
  std::vector<int32_t> input, target;  // (B, T)
  std::vector<uint8_t> scored;         // (B, T)
};

// An evaluation summed batch by batch (evaluate, and evaluate_decoding in runners/decoding.h):
// accuracy over scored targets, sequence accuracy with the per-sequence outcome counts, the mean
// loss over every position with a target, and accuracy by recall distance where `task` has one.
class EvalTally {
 public:
  EvalTally(std::string split, const Task& task) : task_(task), distance_(size_t(task.seq_len())) {
    r_.split = std::move(split);
  }
  // Adds the B sequences of `b` given their predictions and per-position losses, (B, T) each, the
  // first being example `first` of the split; with `wrong`, appends those with a wrong scored target.
  template <class L>
  void add(const Batch& b, int B, int T, const int32_t* pred, const L* losses, int64_t first,
           std::vector<WrongSequence>* wrong = nullptr) {
    for (int i = 0; i < B; ++i) {
      const size_t o = size_t(i) * T;
      int64_t n_wrong = 0, scored = 0;
      const bool by_distance = task_.distances(&b.input[o], distance_.data());
      for (size_t p = o; p < o + T; ++p) {
        if (b.target[p] >= 0) loss_sum_ += losses[p], ++n_targets_;
        if (!b.scored[p]) continue;
        n_wrong += pred[p] != b.target[p], ++scored;
        if (by_distance && distance_[p - o] > 0) count_distance(distance_[p - o], pred[p] == b.target[p]);
      }
      correct_ += scored - n_wrong, r_.n += scored, seq_ok_ += n_wrong == 0, ++r_.n_seqs;
      ++r_.seq_errors[{n_wrong, scored}];
      if (n_wrong && wrong)
        wrong->push_back({first + i, {b.input.begin() + o, b.input.begin() + o + T},
                          {b.target.begin() + o, b.target.begin() + o + T}, {pred + o, pred + o + T},
                          {b.scored.begin() + o, b.scored.begin() + o + T}});
    }
  }
  EvalResult result() const;

 private:
  void count_distance(int32_t d, bool right) {
    const size_t k = size_t(std::bit_width(uint32_t(d))) - 1;  // 2^k <= d < 2^(k+1)
    if (r_.by_distance.size() <= k) r_.by_distance.resize(k + 1);
    r_.by_distance[k].first += right, ++r_.by_distance[k].second;
  }
  const Task& task_;
  std::vector<int32_t> distance_;  // (T) of the sequence being added
  EvalResult r_;
  int64_t correct_ = 0, n_targets_ = 0, seq_ok_ = 0;
  double loss_sum_ = 0;
};

// Examples first_index .. first_index + B − 1 of `split`, generated in parallel, or read from a
// `pathbench gen` file (cycling through it) when `data` is given.
void fill_batch(Batch& b, const Task& task, uint64_t seed, int split, uint64_t first_index, int B,
                const DatasetReader* data = nullptr);

// Evaluates `n_examples` examples of `split` (seed kEvalSeed) in batches of `batch`; with `wrong`,
// appends every sequence that has a wrong scored target to it.
template <class E>
EvalResult evaluate(Transformer<E>& model, const Task& task, int split, int n_examples, int batch,
                    std::vector<WrongSequence>* wrong = nullptr);

ModelConfig model_config(const TrainConfig& cfg, const Task& task);

// Floats of device (or host) memory the model holds per token of a batch: the activations saved
// for the backward, the backward's buffers and the logits (Transformer::resize).
int64_t floats_per_token(const ModelConfig& m);
// Sequences per evaluation forward pass: --eval-batch, or (0, auto) as many as keep the buffers
// of an evaluation batch within kEvalBatchBytes, at least the training batch and at most the largest
// evaluation.
// The buffers keep their size after an evaluation, so this bounds a run's memory.
constexpr double kEvalBatchBytes = 1 << 30;
int eval_batch_size(const TrainConfig& cfg, const Task& task);
// Bytes a run of this config holds on the GPU (parameters, gradients, AdamW moments, the buffers
// of its largest batch and a margin for attention scratch and cuBLAS): sizes `sweep --pack auto`.
double run_memory_bytes(const TrainConfig& cfg, const Task& task);
template <class E>
void save_checkpoint(const Transformer<E>& model, const std::string& path);
template <class E>
void load_checkpoint(Transformer<E>& model, const std::string& path);
// Sets the parameters of `model` from tensors under their names (a pb::Error naming `path` and a
// missing or ill-shaped tensor).
template <class E>
void load_params(Transformer<E>& model, const TensorMap& m, const std::string& path);

// "cpu" or "cuda" for --device auto|cpu|cuda (auto: the GPU when this build and machine have
// one), after selecting the engine's settings (CPU threads; the calling thread's GPU precision).
// pb::Error for another device name, when cuda is asked for and unavailable, when --gpus asks for
// more devices than are visible, or when --precision is not fp32 on the CPU.
std::string select_device(const TrainConfig& cfg);

// Calls f(E{}) with the engine of a device name from select_device().
template <class F>
decltype(auto) with_engine(const std::string& device, F&& f) {
#if PATHBENCH_HAVE_CUDA
  if (device == "cuda") return f(CudaEngine{});
#endif
  return f(Cpu32{});
}

// Where a run reports, and how it is stopped from outside (a packed sweep runs many in threads).
struct RunContext {
  std::FILE* log = stderr;                    // progress and the closing status line
  const std::atomic<bool>* cancel = nullptr;  // once true: stop at the next step, write no result.json
  StackPool* stacks = nullptr;  // with one: the steps run in a stacked group's slot (runners/stack_group.h)
};
constexpr int kRunCancelled = 130;

// What the runs of one stacked group share (`sweep --stack`, runners/stack_group.h): everything
// that fixes the stacked model's shapes and its step's computation. Seeds, learning rates,
// schedules, evaluations and stopping rules may differ.
std::string stack_shape(const TrainConfig& cfg);

// Runs the training described by a resolved config into cfg.out, from step 0, or with `resume`
// (read_resume(cfg), runners/resume.h) from its checkpoint. Returns the process exit code: 0 ok,
// 1 diverged or failed (result.json says which and why), kRunCancelled when ctx.cancel stopped it
// (the directory is left without result.json: pending, with its last checkpoint).
int run_training(const TrainConfig& cfg, const RunContext& ctx = {}, const ResumePoint* resume = nullptr);

// The --data file of `cfg` opened and checked against its task (train split), or null without
// one; a pb::Error naming the file otherwise.
std::unique_ptr<DatasetReader> open_training_data(const TrainConfig& cfg);

// What run_training would refuse before it writes anything (the device, --gpus, --precision, the
// --data file, the tensors of --init-from), refused now: `train` calls it before it locks --out.
void check_before_writing(const TrainConfig& cfg);

}  // namespace pb
