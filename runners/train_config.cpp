#include "runners/train_config.h"

#include "core/xxhash.h"

#include <fmt/format.h>

#include <fmt/ranges.h>

#include <unistd.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string_view>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/spec.h"
#include "models/position/position_encoding.h"
#include "runners/convert.h"
#include "runners/trainer.h"
#include "tasks/task.h"

namespace pb {

void add_train_options(CLI::App& cmd, TrainConfig& c) {
  cmd.add_option("--task", c.task, "task spec NAME[:key=value,...] (see `pathbench list`)")
      ->type_name("SPEC")
      ->required();
  cmd.add_option("--pe", c.pe, "position-encoding spec NAME[:key=value,...]")
      ->type_name("SPEC")
      ->capture_default_str();
  cmd.add_option("--layers", c.layers, "transformer blocks")->capture_default_str();
  cmd.add_option("--d-model", c.d_model, "model width")->capture_default_str();
  cmd.add_option("--heads", c.heads, "attention heads (head dim = d_model / heads)")->capture_default_str();
  cmd.add_option("--mlp-ratio", c.mlp_ratio, "SwiGLU hidden width / d_model")->capture_default_str();
  cmd.add_option("--kv-conv", c.kv_conv, "1: k and v through PaTH's short convolution (conv3 + SiLU), 0: not")
      ->capture_default_str();
  cmd.add_option("--steps", c.steps, "optimizer steps")->capture_default_str();
  cmd.add_option("--batch", c.batch, "sequences per step")->capture_default_str();
  cmd.add_option("--lr", c.lr, "peak learning rate (AdamW)")->capture_default_str();
  cmd.add_option("--warmup", c.warmup, "linear warm-up steps, then cosine decay to lr/10")->capture_default_str();
  cmd.add_option("--weight-decay", c.weight_decay, "AdamW decoupled weight decay (matrices only)")->capture_default_str();
  cmd.add_option("--grad-clip", c.grad_clip, "clip the global gradient norm (0: off)")->capture_default_str();
  cmd.add_option("--seed", c.seed, "seed of the initialisation and the training data")->capture_default_str();
  cmd.add_option("--eval-every", c.eval_every, "evaluate every N steps (0: at the end only)")->capture_default_str();
  cmd.add_option("--eval-n", c.eval_n, "examples per split of the final evaluation")->capture_default_str();
  cmd.add_option("--eval-sizes", c.eval_sizes,
                 "final-evaluation examples of named splits, SPLIT=N,... (e.g. val_sparse=327680); the others --eval-n");
  cmd.add_option("--eval-lens", c.eval_lens,
                 "also evaluate the final model at these task lengths, L,... (length generalisation; each on "
                 "about as many tokens as the final evaluation at the trained length)")
      ->type_name("L,...");
  cmd.add_option("--eval-every-n", c.eval_every_n, "examples per split of the periodic evaluations (0: --eval-n)")
      ->capture_default_str();
  cmd.add_option("--eval-batch", c.eval_batch, "sequences per evaluation forward pass (0: auto, by memory)")
      ->capture_default_str();
  cmd.add_option("--checkpoint-every", c.checkpoint_every,
                 "write the resume checkpoint (resume.safetensors) every N steps (0: at each periodic "
                 "evaluation, or every tenth of the steps without --eval-every)")->capture_default_str();
  cmd.add_option("--stop-at", c.stop_at,
                 "stop early once a periodic evaluation meets SPLIT:METRIC>=X or SPLIT:METRIC<=X "
                 "(METRIC acc, seq_acc or loss; e.g. val:seq_acc>=0.99); needs --eval-every");
  cmd.add_option("--patience", c.patience,
                 "stop after N periodic evaluations without improvement of the --stop-at metric "
                 "(else the first eval split's loss); 0: off")->capture_default_str();
  cmd.add_option("--patience-on", c.patience_on,
                 "SPLIT:METRIC whose improvement --patience waits for (default: the --stop-at metric, else "
                 "the first eval split's loss), e.g. val:loss")
      ->type_name("SPLIT:METRIC");
  cmd.add_option("--data", c.data, "train on a `pathbench gen` bin file instead of on-the-fly data")
      ->type_name("FILE");
  cmd.add_option("--init-from", c.init_from,
                 "start from the weights of this run (or `pathbench convert` output), converted to --pe when its "
                 "encoding differs; fresh optimizer and schedule (a resume checkpoint in --out wins)")
      ->type_name("DIR");
  cmd.add_option("--device", c.device, "auto | cpu | cuda (auto: the GPU when there is one)")->capture_default_str();
  cmd.add_option("--precision", c.precision,
                 "GPU arithmetic: fp32 | tf32 (TF32 matmuls) | bf16 (bf16 matmul products and attention "
                 "kernels, like PyTorch bf16 autocast; stick-breaking (sba) stays fp32); storage, weights "
                 "and optimizer are fp32")->capture_default_str();
  cmd.add_option("--threads", c.threads, "CPU threads (0: all cores)")->capture_default_str();
  cmd.add_option("--gpus", c.gpus, "data-parallel GPUs of this process (--batch is the global batch)")->capture_default_str();
  cmd.add_option("--nccl-id-file", c.nccl_id_file, "multi-process runs: shared file for the NCCL id (docs/multi-gpu.md)");
  cmd.add_option("--procs", c.procs, "with --nccl-id-file: processes (default $SLURM_NTASKS / $OMPI_COMM_WORLD_SIZE)");
  cmd.add_option("--proc-id", c.proc_id, "with --nccl-id-file: this process (default $SLURM_PROCID / $OMPI_COMM_WORLD_RANK)");
}

namespace {

// The first of the environment variables that is set, as an int; `fallback` if none is.
int env_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* n : names)
    if (const char* v = std::getenv(n)) return std::atoi(v);
  return fallback;
}

