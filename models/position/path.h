// PaTH attention (Yang et al. 2025), shared by `path` and `path_fox` (path + the FoX gate).
// Per token and head, a Householder-like transition H_t = I − β_t w_t w_tᵀ, with
//   w_t = L2norm_per_head( SiLU( causal_conv3( x_t W_down W_up ) ) ),  β_t = 2 σ(x_t W_β + b_β)
// (β optionally clipped to 2 − beta_clip), and logits scale · q_iᵀ H_i ⋯ H_{j+1} k_j (+ G_i − G_j).
// Ablations (spec keys, README.md): conv=0 drops the short convolution and its SiLU (w_t =
// L2norm(x_t W_down W_up), FLA's use_w_shortconv=False); beta_max=1 gives β_t = σ(·) ∈ (0, 1), no
// negative eigenvalue; path_fox's gate_scale=1 multiplies log f by the scale, so the logit is
// scale · (q_iᵀ ⋯ k_j + G_i − G_j) as in FLA's PaTH layer, instead of FoX's unscaled gate.
// The attention itself is kernels/cpu/path_attention.cpp (blockwise UT transform). Decoding keeps
// an ordinary KV cache whose keys are updated in place (path_key_update, kernels/ops.h).
#pragma once
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"
#include "models/position/decode.h"
#include "models/position/forget_gate.h"

namespace pb {

template <class E>
class Path : public PositionEncoding<E> {
 public:
  using S = typename E::Scalar;
  Path(const Spec& spec, bool gate)
      : rank_(int(in_range(spec, "w_rank", 1, 1 << 16))),
        beta_args_{spec.get_float("beta_max"), spec.get_float("beta_clip")},
        block_(int(in_range(spec, "block", 1, 1 << 20))),
        conv_(in_range(spec, "conv", 0, 1) == 1),
        gate_(gate),
        gate_scale_(gate && in_range(spec, "gate_scale", 0, 1) == 1),
        gate_bias_(gate ? spec.get_float("gate_bias") : 0) {
    const auto [max, clip] = beta_args_;
    if (clip < 0 || clip >= 2) fail("{}: beta_clip must be in [0, 2), got {}", spec.name(), clip);
    if (!(max > 0 && max <= 2)) fail("{}: beta_max must be in (0, 2], got {}", spec.name(), max);
  }

  std::vector<ParamSpec> params(const LayerDims& d) const override {
    std::vector<ParamSpec> p = {
        {"w_down", {d.C, rank_}, Init::Normal, true},  // low-rank projection of x
        {"w_up", {rank_, d.H * d.D}, Init::Normal, true}};
    if (conv_) p.push_back({"w_conv", {kShortConvWidth, d.H * d.D}, Init::Normal, false});  // a[k] multiplies t − k
    p.push_back({"w_beta", {d.C, d.H}, Init::Normal, true});
    p.push_back({"b_beta", {d.H}, Init::Zeros, false});
    if (gate_)
      for (auto& g : ForgetGate<E>::params(d, gate_bias_)) p.push_back(g);
    return p;
  }

  void forward(S* out, const AttnInputs<S>& in) override {
    lse_.resize(size_t(in.B) * in.T * in.dims.H);
    if (!in.given.empty())  // w, β (, log f) as given
      return E::path_attention_forward(out, lse_.data(), in.q, in.k, in.v, in.given[0], in.given[1],
                                       gate_ ? in.given[2] : nullptr, args(in));
    const int N = in.B * in.T, C = in.dims.C, H = in.dims.H, HD = H * in.dims.D;
    u1_.resize(size_t(N) * rank_);
    u2_.resize(size_t(N) * HD);
    c_.resize(u2_.size());
    w_.resize(u2_.size());
    zb_.resize(size_t(N) * H);
    beta_.resize(zb_.size());
    const auto& p = in.params;
    const Runs runs = in.runs;
    E::matmul_forward(u1_.data(), in.x, p[0], N, C, rank_, GradMode::Overwrite, runs);         // u1 = x W_down
    E::matmul_forward(u2_.data(), u1_.data(), p[1], N, rank_, HD, GradMode::Overwrite, runs);  // u2 = u1 W_up
    if (conv_) E::short_conv_forward(c_.data(), u2_.data(), p[2], in.B, in.T, HD, runs);  // c = SiLU(conv3(u2))
    const S* c = conv_ ? c_.data() : u2_.data();                                    // (else c = u2)
    E::l2norm_forward(w_.data(), c, N * H, in.dims.D, kEps);  // w = c / sqrt(|c|² + eps)
    head_projection_forward<E>(zb_.data(), in.x, p[beta_at()], p[beta_at() + 1], N, C, H, runs);  // z_β = x W_β + b_β
    E::beta_forward(beta_.data(), zb_.data(), int64_t(zb_.size()), beta_args_);  // β = max σ(z_β), clipped
    const S* log_f = gate_ ? fgate_.forward(in, gate_at(), gate_scale(in.dims)) : nullptr;
    E::path_attention_forward(out, lse_.data(), in.q, in.k, in.v, w_.data(), beta_.data(), log_f, args(in));
  }

