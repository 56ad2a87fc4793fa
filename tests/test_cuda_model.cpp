// The whole model on the CUDA engine against the CPU engine, for every registered encoding: the
// loss and every parameter gradient of one step, then the loss over 20 AdamW steps run through
// TrainStep (on the GPU: eager once, then captured in a CUDA graph and replayed).
//
// Tolerances: step-1 loss relative error ≤ 1e-5 and gradients relative RMS ≤ 1e-4 (the fp32
// policy of tests/README.md); over 20 steps each loss within 1e-3 relative, because AdamW divides
// by √v and so turns fp32 rounding differences of small gradients into O(lr) parameter changes.
#include <cmath>

#include "kernels/rng.h"
#include "runners/train_step.h"
#include "tests/check.h"

using namespace pb;

namespace {

struct Batch {
  std::vector<int32_t> tokens, targets;
};

Batch random_batch(int B, int T, int V, uint64_t seed) {
  Rng rng(seed, stream_id("cuda-model"), 0);
  Batch b{std::vector<int32_t>(size_t(B) * T), std::vector<int32_t>(size_t(B) * T)};
  for (size_t i = 0; i < b.tokens.size(); ++i) {
    b.tokens[i] = int32_t(rng.below(uint32_t(V)));
    b.targets[i] = i % 5 == 3 ? -1 : int32_t(rng.below(uint32_t(V)));  // some positions unscored
  }
  return b;
}

std::string spec_of(const std::string& name) {
  return name == "path" || name == "path_fox" ? name + ":w_rank=8" : name;
}

}  // namespace

TEST_CASE("every encoding: CUDA model loss and gradients match the CPU model", "[cuda][model]") {
  const int B = 3, T = 37, V = 11;
  for (const auto& entry : encodings()) {
    for (const int heads : {1, 2}) {  // head dims 64 and 32
      const ModelConfig cfg{V, 2, 64, heads, 96, spec_of(entry.schema.name)};
      INFO(cfg.pe << " heads " << heads);
      Transformer<Cpu32> cpu(cfg, 7);
      Transformer<CudaEngine> gpu(cfg, 7);
      const Batch b = random_batch(B, T, V, 1);
      const double loss_cpu = cpu.forward(b.tokens.data(), b.targets.data(), B, T);
      const double loss_gpu = gpu.forward(b.tokens.data(), b.targets.data(), B, T);
      CHECK(std::abs(loss_gpu - loss_cpu) <= 1e-5 * std::abs(loss_cpu));
      cpu.backward();
      gpu.backward();
      std::vector<float> grads_gpu(gpu.params.grads.size());
      CudaEngine::download(grads_gpu.data(), gpu.params.grads.data(), grads_gpu.size());
      for (const auto& e : cpu.params.entries) {
        const std::vector<float> want(cpu.params.grads.begin() + e.offset, cpu.params.grads.begin() + e.offset + e.size);
        const std::vector<float> got(grads_gpu.begin() + e.offset, grads_gpu.begin() + e.offset + e.size);
        INFO("gradient of " << e.spec.name);
        CHECK(test::rel_rms(got, want) <= 1e-4);
      }
    }
  }
}

TEST_CASE("every encoding: 20 training steps on CUDA (graph replay) follow the CPU losses", "[cuda][model][train]") {
  const int B = 4, T = 33, V = 9, steps = 20;
  for (const auto& entry : encodings()) {
    const ModelConfig cfg{V, 2, 64, 2, 128, spec_of(entry.schema.name)};
    INFO(cfg.pe);
    Transformer<Cpu32> cpu(cfg, 3);
    Transformer<CudaEngine> gpu(cfg, 3);
    TrainStep<Cpu32> step_cpu(cpu);
    TrainStep<CudaEngine> step_gpu(gpu);
    for (int s = 1; s <= steps; ++s) {
      const Batch b = random_batch(B, T, V, 100 + s);
      const AdamWArgs args{3e-3, 0.9, 0.95, 1e-8, 0.1, s, 1.0};
      cpu.set_batch(b.tokens.data(), b.targets.data(), B, T);
      gpu.set_batch(b.tokens.data(), b.targets.data(), B, T);
      step_cpu.launch(args);
      step_gpu.launch(args);
      const auto [loss_cpu, norm_cpu] = step_cpu.wait();
      const auto [loss_gpu, norm_gpu] = step_gpu.wait();
      INFO("step " << s << " loss cpu " << loss_cpu << " gpu " << loss_gpu);
      CHECK(std::abs(loss_gpu - loss_cpu) <= 1e-3 * std::abs(loss_cpu));
      CHECK(std::abs(norm_gpu - norm_cpu) <= 1e-2 * norm_cpu);
    }
  }
}