void resolve_data_parallel(TrainConfig& c) {
  if (c.gpus < 1) fail("--gpus must be >= 1, got {}", c.gpus);
  if (c.nccl_id_file.empty()) {
    if (c.procs > 1 || c.proc_id > 0) fail("--procs / --proc-id need --nccl-id-file");
    c.procs = 1, c.proc_id = 0;
  } else {
    if (c.procs == 0) c.procs = env_int({"SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"}, 0);
    if (c.proc_id == -1) c.proc_id = env_int({"SLURM_PROCID", "OMPI_COMM_WORLD_RANK"}, -1);
    if (c.procs < 1 || c.proc_id < 0 || c.proc_id >= c.procs)
      fail("--nccl-id-file: need 0 <= --proc-id < --procs (or Slurm / Open MPI variables), got {} of {}", c.proc_id, c.procs);
  }
  const int world = world_size(c);
  if (c.batch % world) fail("--batch ({}) must be a multiple of the number of GPUs ({})", c.batch, world);
#if !PATHBENCH_HAVE_NCCL
  if (world > 1) fail("--gpus {}: this build has no NCCL (multi-GPU needs the CUDA build with the toolkit's NCCL)", c.gpus);
#endif
  if (world > 1 && c.device == "cpu") fail("--gpus {} trains on GPUs; it cannot be combined with --device cpu", c.gpus);
}

void resolve_precision(const TrainConfig& c) {
  if (c.precision != "fp32" && c.precision != "tf32" && c.precision != "bf16")
    fail("--precision must be fp32, tf32 or bf16, got '{}'", c.precision);
  if (c.precision != "fp32" && c.device == "cpu")
    fail("--precision {} needs the CUDA engine; the CPU engine computes in fp32 (drop --device cpu or use --precision fp32)",
         c.precision);
  const int head_dim = c.d_model / c.heads;
  if (c.precision == "bf16" && encoding_info(c.pe).bf16 && head_dim != 32 &&
      head_dim != 64 && head_dim != 128)
    fail("--precision bf16: the bf16 attention kernels need a head dim (d_model / heads) of 32, 64 or 128, got {}", head_dim);
}

