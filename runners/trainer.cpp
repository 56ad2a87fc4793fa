#include "runners/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <random>
#include <tuple>

#include "core/device.h"
#include "core/error.h"
#include "core/io.h"
#include "core/safetensors.h"
#include "core/slow_call.h"
#include "runners/build_info.h"
#include "runners/convert.h"
#include "runners/data_parallel.h"
#include "runners/progress.h"
#include "runners/resume.h"
#include "runners/stack_group.h"
#include "runners/train_step.h"
#include "tasks/dataset_file.h"
#if PATHBENCH_HAVE_CUDA
#include "core/cuda/runtime.h"
#endif

namespace pb {

namespace fs = std::filesystem;

nlohmann::json EvalResult::to_json(bool with_seq_errors) const {
  nlohmann::json j = {{"acc", acc}, {"seq_acc", seq_acc}, {"n", n}, {"n_seqs", n_seqs}, {"loss", loss}};
  if (!with_seq_errors) return j;
  j["seq_errors"] = nlohmann::json::array();
  for (const auto& [key, count] : seq_errors) j["seq_errors"].push_back({key.first, key.second, count});
  return j;
}

nlohmann::json eval_row(const EvalResult& r, int step, const Task& task, bool with_seq_errors) {
  auto row = r.to_json(with_seq_errors);
  row["step"] = step, row["split"] = r.split, row["task"] = task.spec().canonical(), row["len"] = task.seq_len();
  if (r.by_distance.empty()) return row;
  row["by_distance"] = nlohmann::json::array();
  for (size_t k = 0; k < r.by_distance.size(); ++k)
    if (r.by_distance[k].second)
      row["by_distance"].push_back({int64_t(1) << k, int64_t(2) << k, r.by_distance[k].first, r.by_distance[k].second});
  return row;
}

ModelConfig model_config(const TrainConfig& cfg, const Task& task) {
  return {task.vocab_size(), cfg.layers, cfg.d_model, cfg.heads,
          std::max(1, int(std::lround(cfg.mlp_ratio * cfg.d_model))), cfg.pe, cfg.kv_conv == 1,
          task.target_every()};
}

int64_t floats_per_token(const ModelConfig& m) {
  const int64_t C = m.d_model, F = m.ffn, kv = m.kv_conv ? 2 * C : 0;  // k_in v_in (and their gradients)
  const int64_t per_layer = 4 * C + 4 * C + kv + 3 * F + 2;              // x h1 x_mid h2, q k v att, ab hh
  const int64_t logits = (2 * int64_t(m.vocab) + m.target_every - 1) / m.target_every;  // and their gradient
  return m.layers * per_layer + (4 * C + 4 * C + kv + 3 * F) + logits + 4;                // + backward
}

int eval_batch_size(const TrainConfig& cfg, const Task& task) {
  if (cfg.eval_batch > 0) return cfg.eval_batch;
  const double per_seq = 4.0 * double(floats_per_token(model_config(cfg, task))) * task.seq_len();
  const int fits = int(std::min(kEvalBatchBytes / per_seq, 1e6));
  int largest = std::max(cfg.eval_n, cfg.eval_every_n);
  for (const auto& split : task.splits()) largest = std::max(largest, final_eval_n(cfg, split));
  return std::max(cfg.batch, std::min(fits, largest));
}

double run_memory_bytes(const TrainConfig& cfg, const Task& task) {
  const ModelConfig m = model_config(cfg, task);
  const int64_t C = m.d_model, V = m.vocab;
  const double params = double(V * C * 2 + C + m.layers * (4 * C * C + 3 * C * m.ffn + 2 * C + 8 * C));
  const double tokens = double(std::max(cfg.batch, eval_batch_size(cfg, task))) * task.seq_len();
  // Attention scratch (PaTH's blockwise buffers, the gates) and cuBLAS's workspace: 1.5× margin.
  return 16 * params + 1.5 * 4 * double(floats_per_token(m)) * tokens + (64 << 20);
}

namespace {

double learning_rate(const TrainConfig& c, int step) {  // step is 1-based
  if (step <= c.warmup) return c.lr * step / c.warmup;
  const double p = c.steps > c.warmup ? double(step - c.warmup) / (c.steps - c.warmup) : 1.0;
  return c.lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * p)));  // cosine from lr to lr/10
}

