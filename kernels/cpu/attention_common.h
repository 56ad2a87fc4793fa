// Shared by the CPU attention kernels: Eigen views of one head's (T, D) slice of a (B, T, H, D)
// tensor, and the causal (lower-triangular) product of two such slices.
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