// Checks the early-stopping options and writes --stop-at in its canonical form.
void resolve_stopping(TrainConfig& c) {
  if (c.eval_every_n < 0) fail("--eval-every-n must be >= 0, got {}", c.eval_every_n);
  if (c.patience < 0) fail("--patience must be >= 0, got {}", c.patience);
  if ((!c.stop_at.empty() || c.patience > 0) && c.eval_every == 0)
    fail("--stop-at and --patience are judged at the periodic evaluations: set --eval-every");
  if (!c.patience_on.empty()) {
    if (c.patience == 0) fail("--patience-on '{}' needs --patience", c.patience_on);
    const auto [split, metric] = parse_metric_ref(c.patience_on, "--patience-on");
    check_eval_split({split, metric}, c.task, fmt::format("--patience-on '{}'", c.patience_on));
  }
  if (c.stop_at.empty()) return;
  const StopRule r = parse_stop_rule(c.stop_at, "--stop-at");
  check_eval_split(r, c.task, fmt::format("--stop-at '{}'", c.stop_at));
  c.stop_at = r.text();
}

// "SPLIT=N,..." -> (split, N) in the order written; a pb::Error for a malformed item or an N
// outside 1 … 2^30.
std::vector<std::pair<std::string, int>> eval_size_items(const std::string& text) {
  std::vector<std::pair<std::string, int>> items;
  for (const std::string& item : split_commas(text)) {
    const auto eq = item.find('=');
    int64_t n = 0;
    if (eq == std::string::npos || !parse_int(std::string_view(item).substr(eq + 1), n) || n < 1 || n > (1 << 30))
      fail("--eval-sizes '{}': expected SPLIT=N,... with N >= 1, got '{}'", text, item);
    items.emplace_back(item.substr(0, eq), int(n));
  }
  return items;
}

// Checks --eval-sizes against the task's splits and writes it in split order.
void resolve_eval_sizes(TrainConfig& c) {
  if (c.eval_sizes.empty()) return;
  const auto splits = make_task(c.task)->splits();
  std::map<std::string, int> sizes;
  for (const auto& [split, n] : eval_size_items(c.eval_sizes)) {
    if (std::find(splits.begin() + 1, splits.end(), split) == splits.end())
      fail("--eval-sizes: '{}' is not an evaluation split of {} (splits: {})", split, c.task,
           fmt::join(splits.begin() + 1, splits.end(), ", "));
    if (!sizes.emplace(split, n).second) fail("--eval-sizes '{}': split '{}' given twice", c.eval_sizes, split);
  }
  std::string canonical;
  for (const auto& s : splits)
    if (sizes.count(s)) canonical += fmt::format("{}{}={}", canonical.empty() ? "" : ",", s, sizes[s]);
  c.eval_sizes = canonical;
}

// Checks --eval-lens against the task (each length valid for it, none the trained one) and writes
// it ascending.
void resolve_eval_lens(TrainConfig& c, const Task& task) {
  if (c.eval_lens.empty()) return;
  const auto items = eval_lens(c);
  const std::set<int> lens(items.begin(), items.end());
  for (const int len : lens) {
    if (len == task.spec().get_int("len")) fail("--eval-lens '{}': {} is the trained length", c.eval_lens, len);
    make_task(task_at_len(c.task, len));
  }
  c.eval_lens = fmt::format("{}", fmt::join(lens, ","));
}

// Refuses, before anything is allocated, a run whose tokens per forward pass overflow the engines'
// int token index (B·T) or whose memory (run_memory_bytes) exceeds the machine's: the host's RAM
// on the CPU, kMaxGpuBytes per GPU otherwise (the GPU's own limit is caught when allocating).
void check_memory(const TrainConfig& c, const Task& task) {
  const int64_t tokens = int64_t(std::max(c.batch, eval_batch_size(c, task))) * task.seq_len();
  if (tokens > INT_MAX)
    fail("{} tokens per forward pass ((eval) batch × len {}) exceed {}: reduce --batch, --eval-batch or the "
         "task's len", tokens, task.seq_len(), INT_MAX);
  const bool cpu = c.device == "cpu" || (c.device == "auto" && cuda_device_count() == 0);
  const double host = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
  const double limit = cpu ? host : kMaxGpuBytes, need = run_memory_bytes(c, task) / (cpu ? 1 : world_size(c));
  if (need > limit)
    fail("this run needs about {:.3g} GiB, more than {} ({:.3g} GiB): reduce --batch, --eval-batch, --d-model, "
         "--mlp-ratio, --layers or the task's len", need / (1 << 30), cpu ? "this machine's memory" : "any GPU holds",
         limit / (1 << 30));
}

}  // namespace

