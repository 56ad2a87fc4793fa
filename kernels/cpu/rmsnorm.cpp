// RMSNorm: y = x · rstd · g, rstd = 1 / sqrt(mean(x²) + eps), one rstd per row.
#include "kernels/cpu/eigen.h"
#include "kernels/cpu/runs.h"
#include "kernels/ops.h"

namespace pb {

template <class S>
void rmsnorm_forward(S* y, S* rstd, const S* x, const S* g, int N, int C, double eps, Runs runs) {
  if (split_runs("rmsnorm_forward", N, runs, [&](int r, int64_t i, int n) {
        rmsnorm_forward(y + i * C, rstd + i, x + i * C, g + r * runs.stride, n, C, eps);
      }))
    return;
  MapR<S> Y(y, N, C);         // (N, C)
  const CMapR<S> X(x, N, C);  // (N, C)
  const CMapV<S> G(g, C);     // (C)
#pragma omp parallel for schedule(static) if (int64_t(N) * C >= kParallelMin)
  for (int n = 0; n < N; ++n) {
    const S r = S(1) / std::sqrt(X.row(n).squaredNorm() / S(C) + S(eps));  // rstd
    rstd[n] = r;
    Y.row(n) = r * X.row(n).cwiseProduct(G);  // y = x · rstd · g
  }
}

// dx = rstd · g ⊙ dy − rstd³/C · x · Σ_c(dy ⊙ g ⊙ x),  dg += Σ_n dy ⊙ x · rstd
template <class S>
void rmsnorm_backward(S* dx, S* dg, const S* dy, const S* x, const S* rstd, const S* g, int N,
                      int C, GradMode mode, Runs runs) {
  if (split_runs("rmsnorm_backward", N, runs, [&](int r, int64_t i, int n) {
        rmsnorm_backward(dx + i * C, dg + r * runs.stride, dy + i * C, x + i * C, rstd + i,
                         g + r * runs.stride, n, C, mode);
      }))
    return;
  MapR<S> dX(dx, N, C);         // (N, C)
  const CMapR<S> dY(dy, N, C);  // (N, C)
  const CMapR<S> X(x, N, C);    // (N, C)
  const CMapV<S> G(g, C);       // (C)
  const bool accumulate = mode == GradMode::Accumulate;
#pragma omp parallel for schedule(static) if (int64_t(N) * C >= kParallelMin)
  for (int n = 0; n < N; ++n) {
    const S r = rstd[n];
    const S dot = dY.row(n).cwiseProduct(G).dot(X.row(n));  // Σ_c dy g x
    const RowV<S> d = r * dY.row(n).cwiseProduct(G) - (r * r * r * dot / S(C)) * X.row(n);
    if (accumulate)
      dX.row(n) += d;
    else
      dX.row(n) = d;
  }
  chunked_row_sum(dg, N, C, [&](int n, S* acc) {
    MapV<S>(acc, C) += rstd[n] * dY.row(n).cwiseProduct(X.row(n));  // dg += dy ⊙ x · rstd
  });
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int, int, double,
                                     Runs);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int, int,
                                      double, Runs);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*,
                                      const float*, int, int, GradMode, Runs);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*,
                                       const double*, const double*, int, int, GradMode, Runs);

}  // namespace pb
