#include "runners/sweep_estimate.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <thread>

#include "runners/sweep_status.h"
#include "runners/train_step.h"
#include "runners/trainer.h"
#if PATHBENCH_HAVE_CUDA
#include "core/cuda/runtime.h"
#endif

namespace pb {
namespace {

constexpr int kWarmupSteps = 5, kMeasureSteps = 20;

std::string shape_of(const TrainConfig& c) {
  return fmt::format("{} {} L{} d{} H{} mlp{} B{} {} {}{}", c.task, c.pe, c.layers, c.d_model, c.heads, c.mlp_ratio,
                     c.batch, c.precision, c.device, c.kv_conv ? " kv_conv" : "");
}

struct Rate {
  double steps_per_s = 0;        // all K copies together
  double eval_ms_per_example = 0;  // one evaluation forward of the eval batch, per example
};

// K copies of `cfg` (seeds 0..K−1) trained side by side on `device` (−1: CPU), one thread each.
template <class E>
Rate measure(const TrainConfig& cfg, int device, int k) {
  const auto task = make_task(cfg.task);
  const int T = task->seq_len(), eval_batch = eval_batch_size(cfg, *task);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  double eval_ms = 0, t0 = 0;  // eval_ms: thread 0's; t0: set by the last thread ready, read after the joins
  std::vector<std::thread> threads;
  for (int i = 0; i < k; ++i)
    threads.emplace_back([&, i] {
#if PATHBENCH_HAVE_CUDA
      if (device >= 0) cuda::set_device(device);
#endif
      select_device(cfg);
      Transformer<E> model(model_config(cfg, *task), cfg.seed + uint64_t(i));
      TrainStep<E> step(model);
      Batch batch;
      auto one = [&](int s) {
        fill_batch(batch, *task, cfg.seed + uint64_t(i), 0, uint64_t(s) * cfg.batch, cfg.batch);
        model.set_batch(batch.input.data(), batch.target.data(), cfg.batch, T);
        step.launch(AdamWArgs{cfg.lr, 0.9, 0.95, 1e-8, cfg.weight_decay, s, cfg.grad_clip});
        step.wait();
      };
      if (i == 0) {  // the eval batch first, so its buffers exist before the steps are captured
        fill_batch(batch, *task, kEvalSeed, 1, 0, eval_batch);
        for (int r = 0; r < 2; ++r) {
          const double a = now_s();
          model.forward(batch.input.data(), batch.target.data(), eval_batch, T);
          model.predictions();
          eval_ms = (now_s() - a) * 1e3 / eval_batch;  // the second (warm) one counts
        }
      }
      for (int s = 1; s <= kWarmupSteps; ++s) one(s);
      if (++ready == k) t0 = now_s(), go = true;
      while (!go) std::this_thread::yield();
      for (int s = 1; s <= kMeasureSteps; ++s) one(kWarmupSteps + s);
    });
  for (auto& t : threads) t.join();
  return {k * kMeasureSteps / (now_s() - t0), eval_ms};
}

// Examples evaluated over a run (periodic evaluations before `steps`, then the final one).
double eval_examples(const TrainConfig& c, const Task& task) {
  const double periodic = c.eval_every > 0 ? double((c.steps - 1) / c.eval_every) : 0.0;
  double n = 0;
  for (size_t s = 1; s < task.splits().size(); ++s) n += periodic * periodic_eval_n(c) + final_eval_n(c, task.splits()[s]);
  return n;
}

}  // namespace

void print_estimate(const std::vector<Job>& jobs, const std::vector<int>& slot_devices) {
  if (jobs.empty()) return fmt::print("nothing to run\n");
  std::map<std::string, std::vector<const Job*>> shapes;
  for (const Job& j : jobs) shapes[shape_of(j.cfg)].push_back(&j);
  const int device = slot_devices.front();
  const int per_device = int(std::count(slot_devices.begin(), slot_devices.end(), device));
  const int n_devices = int(slot_devices.size()) / per_device;
  fmt::print("| shape | runs | pack | packed steps/s | eval ms/example | projected s |\n|---|---|---|---|---|---|\n");
  double total = 0;
  for (const auto& [shape, group] : shapes) {
    const TrainConfig& cfg = group.front()->cfg;
    const int k = std::min<int>(per_device, int(group.size()));
    const Rate r = with_engine(cfg.device == "cpu" || device < 0 ? "cpu" : "cuda",
                               [&](auto e) { return measure<decltype(e)>(cfg, device, k); });
    const auto task = make_task(cfg.task);
    double steps = 0, evals = 0;
    for (const Job* j : group) steps += j->cfg.steps, evals += eval_examples(j->cfg, *task);
    // Steps at the packed rate; evaluations one run at a time per slot, side by side with the rest.
    const double s = (steps / r.steps_per_s + evals * r.eval_ms_per_example / 1e3 / k) / n_devices;
    total += s;
    fmt::print("| {} | {} | {} | {:.0f} | {:.4f} | {:.0f} |\n", shape, group.size(), k, r.steps_per_s,
               r.eval_ms_per_example, s);
  }
  fmt::print("\nprojected: {} on {} device(s) for {} runs (every run to its full steps; early stopping and the "
             "depth search only shorten it)\n", duration_text(total), n_devices, jobs.size());
}

}  // namespace pb
