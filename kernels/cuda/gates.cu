// Per-head gates of the position encodings, as in kernels/cpu/gates.cpp: bias add / bias
// gradient, FoX's log f = s · log σ(z) and PaTH's β = max · σ(z) (optionally clipped). Elementwise
// grid-stride kernels (backward ops may run in place: each entry is read before it is written by
// the same thread); the bias gradient is a deterministic column sum (chunk partials, then a fixed
// order sum). Stacked runs (Runs, kernels/ops.h): row n adds its run's bias b + (n / rows)·stride,
// rows = N / R; the gradient's chunks never cross a run, and each run's sums go to its own db.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dense.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runs.cuh"
#include "core/cuda/runtime.h"

namespace pb::cuda {
namespace {

constexpr int kChunk = 64;  // rows per partial sum of the bias gradient

#define PB_GRID_STRIDE(i, n)                                                \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); \
       i += int64_t(gridDim.x) * blockDim.x)

// σ(z), stable for large |z| (accurate expf: the gates are small)
__device__ __forceinline__ float sigmoid_stable(float z) {
  return z >= 0.f ? 1.f / (1.f + expf(-z)) : expf(z) / (1.f + expf(z));
}

// z (N, H) += b_run (H) broadcast over rows,  b_run = b + (n / rows)·stride for row n
__global__ void add_bias_kernel(float* z, const float* b, int64_t n, int H, int rows, int64_t stride) {
  PB_GRID_STRIDE(i, n) z[i] += b[i / H / rows * stride + i % H];
}

// partial (R, n_chunks, H): partial[r, k, h] = Σ_{n in chunk k of run r} dz[n, h], chunk k of run r
// being rows r·rows + [k·kChunk, min((k + 1)·kChunk, rows))
__global__ void bias_partial_kernel(float* partial, const float* dz, int rows, int n_chunks, int H) {
  const int h = blockIdx.y * blockDim.x + threadIdx.x, k = blockIdx.x % n_chunks,
            r = blockIdx.x / n_chunks;
  if (h >= H) return;
  const int first = r * rows, n1 = first + min(rows, (k + 1) * kChunk);
  float acc = 0.f;
  for (int n = first + k * kChunk; n < n1; ++n) acc += dz[int64_t(n) * H + h];
  partial[int64_t(blockIdx.x) * H + h] = acc;
}

// y = scale · log σ(z),  log σ(z) = min(z, 0) − log1p(e^(−|z|))
__global__ void log_sigmoid_forward_kernel(float* y, const float* z, int64_t n, float scale) {
  PB_GRID_STRIDE(i, n) y[i] = scale * (fminf(z[i], 0.f) - log1pf(expf(-fabsf(z[i]))));
}

// dz = scale · dy · σ(−z)
__global__ void log_sigmoid_backward_kernel(float* dz, const float* dy, const float* z, int64_t n,
                                            float scale) {
  PB_GRID_STRIDE(i, n) dz[i] = scale * dy[i] * sigmoid_stable(-z[i]);
}

// β = max · σ(z), min(β, cap) when clipping (cap = 2 − clip)
__global__ void beta_forward_kernel(float* beta, const float* z, int64_t n, float max, bool clip, float cap) {
  PB_GRID_STRIDE(i, n) {
    const float b = max * sigmoid_stable(z[i]);
    beta[i] = clip ? fminf(b, cap) : b;
  }
}

// dz = dβ · max σ(z)(1 − σ(z)), 0 where the clip is active (max σ(z) > cap)
__global__ void beta_backward_kernel(float* dz, const float* dbeta, const float* z, int64_t n, float max,
                                     bool clip, float cap) {
  PB_GRID_STRIDE(i, n) {
    const float s = sigmoid_stable(z[i]);
    dz[i] = clip && max * s > cap ? 0.f : dbeta[i] * max * s * (1.f - s);
  }
}

#undef PB_GRID_STRIDE

}  // namespace

void add_bias(float* z, const float* b, int N, int H, Runs runs) {
  const int rows = rows_per_run("add_bias", N, runs);
  const int64_t n = int64_t(N) * H;
  if (n == 0) return;
  add_bias_kernel<<<blocks_for(n), kElementThreads, 0, stream()>>>(z, b, n, H, rows,
                                                                   run_stride(runs));
  PB_LAUNCH_CHECK();
}

void bias_backward(float* db, const float* dz, int N, int H, Runs runs) {
  const int rows = rows_per_run("bias_backward", N, runs);
  if (N == 0 || H == 0) return;
  const int n_chunks = ceil_div(rows, kChunk), threads = std::min(128, 32 * ceil_div(H, 32));
  float* partial = static_cast<float*>(
      scratch(sizeof(float) * size_t(runs.count) * n_chunks * H));  // (R, n_chunks, H)
  bias_partial_kernel<<<dim3(runs.count * n_chunks, ceil_div(H, threads)), threads, 0, stream()>>>(
      partial, dz, rows, n_chunks, H);
  PB_LAUNCH_CHECK();
  add_run_column_sums(db, runs, partial, n_chunks, H);
}

void log_sigmoid_forward(float* y, const float* z, int64_t n, double scale) {
  if (n == 0) return;
  log_sigmoid_forward_kernel<<<blocks_for(n), kElementThreads, 0, stream()>>>(y, z, n, float(scale));
  PB_LAUNCH_CHECK();
}

void log_sigmoid_backward(float* dz, const float* dy, const float* z, int64_t n, double scale) {
  if (n == 0) return;
  log_sigmoid_backward_kernel<<<blocks_for(n), kElementThreads, 0, stream()>>>(dz, dy, z, n, float(scale));
  PB_LAUNCH_CHECK();
}

void beta_forward(float* beta, const float* z, int64_t n, const BetaArgs& a) {
  if (n == 0) return;
  beta_forward_kernel<<<blocks_for(n), kElementThreads, 0, stream()>>>(beta, z, n, float(a.max), a.clip > 0,
                                                                       float(2 - a.clip));
  PB_LAUNCH_CHECK();
}

void beta_backward(float* dz, const float* dbeta, const float* z, int64_t n, const BetaArgs& a) {
  if (n == 0) return;
  beta_backward_kernel<<<blocks_for(n), kElementThreads, 0, stream()>>>(dz, dbeta, z, n, float(a.max),
                                                                        a.clip > 0, float(2 - a.clip));
  PB_LAUNCH_CHECK();
}

}  // namespace pb::cuda
