// Row-wise L2 normalisation: y = x / s, s = sqrt(‖x‖² + eps).
#include "kernels/cpu/eigen.h"
#include "kernels/ops.h"

namespace pb {

template <class S>
void l2norm_forward(S* y, const S* x, int n_rows, int D, double eps) {
  MapR<S> Y(y, n_rows, D);         // (n_rows, D)
  const CMapR<S> X(x, n_rows, D);  // (n_rows, D)
#pragma omp parallel for schedule(static) if (int64_t(n_rows) * D >= kParallelMin)
  for (int n = 0; n < n_rows; ++n)
    Y.row(n) = X.row(n) / std::sqrt(X.row(n).squaredNorm() + S(eps));  // y = x / s
}

// dx = dy / s − x · (x·dy) / s³
template <class S>
void l2norm_backward(S* dx, const S* dy, const S* x, int n_rows, int D, double eps) {
  MapR<S> dX(dx, n_rows, D);         // (n_rows, D)
  const CMapR<S> dY(dy, n_rows, D);  // (n_rows, D)
  const CMapR<S> X(x, n_rows, D);    // (n_rows, D)
#pragma omp parallel for schedule(static) if (int64_t(n_rows) * D >= kParallelMin)
  for (int n = 0; n < n_rows; ++n) {
    const S inv = S(1) / std::sqrt(X.row(n).squaredNorm() + S(eps));  // 1 / s
    dX.row(n) = inv * dY.row(n) - (inv * inv * inv * X.row(n).dot(dY.row(n))) * X.row(n);
  }
}

template void l2norm_forward<float>(float*, const float*, int, int, double);
template void l2norm_forward<double>(double*, const double*, int, int, double);
template void l2norm_backward<float>(float*, const float*, const float*, int, int, double);
template void l2norm_backward<double>(double*, const double*, const double*, int, int, double);

}  // namespace pb