  void backward(const AttnGrads<S>& g, const AttnInputs<S>& in) override {
    if (!in.given.empty())
      return E::path_attention_backward(g.dq, g.dk, g.dv, g.dgiven[0], g.dgiven[1],
                                        gate_ ? g.dgiven[2] : nullptr, g.dout, g.out, lse_.data(), in.q,
                                        in.k, in.v, in.given[0], in.given[1], gate_ ? in.given[2] : nullptr,
                                        args(in));
    const int N = in.B * in.T, C = in.dims.C, H = in.dims.H, HD = H * in.dims.D;
    dw_.resize(w_.size());
    dc_.resize(w_.size());
    du2_.resize(w_.size());
    du1_.resize(u1_.size());
    dbeta_.resize(beta_.size());
    E::path_attention_backward(g.dq, g.dk, g.dv, dw_.data(), dbeta_.data(), gate_ ? fgate_.dlog_f() : nullptr,
                               g.dout, g.out, lse_.data(), in.q, in.k, in.v, w_.data(), beta_.data(),
                               gate_ ? fgate_.log_f() : nullptr, args(in));
    const auto& p = in.params;
    const auto& dp = g.dparams;
    const int b = beta_at();
    // dz_β = dβ · dβ/dz_β
    E::beta_backward(dbeta_.data(), dbeta_.data(), zb_.data(), int64_t(zb_.size()), beta_args_);
    head_projection_backward<E>(g.dx, dp[b], dp[b + 1], dbeta_.data(), in.x, p[b], N, C, H, in.runs);
    // dc, then du2 = dc through the convolution (or du2 = dc without it)
    E::l2norm_backward(conv_ ? dc_.data() : du2_.data(), dw_.data(), conv_ ? c_.data() : u2_.data(), N * H,
                       in.dims.D, kEps);
    if (conv_) E::short_conv_backward(du2_.data(), dp[2], dc_.data(), u2_.data(), p[2], in.B, in.T, HD, in.runs);
    E::matmul_backward(du1_.data(), dp[1], du2_.data(), u1_.data(), p[1], N, rank_, HD, GradMode::Overwrite,
                       in.runs);
    E::matmul_backward(g.dx, dp[0], du1_.data(), in.x, p[0], N, C, rank_, GradMode::Accumulate, in.runs);
    if (gate_) fgate_.backward(g, in, gate_at(), gate_scale(in.dims));
  }

  std::unique_ptr<AttnDecoder<S>> decoder(const LayerDims& d, int B, int Tmax) override {
    return std::make_unique<Decoder>(*this, d, B, Tmax);
  }

 private:
  static constexpr double kEps = 1e-6;  // inside the sqrt of the L2 norm, as in FLA

  PathAttentionArgs args(const AttnInputs<S>& in) const {
    return {{in.B, in.T, in.dims.H, in.dims.D}, 1.0 / std::sqrt(double(in.dims.D)), block_};
  }

  // Positions in params(): W_β, b_β after w_conv (when there is one), then the gate's two.
  int beta_at() const { return conv_ ? 3 : 2; }
  int gate_at() const { return beta_at() + 2; }
  // The factor on log f: the attention scale 1/√D with gate_scale=1, else 1.
  double gate_scale(const LayerDims& d) const { return gate_scale_ ? 1.0 / std::sqrt(double(d.D)) : 1.0; }

  // spec's integer `key`, a pb::Error unless it is in [lo, hi] (checked before the cast to int).
  static int64_t in_range(const Spec& spec, const char* key, int64_t lo, int64_t hi) {
    const int64_t v = spec.get_int(key);
    if (v < lo || v > hi) fail("{}: {} must be in [{}, {}], got {}", spec.name(), key, lo, hi, v);
    return v;
  }

