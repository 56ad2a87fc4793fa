// RMSNorm: y = x · rstd · g, rstd = 1 / sqrt(mean(x²) + eps), one rstd per row.
//
// Rows go to one warp each (C ≤ 1024) or one block each (wider rows), read as float4 when C is a
// multiple of 4 and the buffers are 16-byte aligned. The weight gradient dg is a column sum over
// the N rows, computed deterministically (no atomics): per-chunk partial sums into scratch, then
// the partials summed in a fixed order.
//
// Stacked runs (Runs, kernels/ops.h): row n belongs to run n / (N / R) and reads its gain
// g + run·stride; dg's chunks never cross a run, and each run's partials sum into its own dg.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dense.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runs.cuh"
#include "core/cuda/runtime.h"

namespace pb::cuda {
namespace {

constexpr int kThreads = 256;    // threads per block of the row kernels
constexpr int kWarpMaxC = 1024;  // widest row handled by one warp
constexpr int kChunk = 64;       // rows per partial sum of dg
constexpr int kColThreads = 128;

// y (N, C) = x · rstd · g,  rstd (N) = 1 / sqrt(Σ x² / C + eps);  g of row n: g + (n / rows)·stride
template <int kVec, bool kBlock>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_kernel(float* y, float* rstd, const float* x, const float* g, int N, int C,
                           float eps, int rows, int64_t stride) {
  __shared__ float smem[32];
  const RowGroup<kBlock, kThreads> grp;
  if (grp.row >= N) return;                    // a whole warp (warp rows) or never (block rows)
  const float* xr = x + int64_t(grp.row) * C;  // (C)
  g += grp.row / rows * stride;                // (C) the row's run's gain
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

// dx (N, C) (+)= rstd·g⊙dy − rstd³/C · x · Σ_c(dy⊙g⊙x);  g of row n: g + (n / rows)·stride
template <int kVec, bool kBlock>
__global__ void __launch_bounds__(kThreads)
    backward_dx_kernel(float* dx, const float* dy, const float* x, const float* rstd,
                       const float* g, int N, int C, bool accumulate, int rows, int64_t stride) {
  __shared__ float smem[32];
  const RowGroup<kBlock, kThreads> grp;
  if (grp.row >= N) return;
  const int64_t off = int64_t(grp.row) * C;
  g += grp.row / rows * stride;  // (C) the row's run's gain
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

// partial (R, n_chunks, C): partial[r, k, c] = Σ_{n in chunk k of run r} dy[n, c] · x[n, c] · rstd[n],
// chunk k of run r being rows r·rows + [k·kChunk, min((k + 1)·kChunk, rows))
__global__ void dg_partial_kernel(float* partial, const float* dy, const float* x,
                                  const float* rstd, int rows, int n_chunks, int C) {
  const int c = blockIdx.y * kColThreads + threadIdx.x, k = blockIdx.x % n_chunks,
            r = blockIdx.x / n_chunks;
  if (c >= C) return;
  const int first = r * rows, n1 = first + min(rows, (k + 1) * kChunk);
  float acc = 0.f;
  for (int n = first + k * kChunk; n < n1; ++n)
    acc += dy[int64_t(n) * C + c] * x[int64_t(n) * C + c] * rstd[n];
  partial[int64_t(blockIdx.x) * C + c] = acc;
}

}  // namespace

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* g, int N, int C,
                     double eps, Runs runs) {
  const int rows = rows_per_run("rmsnorm_forward", N, runs);
  if (N == 0) return;
  const int64_t s = run_stride(runs);
  const bool vec = C % 4 == 0 && s % 4 == 0 && aligned16(y) && aligned16(x) && aligned16(g);
  const bool block = C > kWarpMaxC;
  const dim3 grid(block ? N : ceil_div(N, kThreads / 32));
  auto launch = [&](auto kernel) {
    kernel<<<grid, kThreads, 0, stream()>>>(y, rstd, x, g, N, C, float(eps), rows, s);
  };
  if (vec && block)
    launch(rmsnorm_forward_kernel<4, true>);
  else if (vec)
    launch(rmsnorm_forward_kernel<4, false>);
  else if (block)
    launch(rmsnorm_forward_kernel<1, true>);
  else
    launch(rmsnorm_forward_kernel<1, false>);
  PB_LAUNCH_CHECK();
}

void rmsnorm_backward(float* dx, float* dg, const float* dy, const float* x, const float* rstd,
                      const float* g, int N, int C, GradMode mode, Runs runs) {
  const int rows = rows_per_run("rmsnorm_backward", N, runs);
  if (N == 0 || C == 0) return;
  const int64_t s = run_stride(runs);
  const bool vec = C % 4 == 0 && s % 4 == 0 && aligned16(dx) && aligned16(dy) && aligned16(x) &&
                   aligned16(g);
  const bool block = C > kWarpMaxC, acc = mode == GradMode::Accumulate;
  const dim3 grid(block ? N : ceil_div(N, kThreads / 32));
  auto launch = [&](auto kernel) {
    kernel<<<grid, kThreads, 0, stream()>>>(dx, dy, x, rstd, g, N, C, acc, rows, s);
  };
  if (vec && block)
    launch(backward_dx_kernel<4, true>);
  else if (vec)
    launch(backward_dx_kernel<4, false>);
  else if (block)
    launch(backward_dx_kernel<1, true>);
  else
    launch(backward_dx_kernel<1, false>);
  PB_LAUNCH_CHECK();

  const int n_chunks = ceil_div(rows, kChunk);  // per run
  float* partial = static_cast<float*>(
      scratch(sizeof(float) * size_t(runs.count) * n_chunks * C));  // (R, n_chunks, C)
  dg_partial_kernel<<<dim3(runs.count * n_chunks, ceil_div(C, kColThreads)), kColThreads, 0,
                      stream()>>>(partial, dy, x, rstd, rows, n_chunks, C);
  PB_LAUNCH_CHECK();
  add_run_column_sums(dg, runs, partial, n_chunks, C);
}

}  // namespace pb::cuda
