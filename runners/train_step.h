// One optimizer step on an engine: zero the gradients, forward, backward, Σ g², then AdamW with
// gradient-norm clipping. With a Reducer (data parallelism, runners/data_parallel.h) the shard's
// loss scale becomes the global batch's after the forward and the gradients are summed over the
// ranks after the backward, before Σ g², so the clip norm is the global one and every rank takes
// the same AdamW step. On the GPU the first four are captured once in a CUDA graph and replayed
// (captured anew after device memory was reallocated, e.g. by a larger evaluation batch); the
// AdamW launch, whose learning rate and step change, stays outside the graph. launch() returns
// at once on the GPU, so the host can prepare the next batch while the step runs. A model of
// stacked runs (models/transformer.h) takes one step for every run: its own loss, gradient norm,
// clipping and AdamW arguments (one AdamW launch per run's parameter block).
#pragma once
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/error.h"
#include "models/transformer.h"
#if PATHBENCH_HAVE_CUDA
#include "core/cuda/runtime.h"
#endif

namespace pb {

// Sums over data-parallel ranks, enqueued inside the step (and so captured in its graph).
struct Reducer {
  virtual ~Reducer() = default;
  // The shard's mean loss and backward scale → the global batch's (Transformer::LossState).
  virtual void loss(float* mean, float* scale, const int32_t* targets, int64_t n) = 0;
  virtual void grads(float* g, int64_t n) = 0;  // g ← Σ over ranks of g
};

template <class E>
class TrainStep {
 public:
  using S = typename E::Scalar;

  explicit TrainStep(Transformer<E>& model, Reducer* reducer = nullptr)
      : model_(model), reducer_(reducer), R_(model.runs()) {
    if (reducer && R_ > 1) fail("data parallelism trains one run per model, not {} stacked runs", R_);
    stats_.resize(2 * R_);
  }

  // Enqueues the step for the batch of the last model.set_batch(); run r's AdamW takes args[r].
  // With `active`, only the runs r with active[r] take their AdamW step: the others' parameters and
  // moments stay as they are (a stacked group's slot that is free or away, runners/stack_group.h).
  void launch(std::span<const AdamWArgs> args, std::span<const uint8_t> active = {}) {
    if (int(args.size()) != R_) fail("train step: {} AdamW arguments for {} stacked runs", args.size(), R_);
    if constexpr (E::on_device) launch_graph();
    else body();
    auto& P = model_.params;
    const int64_t n = P.run_size();
    for (int r = 0; r < R_; ++r)
      if (active.empty() || active[r])
        E::adamw_update(P.params.data() + r * n, P.m.data() + r * n, P.v.data() + r * n, P.grads.data() + r * n,
                        P.decay_mask.data() + r * n, n, args[r], stats_.data() + R_ + r);
  }
  void launch(const AdamWArgs& args) { launch(std::span<const AdamWArgs>(&args, 1)); }

  // Waits for the step: each run's loss and gradient norm (before clipping), on the host, in one copy.
  std::vector<std::pair<double, double>> wait_runs() {
    std::vector<S> stats(2 * R_);
    E::download(stats.data(), stats_.data(), stats.size());
    std::vector<std::pair<double, double>> out(R_);
    for (int r = 0; r < R_; ++r) out[r] = {double(stats[r]), std::sqrt(double(stats[R_ + r]))};
    return out;
  }
  std::pair<double, double> wait() { return wait_runs()[0]; }  // run 0's

 private:
  void body() {
    auto& P = model_.params;
    E::zero(P.grads.data(), P.grads.size());
    model_.run_forward();
    if (reducer_) {
      const auto l = model_.loss_state();
      reducer_->loss(l.mean, l.scale, l.targets, l.n);
    }
    model_.backward();
    if (reducer_) reducer_->grads(P.grads.data(), P.size());
    E::copy(stats_.data(), model_.loss_buffer(), R_);
    const int64_t n = P.run_size();
    for (int r = 0; r < R_; ++r)  // ‖g‖² of each run, non-finite if any of its g is
      E::sum_squares(stats_.data() + R_ + r, P.grads.data() + r * n, n);
  }

#if PATHBENCH_HAVE_CUDA
  // Eager while device memory is still moving, then captured once and replayed.
  void launch_graph() {
    const uint64_t now = cuda::allocation_count();
    if (!cuda::graphs_enabled()) {
      body();
    } else if (graph_.ready() && now == captured_at_) {
      graph_.launch();
    } else if (now == eager_at_) {
      graph_.begin();
      try {
        body();
      } catch (...) {
        graph_.abort();
        throw;
      }
      graph_.end();
      captured_at_ = cuda::allocation_count();
      graph_.launch();
    } else {
      graph_.reset();
      body();
      eager_at_ = cuda::allocation_count();
    }
  }
  cuda::Graph graph_;
  uint64_t captured_at_ = ~uint64_t(0), eager_at_ = ~uint64_t(0);
#else
  void launch_graph() { body(); }
#endif

  Transformer<E>& model_;
  Reducer* reducer_;
  int R_;                                 // stacked runs
  typename E::template Buffer<S> stats_;  // (2, R): each run's loss, then each run's ‖g‖²
};

}  // namespace pb
