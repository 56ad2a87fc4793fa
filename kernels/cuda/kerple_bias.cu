// The KERPLE-log bias table on the GPU, as kernels/cpu/kerple_bias.cpp:
//   b_h(r) = −p1_h · log(1 + p2_h · r),  p = softplus(a),  r = 0 .. T − 1
// Forward: one thread per (h, r). Backward: one block per head, each thread a fixed stride of r,
// then a block sum: deterministic.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dense.cuh"
#include "kernels/cuda/ops.h"
#include "core/cuda/runtime.h"

namespace pb::cuda {
namespace {

constexpr int kBackwardThreads = 256;

// softplus(a) = max(a, 0) + log1p(e^(−|a|))
__device__ __forceinline__ float softplus(float a) { return fmaxf(a, 0.f) + log1pf(expf(-fabsf(a))); }

// bias (H, T): b_h(r) = −p1_h · log(1 + p2_h · r)
__global__ void kerple_bias_fwd_kernel(float* __restrict__ bias, const float* __restrict__ a1,
                               const float* __restrict__ a2, int H, int T) {
  const int64_t n = int64_t(H) * T;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += step) {
    const int h = int(e / T), r = int(e % T);
    bias[e] = -softplus(a1[h]) * log1pf(softplus(a2[h]) * float(r));
  }
}

// Block h: dp1 = −Σ_r db_h(r) log(1 + p2 r),  dp2 = −Σ_r db_h(r) p1 r / (1 + p2 r),
// da += dp · σ(a)
__global__ void kerple_bias_bwd_kernel(float* __restrict__ da1, float* __restrict__ da2,
                                const float* __restrict__ dbias, const float* __restrict__ a1,
                                const float* __restrict__ a2, int T) {
  __shared__ float red[32];
  const int h = blockIdx.x;
  const float p1 = softplus(a1[h]), p2 = softplus(a2[h]);
  float dp1 = 0.f, dp2 = 0.f;
  for (int r = threadIdx.x; r < T; r += blockDim.x) {
    const float db = dbias[int64_t(h) * T + r], x = p2 * float(r);
    dp1 -= db * log1pf(x);
    dp2 -= db * p1 * float(r) / (1.f + x);
  }
  dp1 = block_sum(dp1, red);
  dp2 = block_sum(dp2, red);
  if (threadIdx.x == 0) {
    da1[h] += dp1 / (1.f + expf(-a1[h]));  // σ(a)
    da2[h] += dp2 / (1.f + expf(-a2[h]));
  }
}

}  // namespace

void kerple_bias_forward(float* bias, const float* a1, const float* a2, int H, int T) {
  const int64_t n = int64_t(H) * T;
  if (n == 0) return;
  kerple_bias_fwd_kernel<<<blocks_for(n), kElementThreads, 0, stream()>>>(bias, a1, a2, H, T);
  PB_LAUNCH_CHECK();
}

void kerple_bias_backward(float* da1, float* da2, const float* dbias, const float* a1, const float* a2, int H,
                          int T) {
  if (int64_t(H) * T == 0) return;
  kerple_bias_bwd_kernel<<<H, kBackwardThreads, 0, stream()>>>(da1, da2, dbias, a1, a2, T);
  PB_LAUNCH_CHECK();
}

}  // namespace pb::cuda
