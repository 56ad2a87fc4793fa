// Stick-breaking attention (Tan et al. 2025) in log space, leftover mass to the current token; one
// (b, h) per OpenMP task, T×T scratch per thread. Backward derivation: kernels/README.md,
// "Stick-breaking attention".
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/attention_common.h"
#include "kernels/ops.h"

namespace pb {
namespace {

using namespace attn;

// Scratch of one thread. W row i: A_ij for j < i, rem_i on the diagonal.
template <class S>
struct Scratch {
  RowMat<S> W, dW;                  // (T, T)
  RowVec<S> softplus, log_sigmoid;  // (T)
};

// Turns row i of W from q_i·k_j (j < i) into the weights of query i, in place, with
// z_ij = scale·q_i·k_j + bias:
//   log A_ij = log σ(z_ij) − Σ_{j<l<i} softplus(z_il),  W_ii = rem_i = exp(−Σ_{l<i} softplus(z_il)).
// Leaves softplus(z_il) and log σ(z_il) (l < i) in the scratch rows.
template <class S>
void weights_row(Scratch<S>& w, int i, S scale, S bias) {
  auto z = w.W.row(i).head(i).array();
  auto sp = w.softplus.head(i).array();
  auto log_sig = w.log_sigmoid.head(i).array();
  // z_ij = scale·q_i·k_j + bias
  z = z * scale + bias;
  // softplus(z) = max(z, 0) + log(1 + exp(−|z|)),  log σ(z) = min(z, 0) − log(1 + exp(−|z|))
  log_sig = (-z.abs()).exp().log1p();
  sp = z.max(S(0)) + log_sig;
  log_sig = z.min(S(0)) - log_sig;
  // log A_ij = log σ(z_ij) − Σ_{j<l<i} softplus(z_il), right to left
  double tail = 0;  // Σ_{j<l<i} softplus(z_il)
  for (int j = i - 1; j >= 0; --j) {
    z(j) = log_sig(j) - S(tail);
    tail += sp(j);
  }
  // A_ij = exp(log A_ij)
  z = z.exp();
  w.W(i, i) = S(std::exp(-tail));
}

template <class S>
void forward_head(HeadMap<S> o, ConstHeadMap<S> q, ConstHeadMap<S> k, ConstHeadMap<S> v,
                  const StickBreakingArgs& args, Scratch<S>& w) {
  // W_ij = q_i·k_j, j ≤ i
  causal_product(w.W, q, k);
  for (int i = 0; i < args.shape.T; ++i) weights_row(w, i, S(args.scale), S(args.bias));
  // o_i = Σ_{j<i} A_ij v_j + rem_i v_i
  o.noalias() = w.W.template triangularView<Eigen::Lower>() * v;
}

// Row i of dW from dA_ij = dout_i·v_j (j < i) and drem_i = dout_i·v_i into dz_il, in place:
//   dz_il = g_il − σ(z_il) (Σ_{j≤l} g_ij + rem_i drem_i),  g_ij = A_ij dA_ij.
template <class S>
void weights_row_backward(Scratch<S>& w, int i) {
  auto g = w.dW.row(i).head(i).array();
  auto sig = w.log_sigmoid.head(i).array();
  // g_ij = A_ij dA_ij,  σ(z_il) = exp(log σ(z_il))
  g *= w.W.row(i).head(i).array();
  sig = sig.exp();
  // dz_il = g_il − σ(z_il) (rem_i drem_i + Σ_{j≤l} g_ij), left to right
  double prefix = double(w.W(i, i)) * w.dW(i, i);  // rem_i drem_i + Σ_{j≤l} g_ij
  for (int l = 0; l < i; ++l) {
    prefix += g(l);
    g(l) = S(g(l) - sig(l) * prefix);
  }
}

template <class S>
void backward_head(HeadMap<S> dq, HeadMap<S> dk, HeadMap<S> dv, ConstHeadMap<S> dout,
                   ConstHeadMap<S> q, ConstHeadMap<S> k, ConstHeadMap<S> v,
                   const StickBreakingArgs& args, Scratch<S>& w) {
  const S scale = S(args.scale);
  // W_ij = q_i·k_j,  dW_ij = dout_i·v_j  (j ≤ i)
  causal_product(w.W, q, k);
  causal_product(w.dW, dout, v);
  for (int i = 0; i < args.shape.T; ++i) {
    weights_row(w, i, scale, S(args.bias));
    weights_row_backward(w, i);
  }
  // dq = scale·dz k,  dk = scale·dzᵀ q  (dz strictly lower),  dv = Wᵀ dout
  dq.noalias() = w.dW.template triangularView<Eigen::StrictlyLower>() * k;
  dq *= scale;
  dk.noalias() = w.dW.transpose().template triangularView<Eigen::StrictlyUpper>() * q;
  dk *= scale;
  dv.noalias() = w.W.transpose().template triangularView<Eigen::Upper>() * dout;
}

template <class S>
Scratch<S> make_scratch(int T) {
  return {RowMat<S>(T, T), RowMat<S>(T, T), RowVec<S>(T), RowVec<S>(T)};
}

}  // namespace

template <class S>
void stick_breaking_forward(S* o, const S* q, const S* k, const S* v,
                            const StickBreakingArgs& args) {
  const AttnShape& s = args.shape;
  for_each_head(s, [&] { return make_scratch<S>(s.T); }, [&](int b, int h, Scratch<S>& w) {
    forward_head(head(o, s, b, h), head(q, s, b, h), head(k, s, b, h), head(v, s, b, h), args, w);
  });
}

template <class S>
void stick_breaking_backward(S* dq, S* dk, S* dv, const S* dout, const S* q, const S* k,
                             const S* v, const StickBreakingArgs& args) {
  const AttnShape& s = args.shape;
  for_each_head(s, [&] { return make_scratch<S>(s.T); }, [&](int b, int h, Scratch<S>& w) {
    backward_head(head(dq, s, b, h), head(dk, s, b, h), head(dv, s, b, h), head(dout, s, b, h),
                  head(q, s, b, h), head(k, s, b, h), head(v, s, b, h), args, w);
  });
}

template void stick_breaking_forward<float>(float*, const float*, const float*, const float*,
                                            const StickBreakingArgs&);
template void stick_breaking_forward<double>(double*, const double*, const double*, const double*,
                                             const StickBreakingArgs&);
template void stick_breaking_backward<float>(float*, float*, float*, const float*, const float*,
                                             const float*, const float*, const StickBreakingArgs&);
template void stick_breaking_backward<double>(double*, double*, double*, const double*,
                                              const double*, const double*, const double*,
                                              const StickBreakingArgs&);

}  // namespace pb
