// The KERPLE-log bias table (Chi et al. 2022) for the bias hook of softmax attention:
//   b_h(r) = −p1_h · log(1 + p2_h · r),  p = softplus(a) > 0,  r = 0 .. T − 1
// Backward: ∂b/∂p1 = −log(1 + p2 r), ∂b/∂p2 = −p1 r / (1 + p2 r), ∂p/∂a = σ(a); sums in double.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/ops.h"

namespace pb {
namespace {

double softplus(double a) { return std::max(a, 0.0) + std::log1p(std::exp(-std::abs(a))); }
double sigmoid(double a) { return 1.0 / (1.0 + std::exp(-a)); }

}  // namespace

template <class S>
void kerple_bias_forward(S* bias, const S* a1, const S* a2, int H, int T) {
  for (int h = 0; h < H; ++h) {
    const double p1 = softplus(a1[h]), p2 = softplus(a2[h]);
    for (int r = 0; r < T; ++r) bias[int64_t(h) * T + r] = S(-p1 * std::log1p(p2 * r));
  }
}

template <class S>
void kerple_bias_backward(S* da1, S* da2, const S* dbias, const S* a1, const S* a2, int H, int T) {
  for (int h = 0; h < H; ++h) {
    const double p1 = softplus(a1[h]), p2 = softplus(a2[h]);
    double dp1 = 0, dp2 = 0;
    for (int r = 0; r < T; ++r) {
      const double db = dbias[int64_t(h) * T + r];
      dp1 -= db * std::log1p(p2 * r);     // ∂b/∂p1 = −log(1 + p2 r)
      dp2 -= db * p1 * r / (1 + p2 * r);  // ∂b/∂p2 = −p1 r / (1 + p2 r)
    }
    da1[h] += S(dp1 * sigmoid(a1[h]));  // ∂p/∂a = σ(a)
    da2[h] += S(dp2 * sigmoid(a2[h]));
  }
}

template void kerple_bias_forward<float>(float*, const float*, const float*, int, int);
template void kerple_bias_forward<double>(double*, const double*, const double*, int, int);
template void kerple_bias_backward<float>(float*, float*, const float*, const float*, const float*, int, int);
template void kerple_bias_backward<double>(double*, double*, const double*, const double*, const double*, int,
                                           int);

}  // namespace pb
