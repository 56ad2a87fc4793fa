// Causal depthwise convolution of width 3 over time, then SiLU:
//   z[b,t,c] = Σ_{k<3} a[k,c] · u[b,t−k,c]  (u = 0 for t−k < 0),  y = silu(z) = z · σ(z)
//
// Forward: elementwise over the B·T·C outputs (float4 when C % 4 == 0 and the buffers are 16-byte
// aligned). Backward: one thread per (channel, chunk of kChunk rows r = b·T + t) walks its rows
// from the last to the first, recomputing z, keeping dz of the two later rows and u of the two
// earlier rows in registers, so du comes out in one pass; the same walk accumulates the chunk's
// share of da, and the chunk partials are summed in a fixed order (deterministic, no atomics).
//
// Stacked runs (Runs, kernels/ops.h): run r owns sequences r·B/R … (r + 1)·B/R − 1, i.e. the
// rows = (B/R)·T rows from r·rows on, and reads its filter a + r·stride; backward chunks never
// cross a run, and each run's partials sum into its own da.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dense.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runs.cuh"
#include "core/cuda/runtime.h"

namespace pb::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 64;        // rows per thread in the backward
constexpr int kColThreads = 128;  // channels per block in the backward

// y (B·T, C) = silu(Σ_{k ≤ t, k < 3} a_run[k] ⊙ u[r−k]),  a_run = a + (r / rows)·stride (3, C)
template <int kVec>
__global__ void short_conv_forward_kernel(float* y, const float* u, const float* a, int64_t n_packs, int T,
                                          int C, int rows, int64_t stride) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_packs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = i * kVec, r = e / C;
    const int c = int(e % C), t = int(r % T);
    const float* ar = a + r / rows * stride;  // (3, C) of the row's run
    Pack<kVec> z{};
    for (int k = 0; k < kShortConvWidth && k <= t; ++k) {
      const Pack<kVec> ak = load<kVec>(ar + k * C + c), uk = load<kVec>(u + e - int64_t(k) * C);
      for (int j = 0; j < kVec; ++j) z.v[j] += ak.v[j] * uk.v[j];
    }
    for (int j = 0; j < kVec; ++j) z.v[j] *= sigmoidf_(z.v[j]);  // y = z · σ(z)
    *reinterpret_cast<Pack<kVec>*>(y + e) = z;
  }
}

// du (N, C) = Σ_{k: t+k < T} a_run[k] ⊙ dz[r+k],  dz = dy · σ(z)(1 + z(1 − σ(z))),
// a_run = a + run·stride (3, C)
// partial (R, n_chunks, 3, C): partial[run, j, k, c] = Σ_{r in chunk j, t ≥ k} dz[r, c] · u[r−k, c],
// chunk j of a run being its rows run·rows + [j·kChunk, min((j + 1)·kChunk, rows))
__global__ void short_conv_backward_kernel(float* du, float* partial, const float* dy, const float* u,
                                           const float* a, int T, int C, int rows, int n_chunks,
                                           int64_t stride) {
  const int c = blockIdx.y * kColThreads + threadIdx.x, chunk = blockIdx.x,
            run = chunk / n_chunks, j = chunk % n_chunks;
  if (c >= C) return;
  const int end = (run + 1) * rows;  // the run's rows end here
  const int r0 = run * rows + j * kChunk, r1 = min(end, r0 + kChunk);
  a += run * stride;  // (3, C) of the run
  const float a0 = a[c], a1 = a[C + c], a2 = a[2 * C + c];
  auto U = [&](int r) { return r >= 0 ? u[int64_t(r) * C + c] : 0.f; };  // u[r, c], 0 before row 0
  // dz at row r (time t), straight from memory: for the two rows after the chunk
  auto dz_at = [&](int r, int t) {
    const float z = a0 * U(r) + (t >= 1 ? a1 * U(r - 1) : 0.f) + (t >= 2 ? a2 * U(r - 2) : 0.f);
    const float s = sigmoidf_(z);
    return dy[int64_t(r) * C + c] * s * (1.f + z * (1.f - s));
  };
  int t = (r1 - 1) % T;  // time of row r
  // dz of rows r + 1, r + 2 (used only when in the same sequence: t + k < T, so never past the run)
  float dz1 = r1 < end ? dz_at(r1, (t + 1) % T) : 0.f;
  float dz2 = r1 + 1 < end ? dz_at(r1 + 1, (t + 2) % T) : 0.f;
  float u0 = U(r1 - 1), u1 = U(r1 - 2), u2 = U(r1 - 3);  // u of rows r, r − 1, r − 2
  float acc0 = 0.f, acc1 = 0.f, acc2 = 0.f;              // da partials for k = 0, 1, 2
  for (int r = r1 - 1; r >= r0; --r) {
    const float z = a0 * u0 + (t >= 1 ? a1 * u1 : 0.f) + (t >= 2 ? a2 * u2 : 0.f);
    const float s = sigmoidf_(z), dz = dy[int64_t(r) * C + c] * s * (1.f + z * (1.f - s));
    du[int64_t(r) * C + c] = a0 * dz + (t + 1 < T ? a1 * dz1 : 0.f) + (t + 2 < T ? a2 * dz2 : 0.f);
    acc0 += dz * u0;  // da[k] += dz[r] · u[r−k]  (t ≥ k)
    if (t >= 1) acc1 += dz * u1;
    if (t >= 2) acc2 += dz * u2;
    dz2 = dz1, dz1 = dz;  // slide the windows one row back
    u0 = u1, u1 = u2, u2 = U(r - 3);
    t = t == 0 ? T - 1 : t - 1;
  }
  float* p = partial + int64_t(chunk) * 3 * C + c;  // (3, C) of this chunk
  p[0] = acc0, p[C] = acc1, p[2 * C] = acc2;
}

}  // namespace

void short_conv_forward(float* y, const float* u, const float* a, int B, int T, int C, Runs runs) {
  const int rows = rows_per_run("short_conv_forward", B, runs) * T;  // rows (b, t) per run
  const int64_t n = int64_t(B) * T * C, s = run_stride(runs);
  if (n == 0) return;
  if (C % 4 == 0 && s % 4 == 0 && aligned16(y) && aligned16(u) && aligned16(a))
    short_conv_forward_kernel<4><<<blocks_for(n / 4), kThreads, 0, stream()>>>(y, u, a, n / 4, T, C,
                                                                                rows, s);
  else
    short_conv_forward_kernel<1><<<blocks_for(n), kThreads, 0, stream()>>>(y, u, a, n, T, C, rows, s);
  PB_LAUNCH_CHECK();
}

void short_conv_backward(float* du, float* da, const float* dy, const float* u, const float* a,
                         int B, int T, int C, Runs runs) {
  const int rows = rows_per_run("short_conv_backward", B, runs) * T;  // rows (b, t) per run
  const int N = B * T;
  if (N == 0 || C == 0) return;
  const int n_chunks = ceil_div(rows, kChunk), W = kShortConvWidth * C;  // chunks per run
  float* partial = static_cast<float*>(
      scratch(sizeof(float) * size_t(runs.count) * n_chunks * W));  // (R, n_chunks, 3, C)
  const dim3 grid(runs.count * n_chunks, ceil_div(C, kColThreads));
  short_conv_backward_kernel<<<grid, kColThreads, 0, stream()>>>(du, partial, dy, u, a, T, C, rows,
                                                                 n_chunks, run_stride(runs));
  PB_LAUNCH_CHECK();
  add_run_column_sums(da, runs, partial, n_chunks, W);
}

}  // namespace pb::cuda