  // The softmax cache with the in-place key update. w_t needs the short convolution's last two
  // inputs u2_{t−1}, u2_{t−2} per sequence: the state kept besides the cache.
  class Decoder final : public SoftmaxDecoder<E> {
   public:
    Decoder(const Path& enc, const LayerDims& d, int B, int Tmax)
        : SoftmaxDecoder<E>(d, B, Tmax, enc.gate_), enc_(enc) {
      const size_t HD = size_t(d.H) * d.D;
      u1_.resize(size_t(B) * enc.rank_);
      for (auto* x : {&u2_, &c_, &w_}) x->resize(B * HD);
      for (auto* x : {&zb_, &beta_, &zf_}) x->resize(size_t(B) * d.H);
      prev_.resize(B * 2 * HD);
      E::zero(prev_.data(), prev_.size());
    }

   protected:
    void log_f(S* lf, const DecodeInputs<S>& in) override {
      ForgetGate<E>::log_f_rows(lf, zf_.data(), in.x, in.params, enc_.gate_at(), in.B, in.dims.C, in.dims.H,
                                enc_.gate_scale(in.dims));
    }

    void update_keys(const DecodeInputs<S>& in, const DecodeArgs& a) override {
      const int B = in.B, C = in.dims.C, H = in.dims.H, D = in.dims.D, HD = H * D, r = enc_.rank_;
      const int b = enc_.beta_at();
      const bool conv = enc_.conv_;
      const auto& p = in.params;
      E::matmul_forward(u1_.data(), in.x, p[0], B, C, r);         // u1 = x W_down
      E::matmul_forward(u2_.data(), u1_.data(), p[1], B, r, HD);  // u2 = u1 W_up
      if (conv)  // c = SiLU(conv3(u2)), the state shifted
        E::short_conv_step(c_.data(), prev_.data(), u2_.data(), p[2], B, HD);
      E::l2norm_forward(w_.data(), conv ? c_.data() : u2_.data(), B * H, D, kEps);  // w = c / sqrt(|c|² + eps)
      head_projection_forward<E>(zb_.data(), in.x, p[b], p[b + 1], B, C, H);             // z_β = x W_β + b_β
      E::beta_forward(beta_.data(), zb_.data(), int64_t(zb_.size()), enc_.beta_args_);
      E::path_key_update(this->keys(), w_.data(), beta_.data(), a);  // k_j ← k_j − β (w·k_j) w, j < t
    }

   private:
    const Path& enc_;  // its model outlives the decoder (models/decoder.h)
    typename E::template Buffer<S> prev_;                // (B, 2, H·D) u2_{t−1}, u2_{t−2}
    typename E::template Buffer<S> u1_;                  // (B, rank)
    typename E::template Buffer<S> u2_, c_, w_;          // (B, H·D)
    typename E::template Buffer<S> zb_, beta_, zf_;      // (B, H)
  };

  int rank_;
  BetaArgs beta_args_;
  int block_;
  bool conv_, gate_, gate_scale_;
  double gate_bias_;  // b_f at init (path_fox)
  ForgetGate<E> fgate_;
  typename E::template Buffer<S> u1_, du1_;                  // (B, T, rank)
  typename E::template Buffer<S> u2_, c_, w_, dw_, dc_, du2_;  // (B, T, H·D)
  typename E::template Buffer<S> zb_, beta_, dbeta_, lse_;    // (B, T, H)
};

// The keys of `path`; `path_fox` adds gate_scale. Keys added after the first published runs are
// omit_default (core/spec.h): those runs keep their ids.
inline Schema path_schema(const char* name, const char* doc) {
  return {name, doc,
          {{"w_rank", ParamType::Int, "32", "rank of the low-rank projection producing w", {}},
           {"beta_clip", ParamType::Float, "0", "ε > 0 clamps β to 2 − ε (advised for bf16)", {}},
           {"block", ParamType::Int, "64", "UT-transform block size (the result does not depend on it)", {}},
           {"conv", ParamType::Int, "1", "1: w through the short conv and SiLU; 0: w = L2norm(x W_down W_up)",
            {}, true},
           {"beta_max", ParamType::Float, "2", "β = beta_max·σ(·): 2 allows negative eigenvalues, 1 gives β ∈ (0, 1)",
            {}, true}}};
}

// The entry of `path` / `path_fox` (gate): inputs w, β (, log f), small test settings, and the
// ablations as test variants.
inline EncodingInfo path_info(const char* name, bool gate, PlotStyle style) {
  const std::string spec = std::string(name) + ":block=3,w_rank=4";
  EncodingInfo info{.family = AttentionFamily::Path,
                    .gate = gate,
                    .inputs = {AttnInput::W, AttnInput::Beta},
                    .test_spec = spec,
                    .test_variants = {spec + ",conv=0", spec + ",beta_max=1"},
                    .style = style};
  if (gate) info.inputs.push_back(AttnInput::LogF), info.test_variants.push_back(spec + ",gate_scale=1");
  return info;
}

}  // namespace pb
