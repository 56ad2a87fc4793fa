// Row-wise L2 normalisation: y = x / s, s = sqrt(‖x‖² + eps).
// Rows go to one warp each (D ≤ 1024) or one block each (wider rows), read as float4 when D is a
// multiple of 4 and the buffers are 16-byte aligned.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dense.cuh"
#include "kernels/cuda/ops.h"

namespace pb::cuda {
namespace {

constexpr int kThreads = 256;    // threads per block
constexpr int kWarpMaxD = 1024;  // widest row handled by one warp



// y (n_rows, D) = x / sqrt(‖x‖² + eps)
template <int kVec, bool kBlock>
__global__ void __launch_bounds__(kThreads)
    l2norm_forward_kernel(float* y, const float* x, int n_rows, int D, float eps) {
  __shared__ float smem[32];
  const RowGroup<kBlock, kThreads> grp;
  if (grp.row >= n_rows) return;  // a whole warp (warp rows) or never (block rows)
  const int64_t off = int64_t(grp.row) * D;
  float ss = 0.f;
  for (int c = grp.rank * kVec; c < D; c += grp.size * kVec) {
    const Pack<kVec> xv = load<kVec>(x + off + c);
    for (int j = 0; j < kVec; ++j) ss += xv.v[j] * xv.v[j];
  }
  const float inv = rsqrtf(grp.sum(ss, smem) + eps);  // 1 / s
  for (int c = grp.rank * kVec; c < D; c += grp.size * kVec) {
    Pack<kVec> v = load<kVec>(x + off + c);
    for (int j = 0; j < kVec; ++j) v.v[j] *= inv;
    store<kVec>(y + off + c, v);
  }
}

// dx (n_rows, D) = dy / s − x · (x·dy) / s³
template <int kVec, bool kBlock>
__global__ void __launch_bounds__(kThreads)
    l2norm_backward_kernel(float* dx, const float* dy, const float* x, int n_rows, int D, float eps) {
  __shared__ float smem[32];
  const RowGroup<kBlock, kThreads> grp;
  if (grp.row >= n_rows) return;
  const int64_t off = int64_t(grp.row) * D;
  float ss = 0.f, dot = 0.f;
  for (int c = grp.rank * kVec; c < D; c += grp.size * kVec) {
    const Pack<kVec> xv = load<kVec>(x + off + c), dyv = load<kVec>(dy + off + c);
    for (int j = 0; j < kVec; ++j) ss += xv.v[j] * xv.v[j], dot += xv.v[j] * dyv.v[j];
  }
  const float inv = rsqrtf(grp.sum(ss, smem) + eps);        // 1 / s
  const float coef = inv * inv * inv * grp.sum(dot, smem);  // (x·dy) / s³
  for (int c = grp.rank * kVec; c < D; c += grp.size * kVec) {
    const Pack<kVec> xv = load<kVec>(x + off + c), dyv = load<kVec>(dy + off + c);
    Pack<kVec> d;
    for (int j = 0; j < kVec; ++j) d.v[j] = inv * dyv.v[j] - coef * xv.v[j];
    store<kVec>(dx + off + c, d);
  }
}


}  // namespace

void l2norm_forward(float* y, const float* x, int n_rows, int D, double eps) {
  if (n_rows == 0 || D == 0) return;
  const bool vec = D % 4 == 0 && aligned16(y) && aligned16(x), block = D > kWarpMaxD;
  const dim3 grid(block ? n_rows : ceil_div(n_rows, kThreads / 32));
  const float e = float(eps);
  if (vec && block)
    l2norm_forward_kernel<4, true><<<grid, kThreads, 0, stream()>>>(y, x, n_rows, D, e);
  else if (vec)
    l2norm_forward_kernel<4, false><<<grid, kThreads, 0, stream()>>>(y, x, n_rows, D, e);
  else if (block)
    l2norm_forward_kernel<1, true><<<grid, kThreads, 0, stream()>>>(y, x, n_rows, D, e);
  else
    l2norm_forward_kernel<1, false><<<grid, kThreads, 0, stream()>>>(y, x, n_rows, D, e);
  PB_LAUNCH_CHECK();
}

void l2norm_backward(float* dx, const float* dy, const float* x, int n_rows, int D, double eps) {
  if (n_rows == 0 || D == 0) return;
  const bool vec = D % 4 == 0 && aligned16(dx) && aligned16(dy) && aligned16(x),
             block = D > kWarpMaxD;
  const dim3 grid(block ? n_rows : ceil_div(n_rows, kThreads / 32));
  const float e = float(eps);
  if (vec && block)
    l2norm_backward_kernel<4, true><<<grid, kThreads, 0, stream()>>>(dx, dy, x, n_rows, D, e);
  else if (vec)
    l2norm_backward_kernel<4, false><<<grid, kThreads, 0, stream()>>>(dx, dy, x, n_rows, D, e);
  else if (block)
    l2norm_backward_kernel<1, true><<<grid, kThreads, 0, stream()>>>(dx, dy, x, n_rows, D, e);
  else
    l2norm_backward_kernel<1, false><<<grid, kThreads, 0, stream()>>>(dx, dy, x, n_rows, D, e);
  PB_LAUNCH_CHECK();
}

}  // namespace pb::cuda
