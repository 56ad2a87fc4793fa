// The base of the encodings that add a relative-position bias table to causal softmax attention
// (kerple, t5): s_ij = τ q_i·k_j + b_h(i − j). A derived encoding computes the table b (H, T)
// from its parameters (table()) and maps the table's gradient back onto them (table_backward());
// the attention, its gradients, `pathbench attention`'s given table and decoding are handled here.
#pragma once

#include "models/position/decode.h"
#include "models/position/softmax_args.h"

namespace pb {

template <class E>
class BiasSoftmax : public PositionEncoding<E> {
 public:
  using S = typename E::Scalar;

  void forward(S* out, const AttnInputs<S>& in) override {
    lse_.resize(size_t(in.B) * in.T * in.dims.H);
    bias_.resize(size_t(in.dims.H) * in.T);
    dbias_.resize(bias_.size());
    if (in.given.empty()) table(bias_.data(), in);
    E::softmax_attention_forward(out, lse_.data(), in.q, in.k, in.v, (const S*)nullptr, softmax_args(in),
                                 in.given.empty() ? bias_.data() : in.given[0]);
  }

  void backward(const AttnGrads<S>& g, const AttnInputs<S>& in) override {
    const bool given = !in.given.empty();
    E::softmax_attention_backward(g.dq, g.dk, g.dv, (S*)nullptr, g.dout, g.out, lse_.data(), in.q, in.k, in.v,
                                  (const S*)nullptr, softmax_args(in), given ? g.dgiven[0] : dbias_.data(),
                                  given ? in.given[0] : bias_.data());
    if (!given) table_backward(g, dbias_.data(), in);
  }

  std::unique_ptr<AttnDecoder<S>> decoder(const LayerDims& d, int B, int Tmax) override {
    return std::make_unique<Decoder>(*this, d, B, Tmax);
  }

 protected:
  // bias (H, T) = b_h(r), r = 0 .. T − 1, from the parameters in.params.
  virtual void table(S* bias, const AttnInputs<S>& in) = 0;
  // g.dparams += the gradient of the table's parameters given dbias (H, T).
  virtual void table_backward(const AttnGrads<S>& g, const S* dbias, const AttnInputs<S>& in) = 0;

 private:
  // The cache with the table of the decoder's maximum length, computed at the first token (b_h(r)
  // does not depend on the table's length).
  class Decoder final : public SoftmaxDecoder<E> {
   public:
    Decoder(BiasSoftmax& enc, const LayerDims& d, int B, int Tmax)
        : SoftmaxDecoder<E>(d, B, Tmax, false), enc_(enc) {}

   protected:
    const S* bias(const DecodeInputs<S>& in, int& stride) override {
      const int length = this->Tmax();
      if (table_.empty()) {
        table_.resize(size_t(in.dims.H) * length);
        enc_.table(table_.data(), {1, length, in.dims, nullptr, nullptr, nullptr, nullptr, in.params});
      }
      stride = length;
      return table_.data();
    }

   private:
    BiasSoftmax& enc_;
    typename E::template Buffer<S> table_;  // (H, Tmax)
  };

  typename E::template Buffer<S> lse_;           // (B, T, H)
  typename E::template Buffer<S> bias_, dbias_;  // (H, T)
};

}  // namespace pb
