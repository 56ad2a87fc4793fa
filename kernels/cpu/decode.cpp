// Decoding ops: one token per sequence against a KV cache (B, H, Tmax, D), one (b, h) per OpenMP
// task. The logits and weights follow kernels/cpu/softmax_attention.cpp and stick_breaking.cpp
// row by row, so decoding gives the parallel forward's results up to rounding.
#include <Eigen/Dense>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/eigen.h"
#include "kernels/ops.h"
#include "kernels/scalar.h"

namespace pb {
namespace {

template <class S>
using Vec = Eigen::Matrix<S, 1, Eigen::Dynamic>;
template <class S>
using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The first T rows (T, D) of head bh's cache.
template <class S>
Eigen::Map<const Mat<S>> head(const S* cache, int bh, const DecodeArgs& a) {
  return {cache + int64_t(bh) * a.Tmax * a.D, a.T, a.D};
}

bool parallel(const DecodeArgs& a) {
  return int64_t(a.B) * a.H * a.T * a.D >= kParallelMin;
}

}  // namespace

template <class S>
void kv_append(S* kc, S* vc, const S* k, const S* v, const DecodeArgs& a) {
  for (int bh = 0; bh < a.B * a.H; ++bh) {
    const int64_t row = (int64_t(bh) * a.Tmax + a.T - 1) * a.D;  // (b, h, t) of the cache
    std::copy(k + int64_t(bh) * a.D, k + int64_t(bh + 1) * a.D, kc + row);
    std::copy(v + int64_t(bh) * a.D, v + int64_t(bh + 1) * a.D, vc + row);
  }
}

template <class S>
void decode_gate(S* G, double* G_sum, const S* log_f, const DecodeArgs& a) {
  for (int bh = 0; bh < a.B * a.H; ++bh) {
    G_sum[bh] += log_f[bh];                                // G_t = G_{t−1} + log f_t
    G[int64_t(bh) * a.Tmax + a.T - 1] = S(G_sum[bh]);
  }
}

template <class S>
void decode_attention(S* o, const S* q, const S* kc, const S* vc, const S* G, const DecodeArgs& a,
                      const S* bias, int bias_stride) {
  const int H = a.H, D = a.D, T = a.T, t = T - 1;
  const S scale = S(a.scale);
#pragma omp parallel for schedule(static) if (parallel(a))
  for (int bh = 0; bh < a.B * H; ++bh) {
    const int h = bh % H;
    const Eigen::Map<const Vec<S>> qv(q + int64_t(bh) * D, D);  // (D)
    Vec<S> p = qv * head(kc, bh, a).transpose();                 // (T) q·k_j
    auto s = p.array();
    // s_j = scale·q·k_j + G_t − G_j (+ b_h(t − j))
    if (G) {
      const S* g = G + int64_t(bh) * a.Tmax;  // (T)
      for (int j = 0; j < T; ++j) s(j) = scale * s(j) + (g[t] - g[j]);
    } else {
      s *= scale;
    }
    if (bias)
      for (int j = 0; j < T; ++j) s(j) += bias[int64_t(h) * bias_stride + (t - j)];
    // A_j = exp(s_j − max s) / Σ exp(s − max s),  o = Σ_j A_j v_j
    s = (s - s.maxCoeff()).exp();
    s /= s.sum();
    Eigen::Map<Vec<S>>(o + int64_t(bh) * D, D).noalias() = p * head(vc, bh, a);
  }
}

template <class S>
void path_key_update(S* kc, const S* w, const S* beta, const DecodeArgs& a) {
  const int D = a.D, t = a.T - 1;
#pragma omp parallel for schedule(static) if (parallel(a))
  for (int bh = 0; bh < a.B * a.H; ++bh) {
    const Eigen::Map<const Vec<S>> wv(w + int64_t(bh) * D, D);  // (D)
    for (int j = 0; j < t; ++j) {
      Eigen::Map<Vec<S>> k(kc + (int64_t(bh) * a.Tmax + j) * D, D);  // (D)
      k -= (beta[bh] * k.dot(wv)) * wv;                              // k_j − β (w·k_j) w
    }
  }
}

template <class S>
void decode_stick_breaking(S* o, const S* q, const S* kc, const S* vc, const DecodeArgs& a) {
  const int D = a.D, t = a.T - 1;
  const S scale = S(a.scale);
#pragma omp parallel for schedule(static) if (parallel(a))
  for (int bh = 0; bh < a.B * a.H; ++bh) {
    const auto K = head(kc, bh, a), V = head(vc, bh, a);          // (T, D)
    const Eigen::Map<const Vec<S>> qv(q + int64_t(bh) * D, D);  // (D)
    Vec<S> w(t + 1);                                             // A_j (j < t), rem
    auto z = w.head(t).array();
    // z_j = scale·q·k_j + bias, j < t
    z = (qv * K.topRows(t).transpose()).array() * scale + S(a.bias);
    // softplus(z) = max(z, 0) + log(1 + exp(−|z|)),  log σ(z) = min(z, 0) − log(1 + exp(−|z|))
    const Eigen::Array<S, 1, Eigen::Dynamic> l = (-z.abs()).exp().log1p(), sp = z.max(S(0)) + l,
                                             log_sig = z.min(S(0)) - l;
    // log A_j = log σ(z_j) − Σ_{j<l<t} softplus(z_l), right to left
    double tail = 0;
    for (int j = t - 1; j >= 0; --j) {
      z(j) = log_sig(j) - S(tail);
      tail += sp(j);
    }
    z = z.exp();
    w(t) = S(std::exp(-tail));  // rem
    // o = Σ_{j<t} A_j v_j + rem v_t
    Eigen::Map<Vec<S>>(o + int64_t(bh) * D, D).noalias() = w * V;
  }
}

template <class S>
void short_conv_step(S* y, S* state, const S* u, const S* a, int B, int C) {
  static_assert(kShortConvWidth == 3);
  for (int b = 0; b < B; ++b) {
    const S* ub = u + int64_t(b) * C;       // (C) u_t
    S* u_1 = state + int64_t(b) * 2 * C;    // (C) u_{t−1}
    S* u_2 = u_1 + C;                       // (C) u_{t−2}
    S* yb = y + int64_t(b) * C;             // (C)
    for (int c = 0; c < C; ++c) {
      // z = a[0] u_t + a[1] u_{t−1} + a[2] u_{t−2},  y = z σ(z), in short_conv_forward's order
      S z = S(0);
      z += a[c] * ub[c];
      z += a[C + c] * u_1[c];
      z += a[2 * C + c] * u_2[c];
      yb[c] = z * sigmoid(z);
      u_2[c] = u_1[c];
      u_1[c] = ub[c];
    }
  }
}

#define PB_DECODE_INSTANTIATE(S)                                                                        \
  template void kv_append<S>(S*, S*, const S*, const S*, const DecodeArgs&);                            \
  template void decode_gate<S>(S*, double*, const S*, const DecodeArgs&);                               \
  template void decode_attention<S>(S*, const S*, const S*, const S*, const S*, const DecodeArgs&,     \
                                    const S*, int);                                                     \
  template void path_key_update<S>(S*, const S*, const S*, const DecodeArgs&);                          \
  template void decode_stick_breaking<S>(S*, const S*, const S*, const S*, const DecodeArgs&);          \
  template void short_conv_step<S>(S*, S*, const S*, const S*, int, int);
PB_DECODE_INSTANTIATE(float)
PB_DECODE_INSTANTIATE(double)
#undef PB_DECODE_INSTANTIATE

}  // namespace pb