int final_eval_n(const TrainConfig& c, const std::string& split) {
  if (c.eval_sizes.empty()) return c.eval_n;
  for (const auto& [s, n] : eval_size_items(c.eval_sizes))
    if (s == split) return n;
  return c.eval_n;
}

std::vector<int> eval_lens(const TrainConfig& c) {
  std::vector<int> lens;
  if (c.eval_lens.empty()) return lens;
  for (const std::string& item : split_commas(c.eval_lens)) {
    int64_t len = 0;
    if (!parse_int(item, len) || len < 1 || len > INT_MAX)
      fail("--eval-lens '{}': expected lengths L,... with L >= 1, got '{}'", c.eval_lens, item);
    lens.push_back(int(len));
  }
  return lens;
}

std::string task_at_len(const std::string& task, int64_t len) {
  const Spec spec = make_task(task)->spec();
  std::string text = spec.name();
  bool has_len = false;
  for (const auto& [key, value] : spec.items()) {
    has_len |= key == "len";
    text += fmt::format("{}{}={}", text == spec.name() ? ":" : ",", key, key == "len" ? std::to_string(len) : value);
  }
  if (!has_len) fail("--eval-lens: task '{}' has no len", spec.name());
  return text;
}

std::string StopRule::text() const { return fmt::format("{}:{}{}{}", split, metric, at_least ? ">=" : "<=", value); }

std::pair<std::string, std::string> parse_metric_ref(const std::string& text, const std::string& what) {
  const auto colon = text.find(':');
  const std::string split = text.substr(0, colon), metric = colon == std::string::npos ? "" : text.substr(colon + 1);
  if (split.empty() || (metric != "acc" && metric != "seq_acc" && metric != "loss"))
    fail("{} '{}': expected SPLIT:METRIC with METRIC acc, seq_acc or loss (e.g. val:loss)", what, text);
  return {split, metric};
}

StopRule parse_stop_rule(const std::string& text, const std::string& what) {
  const auto colon = text.find(':');
  const auto op = text.find_first_of("<>", colon == std::string::npos ? 0 : colon);
  StopRule r;
  if (colon != std::string::npos && op != std::string::npos && op + 1 < text.size() && text[op + 1] == '=') {
    r.split = text.substr(0, colon), r.metric = text.substr(colon + 1, op - colon - 1), r.at_least = text[op] == '>';
    const std::string num = text.substr(op + 2);
    char* end = nullptr;
    r.value = num.empty() ? NAN : std::strtod(num.c_str(), &end);
    if (!r.split.empty() && (r.metric == "acc" || r.metric == "seq_acc" || r.metric == "loss") && end &&
        *end == '\0' && std::isfinite(r.value))
      return r;
  }
  fail("{} '{}': expected SPLIT:METRIC>=X or SPLIT:METRIC<=X with METRIC acc, seq_acc or loss (e.g. val:seq_acc>=0.99)",
       what, text);
}

void check_eval_split(const StopRule& rule, const std::string& task, const std::string& what) {
  const auto splits = make_task(task)->splits();
  if (std::find(splits.begin() + 1, splits.end(), rule.split) == splits.end())
    fail("{}: '{}' is not an evaluation split of {} (splits: {})", what, rule.split, task,
         fmt::join(splits.begin() + 1, splits.end(), ", "));
}

void check_eval_task(const Spec& trained, const Spec& eval) {
  if (eval.name() != trained.name())
    fail("task '{}' is not the run's task '{}': an evaluation may change only its len", eval.canonical(),
         trained.canonical());
  for (size_t i = 0; i < eval.items().size(); ++i) {
    const auto& [key, value] = eval.items()[i];
    if (key != "len" && value != trained.items()[i].second)
      fail("task '{}': key '{}' = {} differs from the run's {} ('{}'); an evaluation may change only len",
           eval.canonical(), key, value, trained.items()[i].second, trained.canonical());
  }
}

void check_device_name(const std::string& device) {
  if (device != "auto" && device != "cpu" && device != "cuda")
    fail("--device must be auto, cpu or cuda, got '{}'", device);
}

