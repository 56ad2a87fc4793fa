// rope: rotary position embedding (Su et al.), rotate-half pairing over the whole head dim,
// applied to q and k before causal softmax attention. Backward: rotate the gradients back.
#include <cmath>

#include "core/error.h"
#include "models/position/decode.h"
#include "models/position/softmax_args.h"

namespace pb {
namespace {

template <class E>
class Rope final : public PositionEncoding<E> {
 public:
  using S = typename E::Scalar;
  explicit Rope(const Spec& spec) : base_(spec.get_float("base")) {
    if (!(base_ > 0)) fail("rope: base must be > 0 (frequencies base^(-2i/D)), got {}", base_);
  }

  std::vector<ParamSpec> params(const LayerDims& d) const override {
    if (d.D % 2) fail("rope needs an even head dim (d_model / heads), got {}", d.D);
    return {};
  }

  void forward(S* out, const AttnInputs<S>& in) override {
    const size_t n = size_t(in.B) * in.T * in.dims.H * in.dims.D;
    q_.resize(n);
    k_.resize(n);
    lse_.resize(size_t(in.B) * in.T * in.dims.H);
    const RopeArgs rope{{in.B, in.T, in.dims.H, in.dims.D}, base_};
    E::rope_forward(q_.data(), in.q, rope);  // q' = R_t q
    E::rope_forward(k_.data(), in.k, rope);  // k' = R_t k
    E::softmax_attention_forward(out, lse_.data(), q_.data(), k_.data(), in.v, (const S*)nullptr,
                                 softmax_args(in));
  }

  void backward(const AttnGrads<S>& g, const AttnInputs<S>& in) override {
    E::softmax_attention_backward(g.dq, g.dk, g.dv, (S*)nullptr, g.dout, g.out, lse_.data(),
                                  q_.data(), k_.data(), in.v, (const S*)nullptr, softmax_args(in));
    const RopeArgs rope{{in.B, in.T, in.dims.H, in.dims.D}, base_};
    E::rope_backward(g.dq, g.dq, rope);  // dq = R_tᵀ dq'
    E::rope_backward(g.dk, g.dk, rope);
  }

  std::unique_ptr<AttnDecoder<S>> decoder(const LayerDims& d, int B, int Tmax) override {
    return std::make_unique<Decoder>(d, B, Tmax, base_);
  }

 private:
  // The cache with q and k rotated once, at the token's position (rope_forward with offset t).
  struct Decoder final : SoftmaxDecoder<E> {
    Decoder(const LayerDims& d, int B, int Tmax, double base)
        : SoftmaxDecoder<E>(d, B, Tmax, false), base_(base), q_(size_t(B) * d.H * d.D), k_(q_.size()) {}
    std::pair<const S*, const S*> position(const DecodeInputs<S>& in) override {
      const RopeArgs rope{{in.B, 1, in.dims.H, in.dims.D}, base_, in.t};
      E::rope_forward(q_.data(), in.q, rope);  // q' = R_t q
      E::rope_forward(k_.data(), in.k, rope);  // k' = R_t k
      return {q_.data(), k_.data()};
    }
    double base_;
    typename E::template Buffer<S> q_, k_;  // (B, H, D) rotated
  };

  double base_;
  typename E::template Buffer<S> q_, k_;  // (B, T, H, D) rotated
  typename E::template Buffer<S> lse_;    // (B, T, H)
};

}  // namespace

EncodingEntry rope_encoding() {
  return make_entry<Rope>({"rope", "rotary position embedding (rotate-half), softmax attention",
                           {{"base", ParamType::Float, "10000", "rotation base θ", {}}}},
                          {.family = AttentionFamily::Softmax, .style = {"#0072b2", 4, 45}});  // square
}

}  // namespace pb
