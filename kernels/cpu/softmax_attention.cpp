// Causal softmax attention with the optional FoX gate and bias table, one (b, h) per OpenMP task,
// T×T scratch per thread. Formulas and the backward derivation: kernels/README.md, "Softmax
// attention and the FoX gate" and "The bias table".
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/attention_common.h"
#include "kernels/ops.h"

namespace pb {
namespace {

using namespace attn;

// G_i − G_j for j ≤ i: a (1, i + 1) array expression.
template <class S>
auto gate_bias(const RowVec<S>& G, int i) {
  return G(i) - G.head(i + 1).array();
}

// b_h(i − j) for j ≤ i: a (1, i + 1) array expression over the head's table row bias_h (T).
template <class S>
auto distance_bias(const S* bias_h, int i) {
  return Eigen::Map<const RowVec<S>>(bias_h, i + 1).array().reverse();
}

// Causal softmax of one head: P becomes A (lower triangle), o = A v, lse saved.
template <class S>
void forward_head(HeadMap<S> o, S* lse, ConstHeadMap<S> q, ConstHeadMap<S> k, ConstHeadMap<S> v,
                  const RowVec<S>& G, const S* bias_h,  // (T) or null
                  const SoftmaxAttentionArgs& args, int b, int h,
                  RowMat<S>& P) {  // (T, T) scratch
  const int T = args.shape.T;
  const S scale = S(args.scale);
  // P_ij = q_i·k_j, j ≤ i
  causal_product(P, q, k);
  for (int i = 0; i < T; ++i) {
    auto p = P.row(i).head(i + 1).array();
    // s_ij = scale·q_i·k_j + G_i − G_j (+ b_h(i − j))
    p = scale * p + gate_bias(G, i);
    if (bias_h) p += distance_bias(bias_h, i);
    // A_ij = exp(s_ij − max_j s_ij) / Σ_j exp(s_ij − max_j s_ij)
    const S row_max = p.maxCoeff();
    p = (p - row_max).exp();
    const S sum = p.sum();
    p /= sum;
    // lse_i = max_j s_ij + log Σ_j exp(s_ij − max_j s_ij)
    lse[scalar_index(args.shape, b, i, h)] = row_max + std::log(sum);
  }
  // o = A v
  o.noalias() = P.template triangularView<Eigen::Lower>() * v;
}

// Scratch of one thread for the forward of one head.
template <class S>
struct ForwardScratch {
  RowMat<S> P;  // (T, T)
  RowVec<S> G;  // (T)
};

// Scratch of one thread for the backward of one head.
template <class S>
struct BackwardScratch {
  RowMat<S> P, dS;      // (T, T)
  RowVec<S> G, dG, dB;  // (T); dB_r = Σ_{i − j = r} dS_ij of this head
};

template <class S>
void backward_head(HeadMap<S> dq, HeadMap<S> dk, HeadMap<S> dv, S* dlog_f, ConstHeadMap<S> dout,
                   ConstHeadMap<S> o, const S* lse, ConstHeadMap<S> q, ConstHeadMap<S> k,
                   ConstHeadMap<S> v, const S* bias_h,  // (T) or null
                   const SoftmaxAttentionArgs& args, int b, int h, BackwardScratch<S>& w) {
  const int T = args.shape.T;
  const S scale = S(args.scale);
  // P_ij = q_i·k_j,  dS_ij = dout_i·v_j  (j ≤ i)
  causal_product(w.P, q, k);
  causal_product(w.dS, dout, v);
  w.dG.setZero();
  w.dB.setZero();
  for (int i = 0; i < T; ++i) {
    auto p = w.P.row(i).head(i + 1).array();
    auto ds = w.dS.row(i).head(i + 1).array();
    const S lse_i = lse[scalar_index(args.shape, b, i, h)];
    // A_ij = exp(scale·q_i·k_j + G_i − G_j (+ b_h(i − j)) − lse_i)
    if (bias_h)
      p = (scale * p + (gate_bias(w.G, i) - lse_i) + distance_bias(bias_h, i)).exp();
    else
      p = (scale * p + (gate_bias(w.G, i) - lse_i)).exp();
    // dS_ij = A_ij (dout_i·v_j − dout_i·o_i)
    ds = p * (ds - dout.row(i).dot(o.row(i)));
    // dB_r += dS_ij for r = i − j
    if (bias_h) w.dB.head(i + 1).array() += ds.reverse();
    if (!dlog_f) continue;
    // dG_i += Σ_j dS_ij,  dG_j −= dS_ij
    w.dG(i) += ds.sum();
    w.dG.head(i + 1).array() -= ds;
  }
  // dq = scale·dS k,  dk = scale·dSᵀ q,  dv = Aᵀ dout
  dq.noalias() = w.dS.template triangularView<Eigen::Lower>() * k;
  dq *= scale;
  dk.noalias() = w.dS.transpose().template triangularView<Eigen::Upper>() * q;
  dk *= scale;
  dv.noalias() = w.P.transpose().template triangularView<Eigen::Upper>() * dout;
  if (dlog_f) gate_backward(dlog_f, w.dG, args.shape, b, h);
}

// The table row of head h, or null without a bias.
template <class S>
const S* bias_row(const S* bias, const AttnShape& s, int h) {
  return bias ? bias + int64_t(h) * s.T : nullptr;
}

}  // namespace

template <class S>
void softmax_attention_forward(S* o, S* lse, const S* q, const S* k, const S* v, const S* log_f,
                               const SoftmaxAttentionArgs& args, const S* bias) {
  const AttnShape& s = args.shape;
  const auto make = [&] { return ForwardScratch<S>{RowMat<S>(s.T, s.T), RowVec<S>(s.T)}; };
  for_each_head(s, make, [&](int b, int h, ForwardScratch<S>& w) {
    gate_prefix(w.G, log_f, s, b, h);
    forward_head(head(o, s, b, h), lse, head(q, s, b, h), head(k, s, b, h), head(v, s, b, h), w.G,
                 bias_row(bias, s, h), args, b, h, w.P);
  });
}

template <class S>
void softmax_attention_backward(S* dq, S* dk, S* dv, S* dlog_f, const S* dout, const S* o,
                                const S* lse, const S* q, const S* k, const S* v, const S* log_f,
                                const SoftmaxAttentionArgs& args, S* dbias, const S* bias) {
  const AttnShape& s = args.shape;
  const auto make = [&] {
    return BackwardScratch<S>{RowMat<S>(s.T, s.T), RowMat<S>(s.T, s.T), RowVec<S>(s.T), RowVec<S>(s.T),
                              RowVec<S>(s.T)};
  };
  std::vector<S> part(bias ? size_t(s.B) * s.H * s.T : 0);  // (B, H, T) dB of each head
  for_each_head(s, make, [&](int b, int h, BackwardScratch<S>& w) {
    gate_prefix(w.G, log_f, s, b, h);
    backward_head(head(dq, s, b, h), head(dk, s, b, h), head(dv, s, b, h), dlog_f, head(dout, s, b, h),
                  head(o, s, b, h), lse, head(q, s, b, h), head(k, s, b, h), head(v, s, b, h),
                  bias_row(bias, s, h), args, b, h, w);
    if (bias) std::copy(w.dB.data(), w.dB.data() + s.T, part.data() + (int64_t(b) * s.H + h) * s.T);
  });
  if (!bias) return;
  // db_h(r) = Σ_b dB_{b,h,r}, in double, in a fixed order
  for (int h = 0; h < s.H; ++h)
    for (int r = 0; r < s.T; ++r) {
      double acc = 0;
      for (int b = 0; b < s.B; ++b) acc += part[(int64_t(b) * s.H + h) * s.T + r];
      dbias[int64_t(h) * s.T + r] = S(acc);
    }
}

template void softmax_attention_forward<float>(float*, float*, const float*, const float*,
                                               const float*, const float*,
                                               const SoftmaxAttentionArgs&, const float*);
template void softmax_attention_forward<double>(double*, double*, const double*, const double*,
                                                const double*, const double*,
                                                const SoftmaxAttentionArgs&, const double*);
template void softmax_attention_backward<float>(float*, float*, float*, float*, const float*,
                                                const float*, const float*, const float*,
                                                const float*, const float*, const float*,
                                                const SoftmaxAttentionArgs&, float*, const float*);
template void softmax_attention_backward<double>(double*, double*, double*, double*, const double*,
                                                 const double*, const double*, const double*,
                                                 const double*, const double*, const double*,
                                                 const SoftmaxAttentionArgs&, double*, const double*);

}  // namespace pb
