// The optimizer step on the device: the squared gradient norm (deterministic two-stage reduction
// in double) and AdamW with decoupled weight decay after gradient-norm clipping
// g ← g · c, c = min(1, clip / ‖g‖), as in kernels/cpu/adamw.cpp:
//   p ← p − lr·wd·mask·p;  m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²
//   p ← p − lr · m̂ / (sqrt(v̂) + eps),  m̂ = m / (1 − β1^step),  v̂ = v / (1 − β2^step)
// The clip factor is computed on the device from grad_norm_sq[0], so a captured graph needs no
// host round trip; the bias corrections are computed on the host in double.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dense.cuh"
#include "kernels/cuda/ops.h"
#include "core/cuda/runtime.h"

namespace pb::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;      // partial sums of sum_squares
constexpr int kAdamMaxBlocks = 4096;  // grid-stride cap of the AdamW kernel


// Sum over the block (blockDim.x a multiple of 32) in a fixed order; `scratch` is
// __shared__ double[32]; every thread gets the result.
__device__ __forceinline__ double block_sum_double(double x, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  __syncthreads();
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < n_warps ? scratch[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// partial (gridDim.x) [double]: block b's share of Σ x², over packs b·T + tid + k·gridDim·T; the
// n % kVec trailing entries go to block 0.
template <int kVec>
__global__ void __launch_bounds__(kThreads)
    sum_squares_partial_kernel(double* partial, const float* x, int64_t n) {
  __shared__ double scratch[32];
  const int64_t n_packs = n / kVec;
  double acc = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_packs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const Pack<kVec> p = *reinterpret_cast<const Pack<kVec>*>(x + i * kVec);
    for (int j = 0; j < kVec; ++j) acc += double(p.v[j]) * p.v[j];  // exact float products
  }
  if (blockIdx.x == 0 && threadIdx.x < n - n_packs * kVec) {
    const float t = x[n_packs * kVec + threadIdx.x];
    acc += double(t) * t;
  }
  acc = block_sum_double(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// out[0] = Σ partial, one block, in a fixed order
__global__ void __launch_bounds__(kThreads)
    sum_squares_final_kernel(float* out, const double* partial, int n_partial) {
  __shared__ double scratch[32];
  double acc = 0;
  for (int i = threadIdx.x; i < n_partial; i += blockDim.x) acc += partial[i];
  acc = block_sum_double(acc, scratch);
  if (threadIdx.x == 0) out[0] = float(acc);
}

struct Hyper {
  float beta1, beta2, eps, lr;
  float inv_bc1, inv_bc2;  // 1 / (1 − β^step)
  float decay;             // lr · weight_decay
  double clip;             // 0: no clipping
};

// c = min(1, clip / sqrt(grad_norm_sq[0])) when clip > 0;  g = c·grads
// m = β1 m + (1−β1) g;  v = β2 v + (1−β2) g²;  p = p·(1 − lr·wd·mask) − lr·m̂ / (sqrt(v̂) + eps)
__global__ void adamw_kernel(float* params, float* m, float* v, const float* grads,
                             const uint8_t* decay_mask, int64_t n, Hyper h,
                             const float* grad_norm_sq) {
  float c = 1.f;  // clip factor
  if (h.clip > 0) {
    const double norm = sqrt(double(grad_norm_sq[0]));
    if (norm > h.clip) c = float(h.clip / norm);
  }
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = grads[i] * c;
    const float mi = h.beta1 * m[i] + (1.f - h.beta1) * g;
    const float vi = h.beta2 * v[i] + (1.f - h.beta2) * g * g;
    m[i] = mi, v[i] = vi;
    const float p = (!decay_mask || decay_mask[i]) ? params[i] * (1.f - h.decay) : params[i];
    params[i] = p - h.lr * (mi * h.inv_bc1) / (sqrtf(vi * h.inv_bc2) + h.eps);
  }
}


}  // namespace

void sum_squares(float* out, const float* x, int64_t n) {
  if (n == 0) {  // the empty sum
    PB_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(float), stream()));
    return;
  }
  const int vec = aligned16(x) ? 4 : 1;
  const int blocks = std::clamp(ceil_div(n, int64_t(kThreads) * vec), 1, kMaxBlocks);
  double* partial = static_cast<double*>(scratch(sizeof(double) * blocks));  // (blocks)
  if (vec == 4)
    sum_squares_partial_kernel<4><<<blocks, kThreads, 0, stream()>>>(partial, x, n);
  else
    sum_squares_partial_kernel<1><<<blocks, kThreads, 0, stream()>>>(partial, x, n);
  PB_LAUNCH_CHECK();
  sum_squares_final_kernel<<<1, kThreads, 0, stream()>>>(out, partial, blocks);
  PB_LAUNCH_CHECK();
}

void adamw_update(float* params, float* m, float* v, const float* grads, const uint8_t* decay_mask,
                  int64_t n, const AdamWArgs& args, const float* grad_norm_sq) {
  if (n == 0) return;
  const Hyper h{float(args.beta1),
                float(args.beta2),
                float(args.eps),
                float(args.lr),
                float(1 / (1 - std::pow(args.beta1, double(args.step)))),
                float(1 / (1 - std::pow(args.beta2, double(args.step)))),
                float(args.lr * args.weight_decay),
                args.clip};
  const int blocks = std::min(ceil_div(n, kThreads), kAdamMaxBlocks);
  adamw_kernel<<<blocks, kThreads, 0, stream()>>>(params, m, v, grads, decay_mask, n, h,
                                                  grad_norm_sq);
  PB_LAUNCH_CHECK();
}

}  // namespace pb::cuda