void resolve(TrainConfig& c) {
  const auto task = make_task(c.task);  // checks the task's parameters (tasks/*.cpp)
  c.task = task->spec().canonical();
  c.pe = resolve_encoding(c.pe).canonical();
  if (c.layers < 1 || c.layers > kMaxLayers) fail("--layers must be in [1, {}], got {}", kMaxLayers, c.layers);
  if (c.heads < 1 || c.d_model < 1 || c.d_model % c.heads)
    fail("--d-model ({}) must be a positive multiple of --heads ({})", c.d_model, c.heads);
  if (c.d_model > kMaxDModel) fail("--d-model must be <= {}, got {}", kMaxDModel, c.d_model);
  if (c.kv_conv != 0 && c.kv_conv != 1) fail("--kv-conv must be 0 or 1, got {}", c.kv_conv);
  if (!(c.mlp_ratio > 0) || !(c.mlp_ratio * c.d_model <= kMaxHidden))
    fail("--mlp-ratio must be > 0 with mlp-ratio × d-model <= {}, got {}", kMaxHidden, c.mlp_ratio);
  // The encoding's own checks: its parameters (its constructor) and the layer shape (params()).
  make_encoding<Cpu32>(c.pe)->params({c.d_model, c.heads, c.d_model / c.heads});
  if (c.steps < 0) fail("--steps must be >= 0, got {}", c.steps);
  if (c.batch < 1) fail("--batch must be >= 1, got {}", c.batch);
  if (!(c.lr > 0) || !std::isfinite(c.lr)) fail("--lr must be a finite number > 0, got {}", c.lr);
  if (c.warmup < 0) fail("--warmup must be >= 0, got {}", c.warmup);
  if (!(c.weight_decay >= 0) || !std::isfinite(c.weight_decay))
    fail("--weight-decay must be a finite number >= 0, got {}", c.weight_decay);
  if (!(c.grad_clip >= 0) || !std::isfinite(c.grad_clip))
    fail("--grad-clip must be a finite number >= 0, got {}", c.grad_clip);
  if (c.seed > kMaxSeed) fail("--seed must be in [0, {}] (the RNG key takes 32 bits of it), got {}", kMaxSeed, c.seed);
  if (c.eval_every < 0) fail("--eval-every must be >= 0, got {}", c.eval_every);
  if (c.eval_n < 1 || c.eval_n > kMaxEvalN) fail("--eval-n must be in [1, {}], got {}", kMaxEvalN, c.eval_n);
  const int max_threads = 4 * int(std::max(1u, std::thread::hardware_concurrency()));
  if (c.threads < 0 || c.threads > max_threads)
    fail("--threads must be in [0, {}] (4 × this machine's {} hardware threads; 0: all), got {}", max_threads,
         max_threads / 4, c.threads);
  check_device_name(c.device);
  if (c.eval_batch < 0) fail("--eval-batch must be >= 0, got {}", c.eval_batch);
  if (c.checkpoint_every < 0) fail("--checkpoint-every must be >= 0, got {}", c.checkpoint_every);
  resolve_stopping(c);
  resolve_eval_sizes(c);
  resolve_eval_lens(c, *task);
  resolve_precision(c);
  resolve_data_parallel(c);
  if (!c.init_from.empty() && c.init_from_xxh3.empty()) {  // a run read back keeps its checksum
    const InitSource src = read_init_source(c.init_from, "--init-from");
    check_init_dims(src, c, "--init-from");
    c.init_from_xxh3 = src.checksum;
  }
  check_memory(c, *task);
}

namespace {

// Options added later enter the run id only when they differ from these defaults, so earlier runs
// keep their ids.
const std::map<std::string, nlohmann::json> kLaterDefaults = {
    {"precision", "fp32"}, {"eval_every_n", 0},  {"stop_at", ""},
    {"patience", 0},       {"patience_on", ""},  {"eval_sizes", ""},
    {"eval_lens", ""},     {"init_from_xxh3", ""}, {"kv_conv", 0}};

nlohmann::json all_semantic_json(const TrainConfig& c) {
  return {{"task", c.task},           {"pe", c.pe},
          {"layers", c.layers},       {"d_model", c.d_model},
          {"heads", c.heads},         {"mlp_ratio", c.mlp_ratio},
          {"steps", c.steps},         {"batch", c.batch},
          {"lr", c.lr},               {"warmup", c.warmup},
          {"weight_decay", c.weight_decay}, {"grad_clip", c.grad_clip},
          {"seed", c.seed},           {"eval_every", c.eval_every},
          {"eval_n", c.eval_n},       {"data", c.data},
          {"precision", c.precision}, {"eval_every_n", c.eval_every_n},
          {"stop_at", c.stop_at},     {"patience", c.patience},
          {"patience_on", c.patience_on}, {"eval_sizes", c.eval_sizes},
          {"eval_lens", c.eval_lens}, {"init_from_xxh3", c.init_from_xxh3},
          {"kv_conv", c.kv_conv}};
}

}  // namespace

