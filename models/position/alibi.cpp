// alibi: attention with linear biases (Press et al. 2022): a fixed per-head bias −m_h·(i − j) with
// slopes m_h = 2^(−8h/H), h = 1..H. It is the FoX gate with a constant log f = −m_h, so it reuses
// the softmax attention kernel's gate and has no parameters.
#include <cmath>

#include "models/position/decode.h"
#include "models/position/softmax_args.h"

namespace pb {
namespace {

template <class E>
class Alibi final : public PositionEncoding<E> {
 public:
  using S = typename E::Scalar;
  explicit Alibi(const Spec&) {}

  void forward(S* out, const AttnInputs<S>& in) override {
    const int H = in.dims.H;
    const size_t n = size_t(in.B) * in.T * H;
    if (log_f_.size() != n) {  // depends on the shape only: filled when it changes
      std::vector<S> slopes(n);
      for (size_t i = 0; i < n; ++i) slopes[i] = neg_slope(int(i % H), H);
      log_f_.resize(n);
      dlog_f_.resize(n);
      lse_.resize(n);
      E::upload(log_f_.data(), slopes.data(), n);
    }
    E::softmax_attention_forward(out, lse_.data(), in.q, in.k, in.v, log_f_.data(), softmax_args(in));
  }

  void backward(const AttnGrads<S>& g, const AttnInputs<S>& in) override {
    E::softmax_attention_backward(g.dq, g.dk, g.dv, dlog_f_.data(), g.dout, g.out, lse_.data(), in.q,
                                  in.k, in.v, log_f_.data(), softmax_args(in));
  }

  std::unique_ptr<AttnDecoder<S>> decoder(const LayerDims& d, int B, int Tmax) override {
    return std::make_unique<Decoder>(d, B, Tmax);
  }

 private:
  static S neg_slope(int h, int H) { return -S(std::exp2(-8.0 * double(h + 1) / H)); }  // −m_h, h 0-based

  // The cache with the constant gate log f = −m_h.
  struct Decoder final : SoftmaxDecoder<E> {
    Decoder(const LayerDims& d, int B, int Tmax) : SoftmaxDecoder<E>(d, B, Tmax, true) {
      std::vector<S> slopes(size_t(B) * d.H);
      for (size_t i = 0; i < slopes.size(); ++i) slopes[i] = neg_slope(int(i % d.H), d.H);
      slopes_.resize(slopes.size());
      E::upload(slopes_.data(), slopes.data(), slopes.size());
    }
    void log_f(S* lf, const DecodeInputs<S>&) override { E::copy(lf, slopes_.data(), slopes_.size()); }
    typename E::template Buffer<S> slopes_;  // (B, H) −m_h
  };

  typename E::template Buffer<S> log_f_, dlog_f_, lse_;  // (B, T, H); the slopes are fixed, dlog_f_ is unused
};

}  // namespace

EncodingEntry alibi_encoding() {
  return make_entry<Alibi>({"alibi", "linear distance bias -m_h (i - j), slopes 2^(-8h/H)", {}},
                           {.family = AttentionFamily::Softmax, .gate = true,
                            .style = {"#56b4e9", 3, 180}});  // triangle down
}

}  // namespace pb
