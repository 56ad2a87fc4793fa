// Per-head gates of the position encodings: bias add / bias gradient, FoX's log f = s · log σ(z)
// and PaTH's β = max · σ(z) (optionally clipped). Elementwise; backward ops may run in place.
#include <algorithm>

#include "kernels/cpu/eigen.h"
#include "kernels/cpu/runs.h"
#include "kernels/ops.h"
#include "kernels/scalar.h"

namespace pb {

template <class S>
void add_bias(S* z, const S* b, int N, int H, Runs runs) {
  if (split_runs("add_bias", N, runs, [&](int r, int64_t i, int n) {
        add_bias(z + i * H, b + r * runs.stride, n, H);
      }))
    return;
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h) z[int64_t(n) * H + h] += b[h];  // z = z + b
}

template <class S>
void bias_backward(S* db, const S* dz, int N, int H, Runs runs) {
  if (split_runs("bias_backward", N, runs, [&](int r, int64_t i, int n) {
        bias_backward(db + r * runs.stride, dz + i * H, n, H);
      }))
    return;
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < H; ++h) db[h] += dz[int64_t(n) * H + h];  // db += Σ_n dz
}

template <class S>
void log_sigmoid_forward(S* y, const S* z, int64_t n, double scale) {
  for (int64_t i = 0; i < n; ++i) y[i] = S(scale) * log_sigmoid(z[i]);
}

template <class S>
void log_sigmoid_backward(S* dz, const S* dy, const S* z, int64_t n, double scale) {
  for (int64_t i = 0; i < n; ++i) dz[i] = S(scale) * dy[i] * sigmoid(-z[i]);  // d log σ(z)/dz = σ(−z)
}

template <class S>
void beta_forward(S* beta, const S* z, int64_t n, const BetaArgs& a) {
  for (int64_t i = 0; i < n; ++i) {
    const S b = S(a.max) * sigmoid(z[i]);
    beta[i] = a.clip > 0 ? std::min(b, S(2 - a.clip)) : b;
  }
}

template <class S>
void beta_backward(S* dz, const S* dbeta, const S* z, int64_t n, const BetaArgs& a) {
  for (int64_t i = 0; i < n; ++i) {
    const S s = sigmoid(z[i]);
    dz[i] = a.clip > 0 && S(a.max) * s > S(2 - a.clip) ? S(0) : dbeta[i] * S(a.max) * s * (1 - s);
  }
}

#define PB_INSTANTIATE(S)                                                           \
  template void add_bias<S>(S*, const S*, int, int, Runs);                          \
  template void bias_backward<S>(S*, const S*, int, int, Runs);                     \
  template void log_sigmoid_forward<S>(S*, const S*, int64_t, double);              \
  template void log_sigmoid_backward<S>(S*, const S*, const S*, int64_t, double);   \
  template void beta_forward<S>(S*, const S*, int64_t, const BetaArgs&);            \
  template void beta_backward<S>(S*, const S*, const S*, int64_t, const BetaArgs&);
PB_INSTANTIATE(float)
PB_INSTANTIATE(double)
#undef PB_INSTANTIATE

}  // namespace pb
