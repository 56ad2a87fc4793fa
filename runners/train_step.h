// One optimizer step on an engine: zero the gradients, forward, backward, Σ g², then AdamW with
// gradient-norm clipping. With a Reducer (data parallelism, runners/data_parallel.h) the shard's
// loss scale becomes the global batch's after the forward and the gradients are summed over the
// ranks after the backward, before Σ g², so the clip norm is the global one and every rank takes
// the same AdamW step. On the GPU the first four are captured once in a CUDA graph and replayed
// (captured anew after device memory was reallocated, e.g. by a larger evaluation batch); the
// AdamW launch, whose learning rate and step change, stays outside the graph. launch() returns
// at once on the GPU, so the host can prepare the next batch while the step runs.
#pragma once
#include <cmath>
#include <cstdint>
#include <utility>

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

  explicit TrainStep(Transformer<E>& model, Reducer* reducer = nullptr) : model_(model), reducer_(reducer) {
    stats_.resize(2);
  }

  // Enqueues the step for the batch of the last model.set_batch().
  void launch(const AdamWArgs& args) {
    if constexpr (E::on_device) launch_graph();
    else body();
    auto& P = model_.params;
    E::adamw_update(P.params.data(), P.m.data(), P.v.data(), P.grads.data(), P.decay_mask.data(), P.size(),
                    args, stats_.data() + 1);
  }

  // Waits for the step: its loss and gradient norm (before clipping), on the host, in one copy.
  std::pair<double, double> wait() {
    S stats[2] = {0, 0};
    E::download(stats, stats_.data(), 2);
    return {double(stats[0]), std::sqrt(double(stats[1]))};
  }

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
    E::copy(stats_.data(), model_.loss_buffer(), 1);
    E::sum_squares(stats_.data() + 1, P.grads.data(), P.size());  // ‖g‖², non-finite if any g is
  }

#if PATHBENCH_HAVE_CUDA
  // Eager while device memory is still moving, then captured once and replayed.
  void launch_graph() {
    const uint64_t now = cuda::allocation_count();
    if (graph_.ready() && now == captured_at_) {
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
  typename E::template Buffer<S> stats_;  // (2): the step's loss, ‖g‖²
};

}  // namespace pb
