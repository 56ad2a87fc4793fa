// sba: stick-breaking attention (Tan et al. 2025), no position encoding: each query breaks a stick
// from the nearest key backwards, A_ij = σ(z_ij) ∏_{j<l<i} (1 − σ(z_il)); the leftover mass goes to
// the current token. Computed in log space by the kernel.
#include <cmath>

#include "models/position/decode.h"

namespace pb {
namespace {

template <class E>
class Sba final : public PositionEncoding<E> {
 public:
  using S = typename E::Scalar;
  explicit Sba(const Spec&) {}

  void forward(S* out, const AttnInputs<S>& in) override {
    E::stick_breaking_forward(out, in.q, in.k, in.v, args(in));
  }

  void backward(const AttnGrads<S>& g, const AttnInputs<S>& in) override {
    E::stick_breaking_backward(g.dq, g.dk, g.dv, g.dout, in.q, in.k, in.v, args(in));
  }

  std::unique_ptr<AttnDecoder<S>> decoder(const LayerDims& d, int B) override {
    return std::make_unique<Decoder>(d, B);
  }

 private:
  // The stick of token t broken over the cached keys, right to left, in log space as in
  // kernels/cpu/stick_breaking.cpp: O(t) per token and head.
  class Decoder final : public AttnDecoder<S> {
   public:
    Decoder(const LayerDims& d, int B) : cache_(d, B) {}

    void step(S* out, const DecodeInputs<S>& in) override {
      const int H = in.dims.H, D = in.dims.D, t = in.t;
      if (t != cache_.tokens()) fail("decoder: token {} fed to a state at token {}", t, cache_.tokens());
      cache_.append(in.k, in.v);
      const S scale = S(1.0 / std::sqrt(double(D)));
#pragma omp parallel for schedule(static) if (int64_t(in.B) * H * t * D >= (int64_t(1) << 15))
      for (int bh = 0; bh < in.B * H; ++bh) {
        const int b = bh / H, h = bh % H;
        const auto K = cache_.key_head(b, h), V = cache_.value_head(b, h);  // (t + 1, D)
        const Eigen::Map<const Vec> q(in.q + int64_t(bh) * D, D);            // (D)
        Vec w(t + 1);                                                        // A_tj (j < t), rem_t
        auto z = w.head(t).array();
        // z_tj = scale·q_t·k_j, j < t
        z = (q * K.topRows(t).transpose()).array() * scale;
        // softplus(z) = max(z, 0) + log(1 + exp(−|z|)),  log σ(z) = min(z, 0) − log(1 + exp(−|z|))
        const Eigen::Array<S, 1, Eigen::Dynamic> l = (-z.abs()).exp().log1p(), sp = z.max(S(0)) + l,
                                                 log_sig = z.min(S(0)) - l;
        // log A_tj = log σ(z_tj) − Σ_{j<l<t} softplus(z_tl), right to left
        double tail = 0;
        for (int j = t - 1; j >= 0; --j) {
          z(j) = log_sig(j) - S(tail);
          tail += sp(j);
        }
        z = z.exp();
        w(t) = S(std::exp(-tail));  // rem_t
        // o_t = Σ_{j<t} A_tj v_j + rem_t v_t
        Eigen::Map<Vec>(out + int64_t(bh) * D, D).noalias() = w * V;
      }
    }

   private:
    using Vec = Eigen::Matrix<S, 1, Eigen::Dynamic>;
    KvCache<S> cache_;
  };

  static StickBreakingArgs args(const AttnInputs<S>& in) {
    return {{in.B, in.T, in.dims.H, in.dims.D}, 1.0 / std::sqrt(double(in.dims.D))};
  }
};

}  // namespace

EncodingEntry sba_encoding() {
  return make_entry<Sba>({"sba", "stick-breaking attention (log space, leftover to the current token)", {}},
                         {.family = AttentionFamily::StickBreaking, .bf16 = false,
                          .style = {"#009e73", 3, 0}});  // triangle up
}

}  // namespace pb
