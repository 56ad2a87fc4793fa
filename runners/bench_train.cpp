// `pathbench bench train`: median wall time of a training step (set the batch, forward, backward,
// AdamW, and the next batch's data generation, which on the GPU overlaps the step) after warm-up
// steps, on the chosen device. Ends with `ms_per_step=<x> tokens_per_s=<y>`. With --gpus N every
// rank runs its shard of the global --batch (data parallelism, runners/data_parallel.h) and rank 0
// prints; tokens_per_s counts the global batch.
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
};

template <class E>
void time_steps(const BenchOpts& o, const std::string& device, const Shard& shard) {
  const TrainConfig& cfg = o.cfg;
  const auto task = make_task(cfg.task);
  Transformer<E> model(model_config(cfg, *task), cfg.seed);
  TrainStep<E> step_runner(model, shard.reducer);
  const int T = task->seq_len(), B = cfg.batch / shard.world;
  Batch batch;
  auto fill = [&](int step) {  // this rank's shard of step's batch
    fill_batch(batch, *task, cfg.seed, 0, uint64_t(step) * cfg.batch + uint64_t(shard.rank) * B, B);
  };
  std::vector<double> ms;
  fill(1);
  for (int step = 1; step <= o.warmup_steps + o.measure_steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    model.set_batch(batch.input.data(), batch.target.data(), B, T);
    step_runner.launch(AdamWArgs{cfg.lr, 0.9, 0.95, 1e-8, cfg.weight_decay, step, cfg.grad_clip});
    fill(step + 1);
    step_runner.wait();
    if (step > o.warmup_steps)
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  if (!shard.lead()) return;
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  fmt::print("bench train device={} gpu=\"{}\" gpus={} precision={} task={} pe={} layers={} d_model={} heads={} "
             "batch={} seq_len={} vocab={} threads={} params={} ms_per_step={:.3f} tokens_per_s={:.0f}\n",
             device, device == "cuda" ? cuda_device_name(0) : "", shard.world, cfg.precision, cfg.task,
             cfg.pe, cfg.layers, cfg.d_model, cfg.heads, cfg.batch, T, task->vocab_size(), omp_get_max_threads(),
             model.params.size(), med, cfg.batch * T / (med / 1000.0));
}

}  // namespace

void add_bench_train_command(CLI::App& bench) {
  auto o = std::make_shared<BenchOpts>();
  auto* cmd = bench.add_subcommand("train", "Time training steps of one model configuration");
  add_train_options(*cmd, o->cfg);
  cmd->add_option("--warmup-steps", o->warmup_steps, "untimed steps first")->capture_default_str();
  cmd->add_option("--measure-steps", o->measure_steps, "timed steps (median reported)")->capture_default_str();
  cmd->callback([o] {
    resolve(o->cfg);
    if (o->measure_steps < 1 || o->warmup_steps < 0) fail("--measure-steps must be >= 1 and --warmup-steps >= 0");
    const std::string device = select_device(o->cfg);
    run_data_parallel(o->cfg, device, [&](const Shard& shard) {
      with_engine(device, [&](auto engine) { time_steps<decltype(engine)>(*o, device, shard); });
    });
  });
}

}  // namespace pb
