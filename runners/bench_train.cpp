// `pathbench bench train`: median wall time of a training step (set the batch, forward, backward,
// AdamW, and the next batch's data generation, which on the GPU overlaps the step) after warm-up
// steps, on the chosen device. Ends with `ms_per_step=<x> tokens_per_s=<y>`. With --gpus N every
// rank runs its shard of the global --batch (data parallelism, runners/data_parallel.h) and rank 0
// prints; tokens_per_s counts the global batch. With --stack R it times one run, then R stacked
// runs (seeds seed … seed + R − 1, a --batch each; models/transformer.h), and prints both and
// stack_speedup = R · (one run's step) / (the stacked step): the stacked engine's gain per run.
// With --head-anchor (a task with Task::target_every() > 1) it first times the same model with its
// LM head at every position, the anchor, then as trained, and prints head_speedup = anchor / step.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>

#include "core/device.h"
#include "core/error.h"
#include "runners/commands.h"
#include "runners/data_parallel.h"
#include "runners/train_step.h"
#include "runners/trainer.h"

namespace pb {
namespace {

struct BenchOpts {
  TrainConfig cfg;
  int warmup_steps = 3, measure_steps = 10;
  int stack = 1;
  bool head_anchor = false;
};

// The median step time in ms of R stacked runs (R = 1: one model), printed by the lead rank; with
// full_head, of the model with its head at every position (ModelConfig::target_every = 1).
template <class E>
double time_steps(const BenchOpts& o, const std::string& device, const Shard& shard, int R, bool full_head = false) {
  const TrainConfig& cfg = o.cfg;
  const auto task = make_task(cfg.task);
  std::vector<uint64_t> seeds;
  for (int r = 0; r < R; ++r) seeds.push_back(cfg.seed + uint64_t(r));
  ModelConfig mc = model_config(cfg, *task);
  if (full_head) mc.target_every = 1;
  Transformer<E> model(mc, seeds);
  TrainStep<E> step_runner(model, shard.reducer);
  const int T = task->seq_len(), B = cfg.batch / shard.world;
  std::vector<Batch> batches(R);
  std::vector<int32_t> input, target;  // (R·B, T), run r's batch the r-th B
  auto fill = [&](int step) {  // this rank's shard of step's batch, of each run
    input.clear(), target.clear();
    for (int r = 0; r < R; ++r) {
      fill_batch(batches[r], *task, seeds[r], 0, uint64_t(step) * cfg.batch + uint64_t(shard.rank) * B, B);
      input.insert(input.end(), batches[r].input.begin(), batches[r].input.end());
      target.insert(target.end(), batches[r].target.begin(), batches[r].target.end());
    }
  };
  std::vector<double> ms;
  std::vector<AdamWArgs> args(R, AdamWArgs{cfg.lr, 0.9, 0.95, 1e-8, cfg.weight_decay, 1, cfg.grad_clip});
  fill(1);
  for (int step = 1; step <= o.warmup_steps + o.measure_steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    model.set_batch(input.data(), target.data(), R * B, T);
    for (auto& a : args) a.step = step;
    step_runner.launch(args);
    fill(step + 1);
    step_runner.wait_runs();
    if (step > o.warmup_steps)
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  if (shard.lead())
    fmt::print("bench train device={} gpu=\"{}\" gpus={} precision={} task={} pe={} layers={} d_model={} heads={} "
               "batch={} seq_len={} vocab={} threads={} stack={} params={} ms_per_step={:.3f} tokens_per_s={:.0f} "
               "target_every={}\n",
               device, device == "cuda" ? cuda_device_name(0) : "", shard.world, cfg.precision, cfg.task,
               cfg.pe, cfg.layers, cfg.d_model, cfg.heads, cfg.batch, T, task->vocab_size(), omp_get_max_threads(),
               R, model.params.size(), med, R * cfg.batch * T / (med / 1000.0), mc.target_every);
  return med;
}

}  // namespace

void add_bench_train_command(CLI::App& bench) {
  auto o = std::make_shared<BenchOpts>();
  auto* cmd = bench.add_subcommand("train", "Time training steps of one model configuration");
  add_train_options(*cmd, o->cfg);
  cmd->add_option("--warmup-steps", o->warmup_steps, "untimed steps first")->capture_default_str();
  cmd->add_option("--measure-steps", o->measure_steps, "timed steps (median reported)")->capture_default_str();
  cmd->add_option("--stack", o->stack, "also time this many stacked runs, against one")->capture_default_str();
  cmd->add_flag("--head-anchor", o->head_anchor,
                "first time the model with its LM head at every position (the task's targets are at every "
                "k-th), the anchor of head_speedup");
  cmd->callback([o] {
    resolve(o->cfg);
    if (o->measure_steps < 1 || o->warmup_steps < 0) fail("--measure-steps must be >= 1 and --warmup-steps >= 0");
    if (o->stack < 1 || o->stack > 4096) fail("--stack must be in [1, 4096], got {}", o->stack);
    if (o->stack > 1 && world_size(o->cfg) > 1) fail("--stack times one device; leave out --gpus and --procs");
    if (o->head_anchor && make_task(o->cfg.task)->target_every() == 1)
      fail("--head-anchor: task '{}' may put targets at every position; it has no head rows to compare", o->cfg.task);
    const std::string device = select_device(o->cfg);
    run_data_parallel(o->cfg, device, [&](const Shard& shard) {
      with_engine(device, [&](auto engine) {
        using E = decltype(engine);
        const double anchor = o->head_anchor ? time_steps<E>(*o, device, shard, 1, true) : 0;
        const double one = time_steps<E>(*o, device, shard, 1);
        if (o->head_anchor && shard.lead()) fmt::print("bench train head_speedup={:.2f}\n", anchor / one);
        if (o->stack == 1) return;
        const double all = time_steps<E>(*o, device, shard, o->stack);
        fmt::print("bench train stack={} stack_speedup={:.2f}\n", o->stack, o->stack * one / all);
      });
    });
  });
}

}  // namespace pb