nlohmann::json semantic_json(const TrainConfig& c) {
  nlohmann::json j = all_semantic_json(c);
  for (const auto& [key, value] : kLaterDefaults)
    if (j[key] == value) j.erase(key);
  return j;
}

std::string first_semantic_difference(const nlohmann::json& stored, const TrainConfig& cfg) {
  const nlohmann::json now = all_semantic_json(cfg);
  for (const auto& [key, value] : now.items()) {
    const auto later = kLaterDefaults.find(key);
    const nlohmann::json unset = later != kLaterDefaults.end() ? later->second : nlohmann::json();
    if ((stored.contains(key) ? stored[key] : unset) != value) return key;
  }
  return "";
}

nlohmann::json to_json(const TrainConfig& c) {
  auto j = semantic_json(c);
  j["device"] = c.device;
  j["precision"] = c.precision;
  j["threads"] = c.threads;
  j["eval_batch"] = c.eval_batch;
  j["checkpoint_every"] = c.checkpoint_every;
  j["eval_every_n"] = c.eval_every_n;
  j["stop_at"] = c.stop_at;
  j["patience"] = c.patience;
  j["patience_on"] = c.patience_on;
  j["eval_sizes"] = c.eval_sizes;
  j["eval_lens"] = c.eval_lens;
  j["init_from"] = c.init_from;
  j["init_from_xxh3"] = c.init_from_xxh3;
  j["gpus"] = c.gpus;
  j["procs"] = c.procs;
  j["nccl_id_file"] = c.nccl_id_file;
  j["out"] = c.out;
  return j;
}

std::string run_id(const TrainConfig& c) {
  const std::string text = semantic_json(c).dump();  // keys sorted: canonical
  const XXH128_hash_t h = XXH3_128bits(text.data(), text.size());
  return fmt::format("{:016x}", h.high64);
}

}  // namespace pb

namespace pb {

TrainConfig config_from_json(const nlohmann::json& j, const std::string& path) {
  TrainConfig c;
  // A JSON number that is not an integer would be converted to int unchecked (undefined behaviour
  // when out of range).
  for (const char* k : {"layers", "d_model", "heads", "steps", "batch", "warmup", "seed", "eval_every", "eval_n",
                        "eval_every_n", "patience", "kv_conv"})
    if (j.contains(k) && !j[k].is_number_integer()) fail("'{}': '{}' must be an integer", path, k);
  try {
    c.task = j.at("task"), c.pe = j.at("pe"), c.layers = j.at("layers"), c.d_model = j.at("d_model");
    c.heads = j.at("heads"), c.mlp_ratio = j.at("mlp_ratio"), c.steps = j.at("steps"), c.batch = j.at("batch");
    c.lr = j.at("lr"), c.warmup = j.at("warmup"), c.weight_decay = j.at("weight_decay");
    c.grad_clip = j.at("grad_clip"), c.seed = j.at("seed"), c.eval_every = j.at("eval_every");
    c.eval_n = j.at("eval_n"), c.data = j.at("data");
    c.eval_every_n = j.value("eval_every_n", 0), c.stop_at = j.value("stop_at", ""), c.patience = j.value("patience", 0);
    c.eval_sizes = j.value("eval_sizes", ""), c.patience_on = j.value("patience_on", "");
    c.eval_lens = j.value("eval_lens", ""), c.kv_conv = j.value("kv_conv", 0);
    c.init_from = j.value("init_from", ""), c.init_from_xxh3 = j.value("init_from_xxh3", "");
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is not a pathbench run config: {}", path, e.what());
  }
  return c;
}

}  // namespace pb