std::string now_iso() {
  const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// 64 random bits in hex, written to meta.json and result.json by the process that trains the run, so
// that `collect` can tell a run folder whose files come from two attempts (docs/run-format.md).
std::string new_attempt_id() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

nlohmann::json meta_json(const TrainConfig& cfg, const std::string& device) {  // of the lead process
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  nlohmann::json meta = build_stamp();
  meta.update({{"device", device}, {"gpu_name", device == "cuda" ? cuda_device_name(cuda_current_device()) : ""},
               {"precision", cfg.precision},  // "fp32" on the CPU: select_device() refuses anything else
               {"threads", omp_get_max_threads()}, {"hostname", host},
               {"gpus", cfg.gpus}, {"world_size", world_size(cfg)},
               {"start_time", now_iso()}});
  return meta;
}

// Early stopping (TrainConfig::stop_at, patience, patience_on), fed the periodic evaluations.
class EarlyStop {
 public:
  EarlyStop(const TrainConfig& cfg, const Task& task) : patience_(cfg.patience) {
    if (!cfg.stop_at.empty()) rule_ = parse_stop_rule(cfg.stop_at, "--stop-at");
    split_ = rule_ ? rule_->split : task.splits()[1];
    metric_ = rule_ ? rule_->metric : "loss";
    if (!cfg.patience_on.empty()) std::tie(split_, metric_) = parse_metric_ref(cfg.patience_on, "--patience-on");
    higher_better_ = metric_ != "loss";
  }
  // The evaluations of one step ({split: EvalResult::to_json()}): why to stop now, or "".
  std::string update(const nlohmann::json& evals, int step) {
    if (rule_) {
      const double r = evals.at(rule_->split).at(rule_->metric).get<double>();
      if (rule_->holds(r)) return fmt::format("stop_at {} ({} at step {})", rule_->text(), r, step);
    }
    const double x = evals.at(split_).at(metric_).get<double>();
    EarlyStopState& s = state_;
    if (s.best_step < 0 || (higher_better_ ? x > s.best : x < s.best)) s.best = x, s.best_step = step, s.since_best = 0;
    else ++s.since_best;
    if (patience_ > 0 && s.since_best >= patience_)
      return fmt::format("patience {} ({}:{} best {} at step {})", patience_, split_, metric_, s.best, s.best_step);
    return "";
  }
  const EarlyStopState& state() const { return state_; }
  void restore(const EarlyStopState& s) { state_ = s; }

 private:
  std::optional<StopRule> rule_;
  int patience_;
  std::string split_, metric_;
  bool higher_better_ = true;
  EarlyStopState state_;
};

// Accuracy of `pred` (B, T) on the scored targets of `b`; NaN when it has none.
double scored_accuracy(const int32_t* pred, const Batch& b) {
  int64_t right = 0, scored = 0;
  for (size_t i = 0; i < b.target.size(); ++i)
    if (b.scored[i]) right += pred[i] == b.target[i], ++scored;
  return scored ? double(right) / double(scored) : NAN;
}

// The final evaluation of --eval-lens at length `len`: each eval split on about as many tokens as
// at the trained length (ceil(n · T / T_len) sequences, n its final_eval_n, T and T_len the two
// sequence lengths: a word problem's is len + 1 with its BOS), rows into eval.jsonl.
template <class E>
void eval_at_len(Transformer<E>& model, const TrainConfig& cfg, const Task& trained, int len, int step,
                 const std::string& dir, Progress& progress) {
  const auto task = make_task(task_at_len(cfg.task, len));
  const int64_t T = trained.seq_len(), T_len = task->seq_len();
  const int batch = eval_batch_size(cfg, *task);
  for (int s = 1; s < int(task->splits().size()); ++s) {
    const int n = int(std::max<int64_t>(1, (final_eval_n(cfg, task->splits()[s]) * T + T_len - 1) / T_len));
    const EvalResult r = evaluate(model, *task, s, n, batch);
    append_line(dir + "eval.jsonl", eval_row(r, step, *task, true).dump());
    progress.note(fmt::format("eval {} at len {} acc {:.4f} seq_acc {:.4f}", r.split, len, r.acc, r.seq_acc));
  }
}

// This run's slot in the stacked group of its shape (ctx.stacks), given its initial parameters
// and moments; the group's worker thread takes this thread's device, precision and CPU threads.
template <class E>
std::pair<std::shared_ptr<StackGroup<E>>, int> join_stack(StackPool& pool, const TrainConfig& cfg,
                                                           const Task& task, const ParamStore<E>& params) {
  const int device = E::on_device ? cuda_current_device() : -1;
  const int threads = omp_get_max_threads();
  auto setup = [device, threads, precision = cfg.precision] {
    omp_set_num_threads(threads);
#if PATHBENCH_HAVE_CUDA
    if (device >= 0) cuda::set_device(device), cuda::set_precision(cuda::parse_precision(precision));
#endif
  };
  return pool.join<E>(fmt::format("{}|device {}", stack_shape(cfg), device), params, [&](int capacity) {
    return std::make_shared<StackGroup<E>>(model_config(cfg, task), capacity, cfg.batch, task.seq_len(), setup);
  });
}

// The training loop of run_training on engine E for one data-parallel rank: fills `result`
// (status, error, the stop, evaluation time) and `loss`, `step` (the last step trained). The rank
// trains on examples (s−1)·batch + rank·B + [0, B) of step s, B = batch / world, so the ranks'
// shards make up the one-GPU batch; only rank 0 (the lead) prints, evaluates and writes files
// (all replicas hold the same parameters). With `resume` every rank starts from its state and
// trains from the step after it. With ctx.stacks (one rank) the steps run in a stacked group's
// slot, which `model` mirrors at the evaluations and checkpoints. Returns false when ctx.cancel
// stopped it.
template <class E>
bool train(const TrainConfig& cfg, const Task& task, const DatasetReader* data, const std::string& dir,
           const Shard& shard, const RunContext& ctx, const ResumePoint* resume, nlohmann::json& result,
           double& loss, int& step, const std::function<double()>& elapsed) {
  Transformer<E> model(model_config(cfg, task), cfg.seed);
  TrainStep<E> train_step(model, shard.reducer);
  const int T = task.seq_len(), train_split = 0, B = cfg.batch / shard.world;
  const int eval_batch = eval_batch_size(cfg, task);
  const int64_t tokens_per_step = int64_t(cfg.batch) * T;
  const int done = resume ? resume->state.step : 0;  // steps trained before
  std::optional<Progress> progress;
  if (shard.lead())
    progress.emplace(cfg.steps, fmt::format("{} {}", task.spec().canonical(), cfg.pe), ctx.log, done);
  EarlyStop stopper(cfg, task);
  Batch batch;
  double eval_s = 0;
  if (!resume && !cfg.init_from.empty())  // a resume checkpoint wins over --init-from
    load_params(model, init_weights(cfg).tensors, cfg.init_from + "/" + kModelFile);
  if (resume) {
    restore_resume(model.params, *resume, dir + kResumeFile);
    stopper.restore(resume->state.early_stop);
    eval_s = resume->state.eval_s;
    if (shard.lead()) progress->note(fmt::format("resumed from step {}", done));
  }
  std::shared_ptr<StackGroup<E>> group;  // with ctx.stacks: joined below, once `model` is ready
  int slot = -1;
  struct Leave {  // the slot is free again however the run ends
    std::shared_ptr<StackGroup<E>>& g;
    int& s;
    ~Leave() {
      if (g) g->leave(s);
    }
  } leave{group, slot};
  auto pull = [&] {  // the slot's state into `model`, the slot away until back()
    if (group) group->away(slot), group->pull(slot, model.params);
  };
  auto back = [&] {
    if (group) group->back(slot);
  };

  // The periodic evaluations use periodic_eval_n examples per split; the final one (final = true)
  // each split's final_eval_n and records its per-sequence error counts (EvalResult::seq_errors).
  auto run_evals = [&](int at_step, bool final) {
    const double t0 = elapsed();
    pull();
    nlohmann::json evals = nlohmann::json::object();
    for (int s = 1; s < int(task.splits().size()); ++s) {
      const int n = final ? final_eval_n(cfg, task.splits()[s]) : periodic_eval_n(cfg);
      const EvalResult r = evaluate(model, task, s, n, eval_batch);
      append_line(dir + "eval.jsonl", eval_row(r, at_step, task, final).dump());
      evals[r.split] = r.to_json();
      progress->note(fmt::format("eval {} acc {:.4f} seq_acc {:.4f}", r.split, r.acc, r.seq_acc));
    }
    if (!final) back();
    eval_s += elapsed() - t0;
    return evals;
  };
  auto fill = [&](int s) {  // this rank's shard of the batch of step s
    fill_batch(batch, task, cfg.seed, train_split, uint64_t(s - 1) * cfg.batch + uint64_t(shard.rank) * B, B, data);
  };
  auto cancelled = [&] { return ctx.cancel && ctx.cancel->load(std::memory_order_relaxed); };

  bool training = true;
  std::string stop = "steps";
  try {
    if constexpr (E::on_device) {
      // One forward pass at the evaluation batch first sizes every buffer and scratch arena for it,
      // so evaluations never reallocate: a cudaFree synchronises the whole device and would stall
      // every run packed on it, and the step's graph would be captured again after each evaluation.
      Batch warm;
      fill_batch(warm, task, kEvalSeed, 1, 0, eval_batch);
      model.forward(warm.input.data(), warm.target.data(), eval_batch, T);
    }
    if (ctx.stacks && shard.world == 1 && encoding_info(cfg.pe).stacks) {
      std::tie(group, slot) = join_stack(*ctx.stacks, cfg, task, model.params);  // else trained alone
      progress->note(fmt::format("stacked: slot {} of a group of {}", slot, group->capacity()));
    }
    fill(done + 1);
    int last = done;  // the last step trained
    Batch logged;  // the batch of a logging step, kept while the next one is filled
    std::vector<int32_t> pred;  // (B, T) of a logging step, from the stacked group
    double train_acc = NAN;  // on the scored targets of the last logging step's batch (this rank's shard)
    for (step = done + 1; step <= cfg.steps; ++step) {
      if (cancelled()) return false;
      const double lr = learning_rate(cfg, step);
      const AdamWArgs args{lr, 0.9, 0.95, 1e-8, cfg.weight_decay, step, cfg.grad_clip};
      const bool log = shard.lead() && progress->logs(step);
      // The first step launches the run's kernels for the first time: a launch that waits for an
      // idle device beside packed runs prints a slow-call line here (kernels/dev/pack_notes.md).
      // Not for a stacked run, whose first step waits for its group by design.
      const bool timed = step == done + 1 && cfg.device == "cuda" && !group;
      std::optional<SlowCall> first;
      if (timed) first.emplace("launching a run's first step");
      if (group) {
        group->submit(slot, batch.input.data(), batch.target.data(), args, log);
      } else {
        model.set_batch(batch.input.data(), batch.target.data(), B, T);
        train_step.launch(args);
      }
      first.reset();
      if (log) std::swap(logged, batch);
      if (step < cfg.steps) fill(step + 1);  // on the host, while the step runs on the GPU
      double grad_norm;
      if (timed) first.emplace("waiting for a run's first step");
      std::tie(loss, grad_norm) = group ? group->wait(slot, log ? &pred : nullptr) : train_step.wait();
      first.reset();
      if (log) train_acc = scored_accuracy(group ? pred.data() : model.predictions(), logged);
      last = step;
      if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {  // the same global values on every rank
        result["status"] = "diverged";
        result["error"] = fmt::format("non-finite loss ({}) or gradient norm ({}) at step {}", loss, grad_norm, step);
        break;
      }
      if (!shard.lead()) continue;
      const double tps = tokens_per_step * step / elapsed();
      progress->update(step, loss, train_acc);
      if (log)
        append_line(dir + "metrics.jsonl",
                    nlohmann::json{{"step", step}, {"loss", loss}, {"acc", train_acc}, {"lr", lr},
                                   {"grad_norm", grad_norm}, {"tokens_per_s", tps}, {"elapsed_s", elapsed()}}.dump());
      if (cfg.eval_every > 0 && step % cfg.eval_every == 0 && step < cfg.steps) {
        const std::string why = stopper.update(run_evals(step, false), step);
        if (!why.empty()) {
          stop = why;
          break;
        }
      }
      if (checkpoint_due(cfg, step)) {
        pull();
        write_resume(cfg, model.params, {step, eval_s, elapsed(), stopper.state()});
        back();
      }
    }
    step = last;
    training = false;
    if (result["status"] == "ok" && shard.lead()) {
      if (cancelled()) return false;
      result["eval"] = run_evals(step, true);  // with a stacked group: `model` now holds the slot's state
      const double t0 = elapsed();
      for (const int len : eval_lens(cfg)) eval_at_len(model, cfg, task, len, step, dir, *progress);
      eval_s += elapsed() - t0;
      save_checkpoint(model, dir + "model.safetensors");
    }
  } catch (const std::exception& e) {
    if (training && shard.world > 1) {  // the other ranks wait for this one in NCCL: end them all
      fmt::print(stderr, "pathbench: rank {} failed at step {}: {}\n", shard.rank, step, e.what());
      std::_Exit(1);
    }
    result["status"] = "failed";
    result["error"] = e.what();
  }
  // The stop: "steps" (the budget), the rule or patience that ended it early, or the status
  // ("diverged", "failed") of a run that ended otherwise.
  if (result["status"] != "ok") stop = result["status"].get<std::string>();
  result["stop"] = stop;
  result["stopped_at_step"] = stop == "steps" ? nlohmann::json(nullptr) : nlohmann::json(step);
  result["eval_s"] = eval_s;
  result["eval_batch"] = eval_batch;
  if (progress) progress->finish();
  return true;
}

}  // namespace

