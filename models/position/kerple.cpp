// kerple: KERPLE-log (Chi et al. 2022). Softmax attention plus a learned per-head bias
//   b_h(i − j) = −p1_h · log(1 + p2_h · (i − j)),  p = softplus(a) > 0,
// computed each step by kernels/cpu/kerple_bias.cpp and added by the softmax kernel's bias hook.
// Init: a1, a2 ~ N(0, 0.02²), so p1, p2 start near log 2 ≈ 0.69, inside the paper's initial ranges
// (p1 ∈ U(0, 2), p2 ∈ U(0, 1)); softplus keeps them positive (the paper clamps at a small ε).
#include "models/position/softmax_args.h"

namespace pb {
namespace {

template <class E>
class Kerple final : public PositionEncoding<E> {
 public:
  using S = typename E::Scalar;
  explicit Kerple(const Spec&) {}

  std::vector<ParamSpec> params(const LayerDims& d) const override {
    return {{"a1", {d.H}, Init::Normal, false}, {"a2", {d.H}, Init::Normal, false}};
  }

  void forward(S* out, const AttnInputs<S>& in) override {
    const int H = in.dims.H;
    lse_.resize(size_t(in.B) * in.T * H);
    bias_.resize(size_t(H) * in.T);
    dbias_.resize(bias_.size());
    if (in.given.empty()) E::kerple_bias_forward(bias_.data(), in.params[0], in.params[1], H, in.T);
    E::softmax_attention_forward(out, lse_.data(), in.q, in.k, in.v, (const S*)nullptr, softmax_args(in),
                                 in.given.empty() ? bias_.data() : in.given[0]);
  }

  void backward(const AttnGrads<S>& g, const AttnInputs<S>& in) override {
    const bool given = !in.given.empty();
    E::softmax_attention_backward(g.dq, g.dk, g.dv, (S*)nullptr, g.dout, g.out, lse_.data(), in.q, in.k, in.v,
                                  (const S*)nullptr, softmax_args(in), given ? g.dgiven[0] : dbias_.data(),
                                  given ? in.given[0] : bias_.data());
    if (!given)
      E::kerple_bias_backward(g.dparams[0], g.dparams[1], dbias_.data(), in.params[0], in.params[1],
                              in.dims.H, in.T);
  }

 private:
  typename E::template Buffer<S> lse_;           // (B, T, H)
  typename E::template Buffer<S> bias_, dbias_;  // (H, T)
};

}  // namespace

EncodingEntry kerple_encoding() {
  return make_entry<Kerple>(
      {"kerple", "KERPLE-log: learned bias -p1_h log(1 + p2_h (i - j)), p1, p2 > 0", {}},
      {.family = AttentionFamily::Softmax, .inputs = {AttnInput::Bias}});
}

}  // namespace pb
