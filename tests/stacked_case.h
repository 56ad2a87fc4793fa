// Stacked runs against the same runs trained one model each (models/transformer.h, Runs in
// kernels/ops.h): one tiny model shape, R seeds, a batch per run, AdamW arguments per run. Shared
// by the CPU test (bit-identical) and the CUDA test (within the GPU tolerance).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runners/train_step.h"

namespace pb::test {

struct StackedTrace {
  std::vector<std::vector<double>> loss, norm;  // [step][run]
  std::vector<float> params;                    // (R, n) after the last step
};

struct StackedCase {
  ModelConfig cfg;
  std::vector<uint64_t> seeds;
  int B = 2, T = 6;                 // per run
  std::vector<int32_t> tokens, targets;  // (R·B, T), run r's sequences the r-th B
  std::vector<AdamWArgs> args;      // per run

  StackedCase(const std::string& pe, bool kv_conv, std::vector<uint64_t> s, int d_model = 8, int heads = 2,
              int T_ = 6)
      : seeds(std::move(s)), T(T_) {
    cfg.vocab = 7, cfg.layers = 2, cfg.d_model = d_model, cfg.heads = heads, cfg.ffn = d_model * 3 / 2;
    cfg.pe = pe, cfg.kv_conv = kv_conv;
    const int R = int(seeds.size());
    uint64_t x = 12345;
    for (int i = 0; i < R * B * T; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      tokens.push_back(int32_t((x >> 33) % cfg.vocab));
      targets.push_back(i % 5 == 0 ? -1 : int32_t((x >> 40) % cfg.vocab));  // some rows without a target
    }
    for (int r = 0; r < R; ++r)  // different learning rates, decay, clipping: each run its own
      args.push_back({.lr = 1e-3 * (1 + 0.5 * r), .weight_decay = 0.01 * r, .clip = r == 1 ? 0.3 : 0.0});
  }

  // The R runs as one stacked model (rows = all runs), or run `only` alone (rows = its own).
  template <class E>
  StackedTrace train(int steps, int only = -1) const {
    const bool stacked = only < 0;
    const std::vector<uint64_t> s = stacked ? seeds : std::vector<uint64_t>{seeds[only]};
    Transformer<E> model(cfg, s);
    TrainStep<E> step(model);
    const int R = int(s.size());
    const size_t first = stacked ? 0 : size_t(only) * B * T;
    std::vector<AdamWArgs> a = stacked ? args : std::vector<AdamWArgs>{args[only]};
    StackedTrace t;
    for (int i = 1; i <= steps; ++i) {
      for (auto& x : a) x.step = i;
      model.set_batch(tokens.data() + first, targets.data() + first, R * B, T);
      step.launch(a);
      std::vector<double> l, g;
      for (auto [loss, norm] : step.wait_runs()) l.push_back(loss), g.push_back(norm);
      t.loss.push_back(l), t.norm.push_back(g);
    }
    for (auto p : model.params.to_host()) t.params.push_back(float(p));
    return t;
  }
};

}  // namespace pb::test
