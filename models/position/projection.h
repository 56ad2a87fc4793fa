// The small per-head projections that encodings compute from the layer input x:
// z = x W + b with W (C, H) and b (H), e.g. FoX's forget-gate logit or PaTH's β logit.
#pragma once
#include "kernels/ops.h"
#include "kernels/scalar.h"

namespace pb {

template <class S>
void head_projection_forward(S* z,         // (N, H)
                             const S* x,   // (N, C)
                             const S* w,   // (C, H)
                             const S* b,   // (H)
                             int N, int C, int H) {
  matmul_forward(z, x, w, N, C, H);
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h) z[n * H + h] += b[h];  // z = x W + b
}

// dx += dz Wᵀ, dW += xᵀ dz, db += Σ_n dz
template <class S>
void head_projection_backward(S* dx, S* dw, S* db, const S* dz, const S* x, const S* w, int N,
                              int C, int H) {
  matmul_backward(dx, dw, dz, x, w, N, C, H, GradMode::Accumulate);
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h) db[h] += dz[n * H + h];
}

}  // namespace pb
