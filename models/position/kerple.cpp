// kerple: KERPLE-log (Chi et al. 2022). Softmax attention plus a learned per-head bias
//   b_h(i − j) = −p1_h · log(1 + p2_h · (i − j)),  p = softplus(a) > 0,
// computed each step by kernels/cpu/kerple_bias.cpp and added by the softmax kernel's bias hook.
// Init: a1, a2 ~ N(0, 0.02²), so p1, p2 start near log 2 ≈ 0.69, inside the paper's initial ranges
// (p1 ∈ U(0, 2), p2 ∈ U(0, 1)); softplus keeps them positive (the paper clamps at a small ε).
#include "models/position/bias_softmax.h"

namespace pb {
namespace {

template <class E>
class Kerple final : public BiasSoftmax<E> {
 public:
  using S = typename E::Scalar;
  explicit Kerple(const Spec&) {}

  std::vector<ParamSpec> params(const LayerDims& d) const override {
    return {{"a1", {d.H}, Init::Normal, false}, {"a2", {d.H}, Init::Normal, false}};
  }

  void table(S* bias, const AttnInputs<S>& in) override {
    E::kerple_bias_forward(bias, in.params[0], in.params[1], in.dims.H, in.T);
  }

  void table_backward(const AttnGrads<S>& g, const S* dbias, const AttnInputs<S>& in) override {
    E::kerple_bias_backward(g.dparams[0], g.dparams[1], dbias, in.params[0], in.params[1], in.dims.H, in.T);
  }
};

}  // namespace

EncodingEntry kerple_encoding() {
  return make_entry<Kerple>(
      {"kerple", "KERPLE-log: learned bias -p1_h log(1 + p2_h (i - j)), p1, p2 > 0", {}},
      {.family = AttentionFamily::Softmax, .inputs = {AttnInput::Bias}});
}

}  // namespace pb
