// y = x w and its gradients, by Eigen's blocked GEMM on fixed output tiles.
//
// Eigen's own OpenMP GEMM picks its k-blocking from the thread count, which changes the rounding.
// Here the output is cut into fixed kTile × kTile tiles computed in parallel, and Eigen runs each
// tile's GEMM on one thread (it does not nest inside our parallel region); products smaller than
// kGemmMin multiply-adds run serially as one coefficient-based product (never threaded, and cheaper
// than a parallel region). Every entry's summation order thus depends on the shapes only.
// kTile = 128 matches Eigen's single-thread speed.
#include <algorithm>

#include "kernels/cpu/eigen.h"
#include "kernels/cpu/runs.h"
#include "kernels/ops.h"

namespace pb {

namespace {

constexpr int kTile = 128;
constexpr int64_t kGemmMin = int64_t(1) << 18;

template <class C, class P>
void assign(C&& c, const P& p, bool accumulate) {
  if (accumulate)
    c.noalias() += p;
  else
    c.noalias() = p;
}

// c (R, Cc) = a (R, K) b (K, Cc), or += when accumulate.
template <class S, class A, class B>
void gemm(MapR<S>& c, const A& a, const B& b, bool accumulate) {
  const int R = int(c.rows()), Cc = int(c.cols());
  if (int64_t(R) * Cc * a.cols() < kGemmMin) return assign(c, a.lazyProduct(b), accumulate);
  const int n_tc = (Cc + kTile - 1) / kTile, n_tiles = (R + kTile - 1) / kTile * n_tc;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < n_tiles; ++t) {
    const int r0 = t / n_tc * kTile, c0 = t % n_tc * kTile;
    const int nr = std::min(kTile, R - r0), nc = std::min(kTile, Cc - c0);
    assign(c.block(r0, c0, nr, nc), a.middleRows(r0, nr) * b.middleCols(c0, nc), accumulate);
  }
}

}  // namespace

template <class S>
void matmul_forward(S* y, const S* x, const S* w, int N, int K, int M, GradMode mode, Runs runs) {
  if (split_runs("matmul_forward", N, runs, [&](int r, int64_t i, int n) {
        matmul_forward(y + i * M, x + i * K, w + r * runs.stride, n, K, M, mode);
      }))
    return;
  MapR<S> Y(y, N, M);         // (N, M)
  const CMapR<S> X(x, N, K);  // (N, K)
  const CMapR<S> W(w, K, M);  // (K, M)
  gemm(Y, X, W, mode == GradMode::Accumulate);  // y (+)= x w
}

template <class S>
void matmul_backward(S* dx, S* dw, const S* dy, const S* x, const S* w, int N, int K, int M,
                     GradMode mode, Runs runs) {
  if (split_runs("matmul_backward", N, runs, [&](int r, int64_t i, int n) {
        matmul_backward(dx ? dx + i * K : nullptr, dw + r * runs.stride, dy + i * M, x + i * K,
                        w + r * runs.stride, n, K, M, mode);
      }))
    return;
  const CMapR<S> dY(dy, N, M);  // (N, M)
  const CMapR<S> X(x, N, K);    // (N, K)
  const CMapR<S> W(w, K, M);    // (K, M)
  if (dx) {
    MapR<S> dX(dx, N, K);                                       // (N, K)
    gemm(dX, dY, W.transpose(), mode == GradMode::Accumulate);  // dx (+)= dy wᵀ
  }
  MapR<S> dW(dw, K, M);               // (K, M)
  gemm(dW, X.transpose(), dY, true);  // dw += xᵀ dy
}

template void matmul_forward<float>(float*, const float*, const float*, int, int, int, GradMode, Runs);
template void matmul_forward<double>(double*, const double*, const double*, int, int, int, GradMode,
                                     Runs);
template void matmul_backward<float>(float*, float*, const float*, const float*, const float*, int,
                                     int, int, GradMode, Runs);
template void matmul_backward<double>(double*, double*, const double*, const double*,
                                      const double*, int, int, int, GradMode, Runs);

}  // namespace pb
