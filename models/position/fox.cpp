// fox: Forgetting Transformer (Lin et al. 2025). Per head and token a forget gate
// log f_t = logsigmoid(x_t W_f + b_f); logits scale·q_i·k_j + (G_i − G_j) with G the inclusive prefix
// sum of log f (the gate term is not scaled); b_f starts at gate_bias (0).
#include "models/position/decode.h"
#include "models/position/forget_gate.h"
#include "models/position/softmax_args.h"

namespace pb {
namespace {

template <class E>
class Fox final : public PositionEncoding<E> {
 public:
  using S = typename E::Scalar;
  explicit Fox(const Spec& s) : bias_(s.get_float("gate_bias")) {}

  std::vector<ParamSpec> params(const LayerDims& d) const override { return ForgetGate<E>::params(d, bias_); }

  void forward(S* out, const AttnInputs<S>& in) override {
    lse_.resize(size_t(in.B) * in.T * in.dims.H);
    const S* log_f = in.given.empty() ? gate_.forward(in, 0, 1.0) : in.given[0];
    E::softmax_attention_forward(out, lse_.data(), in.q, in.k, in.v, log_f, softmax_args(in));
  }

  void backward(const AttnGrads<S>& g, const AttnInputs<S>& in) override {
    const bool given = !in.given.empty();
    E::softmax_attention_backward(g.dq, g.dk, g.dv, given ? g.dgiven[0] : gate_.dlog_f(), g.dout, g.out,
                                  lse_.data(), in.q, in.k, in.v, given ? in.given[0] : gate_.log_f(),
                                  softmax_args(in));
    if (!given) gate_.backward(g, in, 0, 1.0);
  }

  std::unique_ptr<AttnDecoder<S>> decoder(const LayerDims& d, int B, int Tmax) override {
    return std::make_unique<Decoder>(d, B, Tmax);
  }

 private:
  // The cache with the token's forget gate.
  struct Decoder final : SoftmaxDecoder<E> {
    Decoder(const LayerDims& d, int B, int Tmax) : SoftmaxDecoder<E>(d, B, Tmax, true), z_(size_t(B) * d.H) {}
    void log_f(S* lf, const DecodeInputs<S>& in) override {
      ForgetGate<E>::log_f_rows(lf, z_.data(), in.x, in.params, 0, in.B, in.dims.C, in.dims.H, 1.0);
    }
    typename E::template Buffer<S> z_;  // (B, H)
  };

  double bias_;  // b_f at init
  ForgetGate<E> gate_;
  typename E::template Buffer<S> lse_;  // (B, T, H)
};

}  // namespace

EncodingEntry fox_encoding() {
  return make_entry<Fox>({"fox", "forgetting transformer: softmax attention + data-dependent decay",
                          {gate_bias_key()}},
                         {.family = AttentionFamily::Softmax, .gate = true, .inputs = {AttnInput::LogF},
                          .style = {"#e69f00", 4, 0}});  // diamond
}

}  // namespace pb
