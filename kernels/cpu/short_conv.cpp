// Causal depthwise convolution of width 3 over time, then SiLU:
//   z[b,t,c] = Σ_{k<3} a[k,c] · u[b,t−k,c]  (u = 0 for t−k < 0),  y = silu(z) = z · σ(z)
#include <vector>

#include "kernels/cpu/eigen.h"
#include "kernels/cpu/runs.h"
#include "kernels/ops.h"

namespace pb {

namespace {

// z of row r = b·T + t (C).
template <class S>
void conv_row(S* z, const S* u, const S* a, int r, int t, int C) {
  for (int c = 0; c < C; ++c) z[c] = S(0);
  for (int k = 0; k < kShortConvWidth && k <= t; ++k) {
    const S* uk = u + int64_t(r - k) * C;  // u[b, t−k]  (C)
    for (int c = 0; c < C; ++c) z[c] += a[k * C + c] * uk[c];
  }
}

}  // namespace

template <class S>
void short_conv_forward(S* y, const S* u, const S* a, int B, int T, int C, Runs runs) {
  const int64_t TC = int64_t(T) * C;  // one sequence
  if (split_runs("short_conv_forward", B, runs, [&](int r, int64_t b, int n) {
        short_conv_forward(y + b * TC, u + b * TC, a + r * runs.stride, n, T, C);
      }))
    return;
#pragma omp parallel for schedule(static) if (int64_t(B) * T * C >= kParallelMin)
  for (int r = 0; r < B * T; ++r) {
    S* yr = y + int64_t(r) * C;  // (C)
    conv_row(yr, u, a, r, r % T, C);
    for (int c = 0; c < C; ++c) yr[c] *= sigmoid(yr[c]);
  }
}

// dz = dy · σ(z)(1 + z(1 − σ(z))),  du[t] = Σ_k a[k] ⊙ dz[t+k],  da[k] += Σ_{b,t} dz[t] ⊙ u[t−k]
template <class S>
void short_conv_backward(S* du, S* da, const S* dy, const S* u, const S* a, int B, int T, int C,
                         Runs runs) {
  const int64_t TC = int64_t(T) * C;  // one sequence
  if (split_runs("short_conv_backward", B, runs, [&](int r, int64_t b, int n) {
        short_conv_backward(du + b * TC, da + r * runs.stride, dy + b * TC, u + b * TC, a + r * runs.stride,
                            n, T, C);
      }))
    return;
  std::vector<S> dz(size_t(B) * T * C);  // (B, T, C)
#pragma omp parallel for schedule(static) if (int64_t(B) * T * C >= kParallelMin)
  for (int r = 0; r < B * T; ++r) {
    S* dzr = dz.data() + int64_t(r) * C;  // (C)
    const S* dyr = dy + int64_t(r) * C;   // (C)
    conv_row(dzr, u, a, r, r % T, C);
    for (int c = 0; c < C; ++c) {
      const S s = sigmoid(dzr[c]);
      dzr[c] = dyr[c] * s * (S(1) + dzr[c] * (S(1) - s));
    }
  }
#pragma omp parallel for schedule(static) if (int64_t(B) * T * C >= kParallelMin)
  for (int r = 0; r < B * T; ++r) {
    const int t = r % T;
    S* dur = du + int64_t(r) * C;  // (C)
    for (int c = 0; c < C; ++c) dur[c] = S(0);
    for (int k = 0; k < kShortConvWidth && t + k < T; ++k) {
      const S* dzk = dz.data() + int64_t(r + k) * C;  // dz[b, t+k]  (C)
      for (int c = 0; c < C; ++c) dur[c] += a[k * C + c] * dzk[c];
    }
  }
  chunked_row_sum(da, B * T, kShortConvWidth * C, [&](int r, S* acc) {
    const S* dzr = dz.data() + int64_t(r) * C;  // (C)
    for (int k = 0; k < kShortConvWidth && k <= r % T; ++k) {
      const S* uk = u + int64_t(r - k) * C;  // u[b, t−k]  (C)
      for (int c = 0; c < C; ++c) acc[k * C + c] += dzr[c] * uk[c];
    }
  });
}

template void short_conv_forward<float>(float*, const float*, const float*, int, int, int, Runs);
template void short_conv_forward<double>(double*, const double*, const double*, int, int, int, Runs);
template void short_conv_backward<float>(float*, float*, const float*, const float*, const float*,
                                         int, int, int, Runs);
template void short_conv_backward<double>(double*, double*, const double*, const double*,
                                          const double*, int, int, int, Runs);

}  // namespace pb
