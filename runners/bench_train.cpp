// `pathbench bench train`: median time of a training step (data generation, forward, backward,
// AdamW) after warm-up steps, on the CPU. Ends with `ms_per_step=<x> tokens_per_s=<y>`.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>

#include "kernels/error.h"
#include "kernels/ops.h"
#include "runners/commands.h"
#include "runners/trainer.h"

namespace pb {

void add_bench_train_command(CLI::App& bench) {
  struct Opts {
    TrainConfig cfg;
    int warmup_steps = 3, measure_steps = 10;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = bench.add_subcommand("train", "Time training steps of one model configuration");
  add_train_options(*cmd, o->cfg);
  cmd->add_option("--warmup-steps", o->warmup_steps, "untimed steps first")->capture_default_str();
  cmd->add_option("--measure-steps", o->measure_steps, "timed steps (median reported)")->capture_default_str();
  cmd->callback([o] {
    TrainConfig& cfg = o->cfg;
    resolve(cfg);
    if (cfg.device == "cuda") fail("bench train --device cuda: the CUDA engine is not written yet");
    if (o->measure_steps < 1 || o->warmup_steps < 0) fail("--measure-steps must be >= 1 and --warmup-steps >= 0");
    if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
    const auto task = make_task(cfg.task);
    Transformer<float> model(model_config(cfg, *task), cfg.seed);
    auto& P = model.params;
    const int T = task->seq_len(), B = cfg.batch;
    std::vector<int32_t> input(size_t(B) * T), target(input.size());
    std::vector<uint8_t> scored(input.size());
    std::vector<double> ms;
    for (int step = 1; step <= o->warmup_steps + o->measure_steps; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for
      for (int i = 0; i < B; ++i) {
        const size_t off = size_t(i) * T;
        task->generate(cfg.seed, 0, uint64_t(step) * B + i, {input.data() + off, target.data() + off, scored.data() + off});
      }
      std::fill(P.grads.begin(), P.grads.end(), 0.0f);
      model.forward(input.data(), target.data(), B, T);
      model.backward();
      adamw_update(P.params.data(), P.m.data(), P.v.data(), P.grads.data(), P.decay_mask.data(), P.size(),
                   AdamWArgs{cfg.lr, 0.9, 0.95, 1e-8, cfg.weight_decay, step});
      if (step > o->warmup_steps)
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    fmt::print("bench train task={} pe={} layers={} d_model={} heads={} batch={} seq_len={} threads={} "
               "params={} ms_per_step={:.2f} tokens_per_s={:.0f}\n",
               cfg.task, cfg.pe, cfg.layers, cfg.d_model, cfg.heads, B, T, omp_get_max_threads(), P.size(), med,
               B * T / (med / 1000.0));
  });
}

}  // namespace pb
