// The stacked engine (`sweep --pack K --stack N`): runs of one shape train as the slots of one
// stacked model (models/transformer.h, Runs in kernels/ops.h), whose step a worker thread of the
// group takes for all of them at once: one batched GEMM and one kernel per op instead of one per
// run. Each run keeps its own thread and everything else of run_training (its data, schedule,
// evaluations, early stopping, checkpoints and files); per step it hands its slot a batch and its
// AdamW arguments (submit) and gets back its loss and gradient norm (wait).
//
// A run's own one-run model mirrors its slot at the sync points: pushed in when it joins (so its
// initialisation, --init-from or resume checkpoint is the slot's), pulled out before each
// evaluation, checkpoint and the final save. While a run is away (evaluating, checkpointing) the
// group steps on without it: its rows carry no target and its AdamW step is skipped, so its slot
// does not change. A step waits for every run that is training to submit: runs step in lockstep,
// each at its own step number.
//
// Slot states: Free → (join) Training → (submit) Submitted → (the group's step) Done → (wait)
// Training; Training ↔ Away (away, back); any → Free (leave). A join or pull copies a slot's block
// between two steps of the group, never during one.
#pragma once
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "runners/train_step.h"

namespace pb {

class StackGroupBase {
 public:
  virtual ~StackGroupBase() = default;
};

template <class E>
class StackGroup final : public StackGroupBase {
 public:
  using S = typename E::Scalar;