std::string stack_shape(const TrainConfig& cfg) {
  return fmt::format("{}|{}|layers {}|d {}|heads {}|mlp {}|kv_conv {}|batch {}|{}", make_task(cfg.task)->spec().canonical(),
                     cfg.pe, cfg.layers, cfg.d_model, cfg.heads, cfg.mlp_ratio, cfg.kv_conv, cfg.batch, cfg.precision);
}

void fill_batch(Batch& b, const Task& task, uint64_t seed, int split, uint64_t first_index, int B,
                const DatasetReader* data) {
  const int T = task.seq_len();
  b.input.resize(size_t(B) * T);
  b.target.resize(b.input.size());
  b.scored.resize(b.input.size());
#pragma omp parallel for schedule(static)
  for (int i = 0; i < B; ++i) {
    const size_t o = size_t(i) * T;
    const ExampleView out{b.input.data() + o, b.target.data() + o, b.scored.data() + o};
    if (data)
      data->read((first_index + i) % data->n(), out);
    else
      task.generate(seed, split, first_index + i, out);
  }
}

std::string select_device(const TrainConfig& cfg) {
  check_device_name(cfg.device);
  const bool gpu = cuda_built() && cuda_device_count() > 0;
  if (cfg.device == "cuda" && !cuda_built())
    fail("--device cuda: this build has no CUDA engine (build with nvcc present, -DPATHBENCH_CUDA=ON)");
  if (cfg.device == "cuda" && !gpu) fail("--device cuda: no CUDA device is visible on this machine");
  const std::string device = cfg.device == "cpu" || !gpu ? "cpu" : "cuda";
  if (cfg.gpus > 1 && cfg.gpus > cuda_device_count())
    fail("--gpus {}: {} CUDA device(s) visible on this machine", cfg.gpus, cuda_device_count());
  if (device == "cpu" && cfg.precision != "fp32")
    fail("--precision {} needs the CUDA engine, and no CUDA device is visible (the CPU engine computes in fp32)",
         cfg.precision);
  if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
#if PATHBENCH_HAVE_CUDA
  if (device == "cuda") cuda::set_precision(cuda::parse_precision(cfg.precision));  // this thread's
#endif
  return device;
}

