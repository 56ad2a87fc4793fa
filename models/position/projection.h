// The small per-head projections that encodings compute from the layer input x:
// z = x W + b with W (C, H) and b (H), e.g. FoX's forget-gate logit or PaTH's β logit; W and b per
// stacked run (Runs, kernels/ops.h).
#pragma once
#include "models/engine.h"

namespace pb {

template <class E, class S = typename E::Scalar>
void head_projection_forward(S* z,         // (N, H)
                             const S* x,   // (N, C)
                             const S* w,   // (C, H)
                             const S* b,   // (H)
                             int N, int C, int H, Runs runs = {}) {
  E::matmul_forward(z, x, w, N, C, H, GradMode::Overwrite, runs);
  E::add_bias(z, b, N, H, runs);  // z = x W + b
}

// dx += dz Wᵀ, dW += xᵀ dz, db += Σ_n dz
template <class E, class S = typename E::Scalar>
void head_projection_backward(S* dx, S* dw, S* db, const S* dz, const S* x, const S* w, int N,
                              int C, int H, Runs runs = {}) {
  E::matmul_backward(dx, dw, dz, x, w, N, C, H, GradMode::Accumulate, runs);
  E::bias_backward(db, dz, N, H, runs);
}

}  // namespace pb