  // `capacity` slots of model `cfg`, each a batch of B sequences of T tokens. setup() runs first
  // on the worker thread (the device, precision and threads of the runs).
  StackGroup(const ModelConfig& cfg, int capacity, int B, int T, std::function<void()> setup)
      : R_(capacity), B_(B), T_(T), state_(capacity, Free), args_(capacity), want_pred_(capacity),
        loss_(capacity), norm_(capacity), tokens_(size_t(capacity) * B * T), targets_(tokens_.size()),
        pred_(tokens_.size()) {
    worker_ = std::thread([this, cfg, setup = std::move(setup)] { work(cfg, setup); });
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return model_ || error_; });
    if (error_) {
      lock.unlock();
      worker_.join();
      std::rethrow_exception(error_);
    }
  }
  ~StackGroup() override {
    {
      const std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  // A free slot, given the parameters and AdamW moments of a run (a one-run store), or -1 when
  // every slot is taken.
  int join(const ParamStore<E>& from) {
    std::unique_lock lock(mutex_);
    check();
    const auto it = std::find(state_.begin(), state_.end(), Free);
    if (it == state_.end()) return -1;
    const int slot = int(it - state_.begin());
    state_[slot] = Away;  // not stepped until its parameters are in
    lock.unlock();
    between_steps([&] { copy_block(model_->params, slot, from, 0); });
    back(slot);
    return slot;
  }
  int capacity() const { return R_; }
  void leave(int slot) { set(slot, Free); }
  void away(int slot) { set(slot, Away); }
  void back(int slot) { set(slot, Training); }

  // The slot's parameters and AdamW moments into `to` (a one-run store); the slot must be away.
  void pull(int slot, ParamStore<E>& to) {
    between_steps([&] { copy_block(to, 0, model_->params, slot); });
  }

  // Hands the slot's batch (B, T) and AdamW arguments to the next step of the group; with
  // want_pred, wait() also returns the predicted tokens.
  void submit(int slot, const int32_t* tokens, const int32_t* targets, const AdamWArgs& args, bool want_pred) {
    const size_t n = size_t(B_) * T_, o = size_t(slot) * n;
    {
      const std::lock_guard lock(mutex_);
      check();
      if (state_[slot] != Training) fail("stacked group: slot {} submitted while not training", slot);
      std::memcpy(tokens_.data() + o, tokens, n * sizeof(int32_t));
      std::memcpy(targets_.data() + o, targets, n * sizeof(int32_t));
      args_[slot] = args, want_pred_[slot] = want_pred;
      state_[slot] = Submitted;
    }
    cv_.notify_all();
  }
  // Waits for the step of the last submit(): the run's loss and gradient norm (before clipping),
  // and its predicted tokens (B, T) into `pred` when they were asked for.
  std::pair<double, double> wait(int slot, std::vector<int32_t>* pred) {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return state_[slot] == Done || error_; });
    check();
    state_[slot] = Training;
    if (pred) {
      const size_t n = size_t(B_) * T_;
      pred->assign(pred_.begin() + slot * n, pred_.begin() + (slot + 1) * n);
    }
    return {loss_[slot], norm_[slot]};
  }

 private:
  enum State { Free, Training, Away, Submitted, Done };

  void set(int slot, State s) {
    {
      const std::lock_guard lock(mutex_);
      state_[slot] = s;
    }
    cv_.notify_all();
  }
  void check() const {  // under the lock
    if (error_) std::rethrow_exception(error_);
  }
  // A step is due when a run has submitted, no run that trains is still to submit, and no copy is
  // under way.
  bool due() const {
    return copying_ == 0 && std::count(state_.begin(), state_.end(), Submitted) > 0 &&
           std::count(state_.begin(), state_.end(), Training) == 0;
  }
  // Runs copy() while no step of the group is in flight, and none starts: counted first, so the
  // worker starts no further step (due()) and the copy waits for one step at most.
  template <class F>
  void between_steps(F&& copy) {
    {
      std::unique_lock lock(mutex_);
      ++copying_;
      cv_.wait(lock, [&] { return !stepping_ || error_; });
      if (error_) {
        --copying_;
        check();
      }
    }
    struct Done {
      StackGroup& g;
      ~Done() {
        {
          const std::lock_guard lock(g.mutex_);
          --g.copying_;
        }
        g.cv_.notify_all();
      }
    } done{*this};
    copy();
  }
  // params, m, v of run block `from_run` of `from` into block `to_run` of `to`, on the calling
  // thread's stream, waited for.
  static void copy_block(ParamStore<E>& to, int to_run, const ParamStore<E>& from, int from_run) {
    const int64_t n = from.count(), t = to_run * to.run_size(), f = from_run * from.run_size();
    if (to.count() != n) fail("stacked group: a run of {} parameters in a slot of {}", n, to.count());
    E::copy(to.params.data() + t, from.params.data() + f, n);
    E::copy(to.m.data() + t, from.m.data() + f, n);
    E::copy(to.v.data() + t, from.v.data() + f, n);
    E::sync();
  }

  void work(const ModelConfig& cfg, const std::function<void()>& setup) {
    try {
      setup();
      Transformer<E> model(cfg, std::vector<uint64_t>(R_, 0));  // every slot's parameters come with its run
      TrainStep<E> step(model);
      {
        const std::lock_guard lock(mutex_);
        model_ = &model;
      }
      cv_.notify_all();
      const size_t n = size_t(B_) * T_;
      std::vector<int32_t> tokens(R_ * n), targets(R_ * n);  // (R·B, T) the step's batch
      std::vector<AdamWArgs> args(R_);
      std::vector<uint8_t> active(R_);
      while (true) {
        bool pred = false;
        {
          std::unique_lock lock(mutex_);
          cv_.wait(lock, [&] { return stop_ || due(); });
          if (stop_) break;
          stepping_ = true;
          for (int r = 0; r < R_; ++r) {
            active[r] = state_[r] == Submitted;
            const size_t o = size_t(r) * n;
            if (active[r]) {
              std::copy_n(tokens_.begin() + o, n, tokens.begin() + o);
              std::copy_n(targets_.begin() + o, n, targets.begin() + o);
              args[r] = args_[r], pred = pred || want_pred_[r];
            } else {  // rows without a target: no loss, no gradient, and no AdamW step below
              std::fill_n(tokens.begin() + o, n, 0);
              std::fill_n(targets.begin() + o, n, -1);
            }
          }
        }
        model.set_batch(tokens.data(), targets.data(), R_ * B_, T_);
        step.launch(args, active);
        const auto stats = step.wait_runs();
        const int32_t* p = pred ? model.predictions() : nullptr;
        {
          const std::lock_guard lock(mutex_);
          for (int r = 0; r < R_; ++r)
            if (active[r] && state_[r] == Submitted) {  // (not left in the meantime)
              std::tie(loss_[r], norm_[r]) = stats[r];
              if (p) std::copy_n(p + r * n, n, pred_.begin() + r * n);
              state_[r] = Done;
            }
          stepping_ = false;
        }
        cv_.notify_all();
      }
      const std::lock_guard lock(mutex_);
      model_ = nullptr;
    } catch (...) {
      {
        const std::lock_guard lock(mutex_);
        error_ = std::current_exception();
        model_ = nullptr;
      }
      cv_.notify_all();
    }
  }

  const int R_, B_, T_;
  std::thread worker_;
  std::mutex mutex_;               // guards everything below
  std::condition_variable cv_;
  Transformer<E>* model_ = nullptr;  // the worker's, while it runs
  std::exception_ptr error_;
  bool stop_ = false;
  bool stepping_ = false;             // a step is in flight (the worker's, between due() and Done)
  int copying_ = 0;                   // joins and pulls copying a slot's block
  std::vector<State> state_;          // (R)
  std::vector<AdamWArgs> args_;       // (R) of the submitted steps
  std::vector<uint8_t> want_pred_;    // (R)
  std::vector<double> loss_, norm_;   // (R) of the last step
  std::vector<int32_t> tokens_, targets_, pred_;  // (R·B, T) submitted batches, predictions
};

// The stacked groups of one sweep process, one per shape and device (runners/trainer.cpp, join_stack),
// made when a run of that shape starts and gone when its last run leaves.
class StackPool {
 public:
  explicit StackPool(int capacity) : capacity_(capacity) {}

  // A slot for a run of shape `key` whose one-run store is `from`, in a group made by
  // make(capacity) when none of that shape has a free slot. One join at a time, so that runs
  // starting together fill one group instead of each making its own.
  template <class E, class Make>
  std::pair<std::shared_ptr<StackGroup<E>>, int> join(const std::string& key, const ParamStore<E>& from, Make&& make) {
    const std::lock_guard lock(mutex_);
    auto group = std::dynamic_pointer_cast<StackGroup<E>>(groups_[key].lock());
    if (group)
      if (const int slot = group->join(from); slot >= 0) return {group, slot};
    group = make(capacity_);
    groups_[key] = group;
    return {group, group->join(from)};
  }

 private:
  const int capacity_;
  std::mutex mutex_;
  std::map<std::string, std::weak_ptr<StackGroupBase>> groups_;
};

}  // namespace pb