EvalResult EvalTally::result() const {
  EvalResult r = r_;
  r.acc = r.n ? double(correct_) / r.n : 0.0;
  r.seq_acc = double(seq_ok_) / r.n_seqs;
  r.loss = n_targets_ ? loss_sum_ / n_targets_ : 0.0;
  return r;
}

template <class E>
EvalResult evaluate(Transformer<E>& model, const Task& task, int split, int n_examples, int batch,
                    std::vector<WrongSequence>* wrong) {
  EvalTally tally(task.splits()[split], task);
  const int T = task.seq_len();
  Batch b;
  for (int first = 0; first < n_examples; first += batch) {
    const int B = std::min(batch, n_examples - first);
    fill_batch(b, task, kEvalSeed, split, first, B);
    model.forward(b.input.data(), b.target.data(), B, T);
    tally.add(b, B, T, model.predictions(), model.row_losses(), first, wrong);
  }
  return tally.result();
}

template <class E>
void save_checkpoint(const Transformer<E>& model, const std::string& path) {
  const auto params = model.params.to_host();
  TensorMap m;
  for (const auto& e : model.params.entries) {
    Tensor t;
    t.shape = e.spec.shape;
    t.data.assign(params.begin() + e.offset, params.begin() + e.offset + e.size);
    m.emplace(e.spec.name, std::move(t));
  }
  write_safetensors(path, m, {{"format", "pathbench"}});
}

