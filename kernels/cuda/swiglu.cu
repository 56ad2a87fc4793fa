// SwiGLU gate: h = silu(a) ⊙ b with ab = [a | b] per row, silu(a) = a · σ(a).
// Elementwise, grid-stride over the N·F outputs, float4 when F % 4 == 0 and the buffers are
// 16-byte aligned.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dense.cuh"
#include "kernels/cuda/ops.h"

namespace pb::cuda {
namespace {



// h (N, F) = a · σ(a) · b,  a = ab[:, :F], b = ab[:, F:]
template <int kVec>
__global__ void swiglu_forward_kernel(float* h, const float* ab, int64_t n_packs, int F) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_packs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = i * kVec, n = e / F, f = e % F;
    const float* a = ab + n * 2 * F + f;  // (kVec) entries of a[n]
    const Pack<kVec> av = load<kVec>(a), bv = load<kVec>(a + F);
    Pack<kVec> hv;
    for (int j = 0; j < kVec; ++j) hv.v[j] = av.v[j] * sigmoidf_(av.v[j]) * bv.v[j];
    store<kVec>(h + e, hv);
  }
}

// da = dh · b · σ(a)(1 + a(1 − σ(a))),  db = dh · silu(a);  dab (N, 2F) = [da | db]
template <int kVec>
__global__ void swiglu_backward_kernel(float* dab, const float* dh, const float* ab, int64_t n_packs,
                                       int F) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_packs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = i * kVec, n = e / F, f = e % F, off = n * 2 * F + f;
    const Pack<kVec> av = load<kVec>(ab + off), bv = load<kVec>(ab + off + F),
                     dhv = load<kVec>(dh + e);
    Pack<kVec> da, db;
    for (int j = 0; j < kVec; ++j) {
      const float a = av.v[j], s = sigmoidf_(a);
      da.v[j] = dhv.v[j] * bv.v[j] * s * (1.f + a * (1.f - s));
      db.v[j] = dhv.v[j] * a * s;
    }
    store<kVec>(dab + off, da);
    store<kVec>(dab + off + F, db);
  }
}


}  // namespace

void swiglu_forward(float* h, const float* ab, int N, int F) {
  const int64_t n = int64_t(N) * F;
  if (n == 0) return;
  if (F % 4 == 0 && aligned16(h) && aligned16(ab))
    swiglu_forward_kernel<4><<<blocks_for(n / 4), kElementThreads, 0, stream()>>>(h, ab, n / 4, F);
  else
    swiglu_forward_kernel<1><<<blocks_for(n), kElementThreads, 0, stream()>>>(h, ab, n, F);
  PB_LAUNCH_CHECK();
}

void swiglu_backward(float* dab, const float* dh, const float* ab, int N, int F) {
  const int64_t n = int64_t(N) * F;
  if (n == 0) return;
  if (F % 4 == 0 && aligned16(dab) && aligned16(dh) && aligned16(ab))
    swiglu_backward_kernel<4><<<blocks_for(n / 4), kElementThreads, 0, stream()>>>(dab, dh, ab, n / 4, F);
  else
    swiglu_backward_kernel<1><<<blocks_for(n), kElementThreads, 0, stream()>>>(dab, dh, ab, n, F);
  PB_LAUNCH_CHECK();
}

}  // namespace pb::cuda
