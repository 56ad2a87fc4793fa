// nope: causal softmax attention with no position information beyond the causal mask.
#include "models/position/decode.h"
#include "models/position/softmax_args.h"

namespace pb {
namespace {

template <class E>
class Nope final : public PositionEncoding<E> {
 public:
  using S = typename E::Scalar;
  explicit Nope(const Spec&) {}

  void forward(S* out, const AttnInputs<S>& in) override {
    lse_.resize(size_t(in.B) * in.T * in.dims.H);
    E::softmax_attention_forward(out, lse_.data(), in.q, in.k, in.v, (const S*)nullptr, softmax_args(in));
  }

  void backward(const AttnGrads<S>& g, const AttnInputs<S>& in) override {
    E::softmax_attention_backward(g.dq, g.dk, g.dv, (S*)nullptr, g.dout, g.out, lse_.data(), in.q,
                                  in.k, in.v, (const S*)nullptr, softmax_args(in));
  }

  std::unique_ptr<AttnDecoder<S>> decoder(const LayerDims& d, int B, int Tmax) override {
    return std::make_unique<SoftmaxDecoder<E>>(d, B, Tmax, false);
  }

 private:
  typename E::template Buffer<S> lse_;  // (B, T, H)
};

}  // namespace

EncodingEntry nope_encoding() {
  return make_entry<Nope>({"nope", "no position encoding: causal softmax attention", {}},
                          {.family = AttentionFamily::Softmax, .style = {"#999999", 0, 0}});  // circle
}

}  // namespace pb
