// Decoding with a KV cache for the encodings built on causal softmax attention (nope, rope, alibi,
// fox, kerple, t5; path and path_fox add their key update, path.h). When token t arrives, its
// logits against the cached tokens j ≤ t are those of kernels/cpu/softmax_attention.cpp,
//   s_tj = scale · q_t·k_j + (G_t − G_j) + b_h(t − j),   o_t = Σ_j softmax_j(s_tj) v_j,
// with G_t = Σ_{u≤t} log f_u accumulated in double per sequence and head (decode_gate). An encoding
// derives from SoftmaxDecoder and overrides the hooks it needs; nope uses it as it is. Every step
// is E::<op> (kernels/ops.h, "Decoding"), so the state lives in E's memory on either engine.
#pragma once
#include <cmath>
#include <utility>

#include "core/error.h"
#include "models/position/position_encoding.h"

namespace pb {

// The keys and values of B sequences of at most Tmax tokens, (B, H, Tmax, D) each, one token
// appended per step.
template <class E>
class KvCache {
 public:
  using S = typename E::Scalar;

  KvCache(const LayerDims& d, int B, int Tmax) : dims_(d), B_(B), Tmax_(Tmax) {
    if (Tmax < 1) fail("decoder: the maximum length must be >= 1, got {}", Tmax);
    keys_.resize(size_t(B) * d.H * Tmax * d.D);
    values_.resize(keys_.size());
  }
  // The shapes of a step that adds token t of in, after checking it continues the cache.
  DecodeArgs args(const DecodeInputs<S>& in) const {
    if (in.B != B_ || in.t != tokens_)
      fail("decoder: token {} of {} sequences fed to a state at token {} of {}", in.t, in.B, tokens_, B_);
    if (in.t >= Tmax_) fail("decoder: token {} is past the maximum length {} of the decoder", in.t, Tmax_);
    return {B_, dims_.H, dims_.D, Tmax_, in.t + 1, 1.0 / std::sqrt(double(dims_.D))};
  }
  // Caches token a.T − 1: k, v (B, H, D).
  void append(const S* k, const S* v, const DecodeArgs& a) {
    E::kv_append(keys_.data(), values_.data(), k, v, a);
    tokens_ = a.T;
  }
  S* keys() { return keys_.data(); }  // (B, H, Tmax, D)
  const S* values() const { return values_.data(); }
  int Tmax() const { return Tmax_; }

 private:
  LayerDims dims_;
  int B_, Tmax_, tokens_ = 0;
  typename E::template Buffer<S> keys_, values_;  // (B, H, Tmax, D)
};

template <class E>
class SoftmaxDecoder : public AttnDecoder<typename E::Scalar> {
 public:
  using S = typename E::Scalar;

  // gate: the encoding supplies log f (log_f()) and the logits get G_t − G_j.
  SoftmaxDecoder(const LayerDims& d, int B, int Tmax, bool gate) : cache_(d, B, Tmax), gate_(gate) {
    if (!gate) return;
    G_.resize(size_t(B) * d.H * Tmax);
    G_sum_.resize(size_t(B) * d.H);
    log_f_.resize(G_sum_.size());
    E::zero(G_sum_.data(), G_sum_.size());
  }

  void step(S* out, const DecodeInputs<S>& in) final {
    const DecodeArgs a = cache_.args(in);
    const auto [q, k] = position(in);
    if (gate_) {
      log_f(log_f_.data(), in);
      E::decode_gate(G_.data(), G_sum_.data(), log_f_.data(), a);  // G_t = G_{t−1} + log f_t
    }
    update_keys(in, a);
    cache_.append(k, in.v, a);
    int stride = 0;
    const S* bias = this->bias(in, stride);
    E::decode_attention(out, q, cache_.keys(), cache_.values(), gate_ ? G_.data() : nullptr, a, bias, stride);
  }

 protected:
  // q and k (B, H, D) of the token as attended and cached: in.q, in.k, or rotated copies (rope).
  virtual std::pair<const S*, const S*> position(const DecodeInputs<S>& in) { return {in.q, in.k}; }
  // log f (B, H) of the token (with gate).
  virtual void log_f(S* /*log_f*/, const DecodeInputs<S>&) {}
  // The bias table b_h(r) for r < Tmax at bias[h · stride + r], or null for none.
  virtual const S* bias(const DecodeInputs<S>&, int& /*stride*/) { return nullptr; }
  // Called before the token's key is cached, when keys() holds tokens 0 .. t − 1 (PaTH).
  virtual void update_keys(const DecodeInputs<S>&, const DecodeArgs&) {}

  S* keys() { return cache_.keys(); }  // (B, H, Tmax, D)
  int Tmax() const { return cache_.Tmax(); }

 private:
  KvCache<E> cache_;
  bool gate_;
  typename E::template Buffer<S> G_;          // (B, H, Tmax) G_t with gate
  typename E::template Buffer<double> G_sum_;  // (B, H) running Σ log f
  typename E::template Buffer<S> log_f_;      // (B, H)
};

}  // namespace pb
