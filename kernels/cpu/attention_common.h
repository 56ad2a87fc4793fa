// Shared by the CPU attention kernels: the loop over heads, Eigen views of one head's (T, D) slice
// of a (B, T, H, D) tensor, the causal (lower-triangular) product of two such slices, and the FoX
// gate's prefix sum and its backward.
#pragma once
#include <Eigen/Dense>

#include <algorithm>
#include <cstdint>

#include "kernels/ops.h"

namespace pb::attn {

template <class S>
using RowMat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class S>
using RowVec = Eigen::Matrix<S, 1, Eigen::Dynamic>;
template <class S>
using HeadMap = Eigen::Map<RowMat<S>, 0, Eigen::OuterStride<>>;  // (T, D), row stride H·D
template <class S>
using ConstHeadMap = Eigen::Map<const RowMat<S>, 0, Eigen::OuterStride<>>;

// The (T, D) slice of head h, batch b of a (B, T, H, D) tensor.
template <class S>
ConstHeadMap<S> head(const S* x, const AttnShape& s, int b, int h) {
  return {x + (int64_t(b) * s.T * s.H + h) * s.D, s.T, s.D, Eigen::OuterStride<>(s.H * s.D)};
}
template <class S>
HeadMap<S> head(S* x, const AttnShape& s, int b, int h) {
  return {x + (int64_t(b) * s.T * s.H + h) * s.D, s.T, s.D, Eigen::OuterStride<>(s.H * s.D)};
}

// Calls f(b, h, scratch) for every head of s, the heads spread over the OpenMP threads (dynamic:
// threads may run at different speeds), each thread with its own scratch = make(). A head's result
// depends only on its inputs, so not on the thread count.
template <class Make, class F>
void for_each_head(const AttnShape& s, Make make, F f) {
#pragma omp parallel
  {
    auto scratch = make();
#pragma omp for schedule(dynamic)
    for (int bh = 0; bh < s.B * s.H; ++bh) f(bh / s.H, bh % s.H, scratch);
  }
}

// Index of the per-head scalar (b, t, h) in a (B, T, H) tensor.
inline int64_t scalar_index(const AttnShape& s, int b, int t, int h) {
  return (int64_t(b) * s.T + t) * s.H + h;
}

// G_t = Σ_{u≤t} log_f_u of head (b, h), accumulated in double; G = 0 without a gate.
template <class V, class S>
void gate_prefix(V& G,            // (T)
                 const S* log_f,  // (B, T, H) or null
                 const AttnShape& s, int b, int h) {
  double acc = 0;
  for (int t = 0; t < s.T; ++t) {
    if (log_f) acc += log_f[scalar_index(s, b, t, h)];
    G(t) = S(acc);
  }
}

// Its backward: dlog_f_t = Σ_{i≥t} dG_i of head (b, h), accumulated in double.
template <class S, class V>
void gate_backward(S* dlog_f,     // (B, T, H)
                   const V& dG,   // (T)
                   const AttnShape& s, int b, int h) {
  double acc = 0;
  for (int t = s.T - 1; t >= 0; --t) {
    acc += dG(t);
    dlog_f[scalar_index(s, b, t, h)] = S(acc);
  }
}

// X_ij = a_i·b_j for j ≤ i, by row blocks of kRowBlock: about half the flops of a full product.
// Inside the diagonal blocks the entries above the diagonal are written too; those further right
// are not.
constexpr int kRowBlock = 64;
template <class S>
void causal_product(RowMat<S>& X,  // (T, T)
                    ConstHeadMap<S> a, ConstHeadMap<S> b) {
  const int T = int(a.rows());
  for (int r0 = 0; r0 < T; r0 += kRowBlock) {
    const int n = std::min(kRowBlock, T - r0);
    X.block(r0, 0, n, r0 + n).noalias() = a.middleRows(r0, n) * b.topRows(r0 + n).transpose();
  }
}

}  // namespace pb::attn
