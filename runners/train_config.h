// The fully resolved configuration of one training run. The same options serve `pathbench train`
// (as flags) and sweep files (as keys, dashes written as underscores); the run id is a hash of the
// semantic part of the resolved config, so a rerun of the same config finds the same directory.
#pragma once
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/spec.h"
#include "models/position/position_encoding.h"

namespace pb {

// Bounds checked by resolve(). Widths and depth keep the 64-bit size arithmetic exact; a seed's
// high 32 bits would mix into the RNG's stream id (core/rng.h), so seeds are 32-bit.
constexpr int kMaxDModel = 1 << 20;
constexpr int kMaxHidden = 1 << 24;  // the MLP's hidden width, lround(mlp_ratio · d_model)
constexpr int kMaxLayers = 4096;
constexpr uint64_t kMaxSeed = 0xffffffffULL;
constexpr int kMaxEvalN = 1 << 30;
constexpr double kMaxGpuBytes = double(uint64_t(1) << 40);  // 1 TiB: more than any one GPU holds

struct TrainConfig {
  std::string task;          // task spec, canonical after resolve()
  std::string pe = kDefaultEncoding;  // position-encoding spec, canonical after resolve()
  int layers = 1;
  int d_model = 64;
  int heads = 2;
  double mlp_ratio = 4.0;
  int kv_conv = 0;           // 1: k and v through a short convolution (ModelConfig::kv_conv), an ablation
  int steps = 1000;
  int batch = 16;
  double lr = 1e-3;
  int warmup = 100;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  uint64_t seed = 0;
  int eval_every = 0;        // 0: evaluate at the end only
  int eval_n = 512;          // examples per eval split (the final evaluation)
  int eval_every_n = 0;      // examples per split of the periodic evaluations (0: eval_n)
  // Examples of the final evaluation for named splits, "SPLIT=N,..." in the task's split order
  // after resolve() (the others: eval_n). A rare-event split needs more: flip-flop's sparse reads.
  std::string eval_sizes;
  std::string eval_lens;  // "L1,L2,...": extra task lengths of the final evaluation (canonical: ascending)
  // Early stopping, judged at the periodic evaluations (StopRule below): stop once the rule holds,
  // or after `patience` evaluations without improvement of `patience_on` (by default the rule's
  // metric, or the first eval split's loss when there is no rule); 0 / "" off. The learning-rate
  // schedule still spans `steps`.
  std::string stop_at;       // "SPLIT:METRIC>=X" or "SPLIT:METRIC<=X", METRIC acc | seq_acc | loss
  int patience = 0;
  std::string patience_on;   // "SPLIT:METRIC"; a plateau metric such as seq_acc stays at 0 for
                             // thousands of steps while the loss falls: patience on the loss waits
  std::string data;          // optional `pathbench gen` file used instead of on-the-fly data
  // GPU arithmetic, fp32 | tf32 | bf16 (core/cuda/runtime.h, Precision): fp32 everywhere; TF32
  // matmuls; bf16 matmul products and bf16 softmax / PaTH attention kernels, fp32 storage, master
  // weights and optimizer (stick-breaking stays fp32). CUDA engine only. Part of the run id when
  // not fp32 (so fp32 runs keep the ids they had before the option existed).
  std::string precision = "fp32";
  // Start from the weights of a run (or a `pathbench convert` output) instead of the fresh
  // initialisation, converted on the fly when its encoding is not `pe` (runners/convert.h); fresh
  // AdamW moments and schedule from step 1. The run id holds the checksum of that checkpoint,
  // init_from_xxh3 (filled in by resolve()), not the path.
  std::string init_from;
  std::string init_from_xxh3;
  // Not part of the run id:
  std::string device = "auto";  // auto | cpu | cuda
  int threads = 0;              // CPU threads (0: all cores)
  int eval_batch = 0;           // sequences per evaluation forward pass (0: auto, trainer.h)
  // Steps between the resume checkpoints (runners/resume.h; 0: at each periodic evaluation, or
  // every tenth of the steps without --eval-every).
  int checkpoint_every = 0;
  // Data parallelism (runners/data_parallel.h, docs/multi-gpu.md): cfg.batch is the global batch.
  int gpus = 1;                 // GPUs of this process, one thread each
  std::string nccl_id_file;     // multi-process runs: where process 0 leaves the NCCL id for the others
  int procs = 0;                // with nccl_id_file: processes (0: $SLURM_NTASKS or $OMPI_COMM_WORLD_SIZE)
  int proc_id = -1;             // with nccl_id_file: this one (−1: $SLURM_PROCID or $OMPI_COMM_WORLD_RANK)
  std::string out;              // run directory
};

// A threshold on one evaluated metric: `--stop-at` and a sweep's `depth_search`.
struct StopRule {
  std::string split, metric;  // an eval split of the task; acc | seq_acc | loss
  bool at_least = true;       // >= (else <=)
  double value = 0;
  bool holds(double x) const { return at_least ? x >= value : x <= value; }
  std::string text() const;   // as parsed, canonical: "val:seq_acc>=0.99"
};
// Parses "SPLIT:METRIC>=X" / "SPLIT:METRIC<=X" (pb::Error naming `what` otherwise).
StopRule parse_stop_rule(const std::string& text, const std::string& what);
// Parses "SPLIT:METRIC" (--patience-on) into (split, metric) (pb::Error naming `what` otherwise).
std::pair<std::string, std::string> parse_metric_ref(const std::string& text, const std::string& what);
// A pb::Error naming `what` unless the rule's split is an evaluation split of `task`.
void check_eval_split(const StopRule& rule, const std::string& task, const std::string& what);

// An evaluation of a run (`pathbench eval --task`, rows of eval.jsonl) may be of its task at another
// len only: another task, or another value of any other key (which changes the vocabulary, the
// targets, or nothing the evaluation splits use, as flip-flop's p_ignore of the train split), would
// put a wrong label on the row. pb::Error naming the key otherwise.
void check_eval_task(const Spec& trained, const Spec& eval);

// A pb::Error unless `device` is auto, cpu or cuda (resolve() and select_device() both check it).
void check_device_name(const std::string& device);

// Examples per split of a periodic evaluation: eval_every_n, or all eval_n when it is 0.
inline int periodic_eval_n(const TrainConfig& c) { return c.eval_every_n ? c.eval_every_n : c.eval_n; }
// Examples of `split` in the final evaluation: its --eval-sizes entry, else eval_n.
int final_eval_n(const TrainConfig& c, const std::string& split);
// The lengths of --eval-lens in its order (empty without it; a pb::Error naming an item that is not
// a length >= 1), and the spec of `task` with its len replaced by `len` (pb::Error when the task has
// no len or rejects this one).
std::vector<int> eval_lens(const TrainConfig& c);
std::string task_at_len(const std::string& task, int64_t len);

// Registers the training options on a (sub)command. Option names are the keys of sweep files.
void add_train_options(CLI::App& cmd, TrainConfig& cfg);

// Checks ranges and canonicalises the task and encoding specs (pb::Error on bad values: the task's
// and the encoding's parameters, the layer shape, and a size that would not fit in memory, before
// anything is allocated); with --nccl-id-file, takes procs / proc_id from Slurm or Open MPI when
// not given.
void resolve(TrainConfig& cfg);
inline int world_size(const TrainConfig& c) { return c.gpus * std::max(c.procs, 1); }  // GPUs in all

nlohmann::json to_json(const TrainConfig& cfg);            // every field
nlohmann::json semantic_json(const TrainConfig& cfg);      // the fields that define the result
// The first (in key order) of the fields that define the result whose value differs between a
// run's config.json `stored` and `cfg` (a field that `stored` lacks has its default), or "".
std::string first_semantic_difference(const nlohmann::json& stored, const TrainConfig& cfg);
std::string run_id(const TrainConfig& cfg);                // 16 hex digits of XXH3-128

}  // namespace pb

namespace pb {
// The config of a finished run, read back from its config.json (pb::Error if a field is missing).
TrainConfig config_from_json(const nlohmann::json& j, const std::string& path);
}  // namespace pb
