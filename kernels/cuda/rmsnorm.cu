// RMSNorm: y = x · rstd · g, rstd = 1 / sqrt(mean(x²) + eps), one rstd per row.
//
// Rows go to one warp each (C ≤ 1024) or one block each (wider rows), read as float4 when C is a
// multiple of 4 and the buffers are 16-byte aligned. The weight gradient dg is a column sum over
// the N rows, computed deterministically (no atomics): per-chunk partial sums into scratch, then
// the partials summed in a fixed order.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dense.cuh"
#include "kernels/cuda/ops.h"
#include "core/cuda/runtime.h"

namespace pb::cuda {
namespace {

constexpr int kThreads = 256;    // threads per block of the row kernels
constexpr int kWarpMaxC = 1024;  // widest row handled by one warp
constexpr int kChunk = 64;       // rows per partial sum of dg
constexpr int kColThreads = 128;



// y (N, C) = x · rstd · g,  rstd (N) = 1 / sqrt(Σ x² / C + eps)
template <int kVec, bool kBlock>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_kernel(float* y, float* rstd, const float* x, const float* g, int N, int C, float eps) {
  __shared__ float smem[32];
  const RowGroup<kBlock, kThreads> grp;
  if (grp.row >= N) return;                    // a whole warp (warp rows) or never (block rows)
  const float* xr = x + int64_t(grp.row) * C;  // (C)
  float* yr = y + int64_t(grp.row) * C;        // (C)
  float ss = 0.f;
  for (int c = grp.rank * kVec; c < C; c += grp.size * kVec) {
    const Pack<kVec> xv = load<kVec>(xr + c);
    for (int j = 0; j < kVec; ++j) ss += xv.v[j] * xv.v[j];
  }
  const float r = rsqrtf(grp.sum(ss, smem) / float(C) + eps);  // rstd
  for (int c = grp.rank * kVec; c < C; c += grp.size * kVec) {
    const Pack<kVec> xv = load<kVec>(xr + c), gv = load<kVec>(g + c);
    Pack<kVec> yv;
    for (int j = 0; j < kVec; ++j) yv.v[j] = r * xv.v[j] * gv.v[j];  // y = rstd · x · g
    store<kVec>(yr + c, yv);
  }
  if (grp.rank == 0) rstd[grp.row] = r;
}

// dx (N, C) (+)= rstd·g⊙dy − rstd³/C · x · Σ_c(dy⊙g⊙x)
template <int kVec, bool kBlock>
__global__ void __launch_bounds__(kThreads)
    backward_dx_kernel(float* dx, const float* dy, const float* x, const float* rstd,
                       const float* g, int N, int C, bool accumulate) {
  __shared__ float smem[32];
  const RowGroup<kBlock, kThreads> grp;
  if (grp.row >= N) return;
  const int64_t off = int64_t(grp.row) * C;
  float dot = 0.f;
  for (int c = grp.rank * kVec; c < C; c += grp.size * kVec) {
    const Pack<kVec> dyv = load<kVec>(dy + off + c), xv = load<kVec>(x + off + c),
                     gv = load<kVec>(g + c);
    for (int j = 0; j < kVec; ++j) dot += dyv.v[j] * gv.v[j] * xv.v[j];  // Σ_c dy g x
  }
  dot = grp.sum(dot, smem);
  const float r = rstd[grp.row], coef = r * r * r * dot / float(C);
  for (int c = grp.rank * kVec; c < C; c += grp.size * kVec) {
    const Pack<kVec> dyv = load<kVec>(dy + off + c), xv = load<kVec>(x + off + c),
                     gv = load<kVec>(g + c);
    Pack<kVec> d = accumulate ? load<kVec>(dx + off + c) : Pack<kVec>{};
    for (int j = 0; j < kVec; ++j) d.v[j] += r * gv.v[j] * dyv.v[j] - coef * xv.v[j];
    store<kVec>(dx + off + c, d);
  }
}

// partial (n_chunks, C): partial[k, c] = Σ_{n in chunk k} dy[n, c] · x[n, c] · rstd[n]
__global__ void dg_partial_kernel(float* partial, const float* dy, const float* x,
                                  const float* rstd, int N, int C) {
  const int c = blockIdx.y * kColThreads + threadIdx.x, k = blockIdx.x;
  if (c >= C) return;
  const int n1 = min(N, (k + 1) * kChunk);
  float acc = 0.f;
  for (int n = k * kChunk; n < n1; ++n)
    acc += dy[int64_t(n) * C + c] * x[int64_t(n) * C + c] * rstd[n];
  partial[int64_t(k) * C + c] = acc;
}



}  // namespace

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* g, int N, int C,
                     double eps) {
  if (N == 0) return;
  const bool vec = C % 4 == 0 && aligned16(y) && aligned16(x) && aligned16(g);
  const bool block = C > kWarpMaxC;
  const dim3 grid(block ? N : ceil_div(N, kThreads / 32));
  const float e = float(eps);
  if (vec && block)
    rmsnorm_forward_kernel<4, true><<<grid, kThreads, 0, stream()>>>(y, rstd, x, g, N, C, e);
  else if (vec)
    rmsnorm_forward_kernel<4, false><<<grid, kThreads, 0, stream()>>>(y, rstd, x, g, N, C, e);
  else if (block)
    rmsnorm_forward_kernel<1, true><<<grid, kThreads, 0, stream()>>>(y, rstd, x, g, N, C, e);
  else
    rmsnorm_forward_kernel<1, false><<<grid, kThreads, 0, stream()>>>(y, rstd, x, g, N, C, e);
  PB_LAUNCH_CHECK();
}

void rmsnorm_backward(float* dx, float* dg, const float* dy, const float* x, const float* rstd,
                      const float* g, int N, int C, GradMode mode) {
  if (N == 0 || C == 0) return;
  const bool vec = C % 4 == 0 && aligned16(dx) && aligned16(dy) && aligned16(x) && aligned16(g);
  const bool block = C > kWarpMaxC, acc = mode == GradMode::Accumulate;
  const dim3 grid(block ? N : ceil_div(N, kThreads / 32));
  if (vec && block)
    backward_dx_kernel<4, true><<<grid, kThreads, 0, stream()>>>(dx, dy, x, rstd, g, N, C, acc);
  else if (vec)
    backward_dx_kernel<4, false><<<grid, kThreads, 0, stream()>>>(dx, dy, x, rstd, g, N, C, acc);
  else if (block)
    backward_dx_kernel<1, true><<<grid, kThreads, 0, stream()>>>(dx, dy, x, rstd, g, N, C, acc);
  else
    backward_dx_kernel<1, false><<<grid, kThreads, 0, stream()>>>(dx, dy, x, rstd, g, N, C, acc);
  PB_LAUNCH_CHECK();

  const int n_chunks = ceil_div(N, kChunk);
  float* partial =
      static_cast<float*>(scratch(sizeof(float) * size_t(n_chunks) * C));  // (n_chunks, C)
  dg_partial_kernel<<<dim3(n_chunks, ceil_div(C, kColThreads)), kColThreads, 0, stream()>>>(
      partial, dy, x, rstd, N, C);
  PB_LAUNCH_CHECK();
  add_column_sums(dg, partial, n_chunks, C);
}

}  // namespace pb::cuda
