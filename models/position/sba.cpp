// sba: stick-breaking attention (Tan et al. 2025), no position encoding: each query breaks a stick
// from the nearest key backwards, A_ij = σ(z_ij) ∏_{j<l<i} (1 − σ(z_il)) with z_ij = scale·q_i·k_j +
// bias; the leftover mass goes to the current token. Computed in log space by the kernel. bias (a
// constant, not learned; 0 as in the authors' code) sets the prior at init: σ(0) = 1/2 halves the
// stick per token, so a key d tokens back weighs about 2^−d; a negative bias, e.g. −5 (σ ≈ 0.0067),
// spreads it over ~150 tokens.
#include <cmath>

#include "models/position/decode.h"

namespace pb {
namespace {

template <class E>
class Sba final : public PositionEncoding<E> {
 public:
  using S = typename E::Scalar;
  explicit Sba(const Spec& s) : bias_(s.get_float("bias")) {}

  void forward(S* out, const AttnInputs<S>& in) override {
    E::stick_breaking_forward(out, in.q, in.k, in.v, args(in));
  }

  void backward(const AttnGrads<S>& g, const AttnInputs<S>& in) override {
    E::stick_breaking_backward(g.dq, g.dk, g.dv, g.dout, in.q, in.k, in.v, args(in));
  }

  std::unique_ptr<AttnDecoder<S>> decoder(const LayerDims& d, int B, int Tmax) override {
    return std::make_unique<Decoder>(d, B, Tmax, bias_);
  }

 private:
  // The stick of token t broken over the cached keys, right to left (decode_stick_breaking): O(t)
  // per token and head.
  class Decoder final : public AttnDecoder<S> {
   public:
    Decoder(const LayerDims& d, int B, int Tmax, double bias) : cache_(d, B, Tmax), bias_(bias) {}

    void step(S* out, const DecodeInputs<S>& in) override {
      DecodeArgs a = cache_.args(in);
      a.bias = bias_;
      cache_.append(in.k, in.v, a);
      E::decode_stick_breaking(out, in.q, cache_.keys(), cache_.values(), a);
    }

   private:
    KvCache<E> cache_;
    double bias_;
  };

  StickBreakingArgs args(const AttnInputs<S>& in) const {
    return {{in.B, in.T, in.dims.H, in.dims.D}, 1.0 / std::sqrt(double(in.dims.D)), bias_};
  }

  double bias_;  // added to every logit
};

}  // namespace

EncodingEntry sba_encoding() {
  return make_entry<Sba>({"sba", "stick-breaking attention (log space, leftover to the current token)",
                          {{"bias", ParamType::Float, "0",
                            "a constant added to every logit: 0 (the authors'), σ(0) = 1/2 per token; "
                            "negative spreads the prior stick over more tokens",
                            {}, true}}},
                         {.family = AttentionFamily::StickBreaking, .bf16 = false,
                          .test_variants = {"sba:bias=-3"}, .style = {"#009e73", 3, 0}});  // triangle up
}

}  // namespace pb
