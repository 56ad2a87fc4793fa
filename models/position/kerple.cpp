// kerple: KERPLE-log (Chi et al. 2022). Softmax attention plus a learned per-head bias
//   b_h(i − j) = −p1_h · log(1 + p2_h · (i − j)),  p = softplus(a) > 0,
// its table computed on the host each step from a1, a2 (HostBiasSoftmax, bias_softmax.h) and added
// by the softmax kernel's bias hook.
// Init: a1, a2 ~ N(0, 0.02²), so p1, p2 start near log 2 ≈ 0.69, inside the paper's initial ranges
// (p1 ∈ U(0, 2), p2 ∈ U(0, 1)); softplus keeps them positive (the paper clamps at a small ε).
#include <algorithm>
#include <cmath>

#include "models/position/bias_softmax.h"

namespace pb {
namespace {

double softplus(double a) { return std::max(a, 0.0) + std::log1p(std::exp(-std::abs(a))); }
double sigmoid(double a) { return 1.0 / (1.0 + std::exp(-a)); }  // softplus'(a)

template <class E>
class Kerple final : public HostBiasSoftmax<E> {
 public:
  explicit Kerple(const Spec&) {}

  std::vector<ParamSpec> params(const LayerDims& d) const override {
    return {{"a1", {d.H}, Init::Normal, false}, {"a2", {d.H}, Init::Normal, false}};
  }

  double bias(const double* a, int r) const override {
    return -softplus(a[0]) * std::log1p(softplus(a[1]) * r);
  }

  void bias_gradient(double* da, const double* a, int r) const override {
    const double p1 = softplus(a[0]), p2 = softplus(a[1]);
    da[0] = -std::log1p(p2 * r) * sigmoid(a[0]);     // ∂b/∂p1 = −log(1 + p2 r)
    da[1] = -p1 * r / (1 + p2 * r) * sigmoid(a[1]);  // ∂b/∂p2 = −p1 r / (1 + p2 r)
  }
};

}  // namespace

EncodingEntry kerple_encoding() {
  return make_entry<Kerple>(
      {"kerple", "KERPLE-log: learned bias -p1_h log(1 + p2_h (i - j)), p1, p2 > 0", {}},
      {.family = AttentionFamily::Softmax, .inputs = {AttnInput::Bias},
       .stacks = false});  // one bias table (H, T) for the whole batch
}

}  // namespace pb