template <class E>
void load_checkpoint(Transformer<E>& model, const std::string& path) {
  load_params(model, read_safetensors(path), path);
}

template <class E>
void load_params(Transformer<E>& model, const TensorMap& m, const std::string& path) {
  std::vector<typename E::Scalar> params(model.params.size());
  for (const auto& e : model.params.entries) {
    const Tensor& t = require_tensor(m, e.spec.name, e.spec.shape, path);
    std::copy(t.data.begin(), t.data.end(), params.begin() + e.offset);
  }
  model.params.from_host(params);
}

#define PB_INSTANTIATE(E)                                                                               \
  template EvalResult evaluate<E>(Transformer<E>&, const Task&, int, int, int, std::vector<WrongSequence>*); \
  template void save_checkpoint<E>(const Transformer<E>&, const std::string&);                          \
  template void load_checkpoint<E>(Transformer<E>&, const std::string&);                          \
  template void load_params<E>(Transformer<E>&, const TensorMap&, const std::string&);
PB_INSTANTIATE(Cpu32)
#if PATHBENCH_HAVE_CUDA
PB_INSTANTIATE(CudaEngine)
#endif
#undef PB_INSTANTIATE

std::unique_ptr<DatasetReader> open_training_data(const TrainConfig& cfg) {
  if (cfg.data.empty()) return nullptr;
  auto data = std::make_unique<DatasetReader>(cfg.data);
  const std::string task = make_task(cfg.task)->spec().canonical();
  if (data->spec() != task || data->split() != "train")
    fail("--data '{}' holds split '{}' of task '{}'; --task is '{}' (its train split is needed)", cfg.data,
         data->split(), data->spec(), task);
  return data;
}

