// Stacked runs on the GPU: R runs trained as one model (models/transformer.h; one cuBLAS batched
// GEMM and one kernel per op for all runs) follow the same runs trained one model each, for every
// encoding that stacks, at fp32 and bf16. Tolerance: the loss of each of the first 20 steps within
// 1e-3 relative, the 20-step bound of tests/README.md (batched and single GEMMs may pick different
// algorithms, and the float atomics of some backward kernels sum in arrival order). The worst
// difference is printed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/cuda/runtime.h"
#include "models/position/position_encoding.h"
#include "tests/stacked_case.h"

using namespace pb;

TEST_CASE("cuda stacked runs: every stacking encoding follows its runs trained alone", "[cuda][stacked]") {
  struct RestorePrecision {  // even when a REQUIRE throws
    cuda::Precision saved = cuda::precision();
    ~RestorePrecision() { cuda::set_precision(saved); }
  } restore;
  constexpr int kSteps = 20;
  int walked = 0;
  for (const auto precision : {cuda::Precision::FP32, cuda::Precision::BF16}) {
    cuda::set_precision(precision);
    for (const auto& e : encodings()) {
      if (!e.info.cuda || !e.info.stacks) continue;
      for (const bool kv_conv : {false, true}) {
        if (kv_conv && e.schema.name != "rope") continue;  // the k/v convolution once
        INFO(test_spec(e) << (precision == cuda::Precision::BF16 ? " bf16" : " fp32") << (kv_conv ? " kv_conv" : ""));
        const test::StackedCase c(test_spec(e), kv_conv, {11, 12, 13}, 64, 2, 37);
        const auto all = c.train<CudaEngine>(kSteps);
        double worst = 0;
        for (int r = 0; r < 3; ++r) {
          const auto alone = c.train<CudaEngine>(kSteps, r);
          for (int s = 0; s < kSteps; ++s) {
            const double a = alone.loss[s][0], b = all.loss[s][r];
            REQUIRE(std::isfinite(b));
            worst = std::max(worst, std::abs(a - b) / std::max(std::abs(a), 1e-6));
          }
        }
        std::printf("%-40s %s%s  worst relative loss difference over %d steps: %.2e\n", test_spec(e).c_str(),
                    precision == cuda::Precision::BF16 ? "bf16" : "fp32", kv_conv ? " kv_conv" : "", kSteps,
                    worst);
        CHECK(worst <= 1e-3);
        REQUIRE(all.loss[kSteps - 1][0] != all.loss[kSteps - 1][1]);  // the runs differ
        ++walked;
      }
    }
  }
  REQUIRE(walked >= 2 * 7);
}
