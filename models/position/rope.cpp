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

  std::unique_ptr<AttnDecoder<S>> decoder(const LayerDims& d, int B) override {
    return std::make_unique<Decoder>(d, B, base_);
  }

 private:
  // The cache with q and k rotated once, at the token's position, as kernels/cpu/rope.cpp does.
  struct Decoder final : SoftmaxDecoder<E> {
    Decoder(const LayerDims& d, int B, double base) : SoftmaxDecoder<E>(d, B, false), base_(base) {}
    void position(S* q, S* k, const DecodeInputs<S>& in) override {
      const int D = in.dims.D, half = D / 2;
      for (int m = 0; m < half; ++m) {
        const double angle = in.t * std::pow(base_, -2.0 * m / D);  // t·θ_m
        const S c = S(std::cos(angle)), s = S(std::sin(angle));
        for (S* x : {q, k})
          for (int row = 0; row < in.B * in.dims.H; ++row) {
            S* r = x + int64_t(row) * D;  // (D)
            const S x1 = r[m], x2 = r[m + half];
            r[m] = x1 * c - x2 * s;
            r[m + half] = x2 * c + x1 * s;
          }
      }
    }
    double base_;
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