void check_before_writing(const TrainConfig& cfg) {
  select_device(cfg);
  open_training_data(cfg);
  if (!cfg.init_from.empty()) init_weights(cfg);  // the shapes of every tensor
}

int run_training(const TrainConfig& cfg, const RunContext& ctx, const ResumePoint* resume) {
  const auto t0 = std::chrono::steady_clock::now();
  const double before = resume ? resume->state.elapsed_s : 0;  // the training time of earlier processes
  const std::function<double()> elapsed = [&] {
    return before + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const std::string device = select_device(cfg);
  const auto task = make_task(cfg.task);
  const std::unique_ptr<DatasetReader> data = open_training_data(cfg);
  const std::string dir = cfg.out + "/";
  const bool lead = cfg.proc_id <= 0;  // the process of rank 0 alone writes the run directory
  const std::string attempt = new_attempt_id();
  if (lead) {
    fs::create_directories(cfg.out);
    for (const char* f : {"result.json", "model.safetensors"}) fs::remove(dir + f);
    if (resume) {  // the logs as they were at the checkpoint
      for (const char* f : {"metrics.jsonl", "eval.jsonl"}) truncate_log(dir + f, resume->state.step);
    } else {
      for (const char* f : {"metrics.jsonl", "eval.jsonl", kResumeFile}) fs::remove(dir + f);
    }
    auto config = to_json(cfg);
    config["run_id"] = run_id(cfg);
    write_file_atomic(dir + "config.json", config.dump(2) + "\n");
    auto meta = meta_json(cfg, device);
    if (resume) meta["resumed_from_step"] = resume->state.step;
    meta["attempt"] = attempt;
    write_file_atomic(dir + "meta.json", meta.dump(2) + "\n");
  }

  nlohmann::json result = {{"run_id", run_id(cfg)}, {"status", "ok"}, {"error", nullptr}, {"attempt", attempt}};
  double loss = 0;
  int step = 0;
  bool finished = true;
  const nlohmann::json start = result;  // each rank fills its own copy; the process keeps its first rank's
  run_data_parallel(cfg, device, [&](const Shard& shard) {
    nlohmann::json r = start;
    double l = 0;
    int s = 0;
    bool f = true;
    with_engine(device, [&](auto engine) {
      f = train<decltype(engine)>(cfg, *task, data.get(), dir, shard, ctx, resume, r, l, s, elapsed);
    });
    if (shard.rank == std::max(cfg.proc_id, 0) * cfg.gpus) result = r, loss = l, step = s, finished = f;
  });
  if (!finished) return kRunCancelled;
  if (!lead) return result["status"] == "ok" ? 0 : 1;
  result["steps"] = step;
  result["final_loss"] = std::isfinite(loss) ? nlohmann::json(loss) : nlohmann::json(nullptr);
  result["wall_s"] = elapsed();
  write_file_atomic(dir + "result.json", result.dump(2) + "\n");
  fs::remove(dir + kResumeFile);  // a finished run keeps model.safetensors alone
  if (result["status"] != "ok")
    fmt::print(ctx.log, "pathbench: run {}: {}\n", result["status"].get<std::string>(), result["error"].get<std::string>());
  return result["status"] == "ok" ? 0 : 1;
}

}  // namespace pb
