// Decoding with a KV cache for the encodings built on causal softmax attention (nope, rope, alibi,
// fox, kerple, t5; path and path_fox add their key update, path.h). When token t arrives, its
// logits against the cached tokens j ≤ t are those of kernels/cpu/softmax_attention.cpp,
//   s_tj = scale · q_t·k_j + (G_t − G_j) + b_h(t − j),   o_t = Σ_j softmax_j(s_tj) v_j,
// with G_t = Σ_{u≤t} log f_u accumulated in double per sequence and head. An encoding derives from
// SoftmaxDecoder and overrides the hooks it needs; nope uses it as it is. Host code: the hooks call
// E::<op> of a CPU engine.
#pragma once
#include <Eigen/Dense>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "models/position/position_encoding.h"

namespace pb {

// The keys and values of B sequences, each (t, H, D), growing by one token per step.
template <class S>
struct KvCache {
  using Mat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using HeadView = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;  // (t, D), row stride H·D

  KvCache(const LayerDims& d, int B) : H(d.H), D(d.D), keys(B), values(B) {}
  // Appends token rows k, v (B, H, D).
  void append(const S* k, const S* v) {
    const size_t HD = size_t(H) * D;
    for (size_t b = 0; b < keys.size(); ++b) {
      keys[b].insert(keys[b].end(), k + b * HD, k + (b + 1) * HD);
      values[b].insert(values[b].end(), v + b * HD, v + (b + 1) * HD);
    }
  }
  int tokens() const { return int(keys[0].size() / (size_t(H) * D)); }
  HeadView key_head(int b, int h) const { return view(keys[b], h); }
  HeadView value_head(int b, int h) const { return view(values[b], h); }

  int H, D;
  std::vector<std::vector<S>> keys, values;  // per sequence (t, H, D)

 private:
  HeadView view(const std::vector<S>& x, int h) const {
    return {x.data() + h * D, tokens(), D, Eigen::OuterStride<>(H * D)};
  }
};

template <class E>
class SoftmaxDecoder : public AttnDecoder<typename E::Scalar> {
 public:
  using S = typename E::Scalar;

  // gate: the encoding supplies log f (log_f()) and the logits get G_t − G_j.
  SoftmaxDecoder(const LayerDims& d, int B, bool gate)
      : dims_(d), B_(B), cache_(d, B), gate_(gate), G_(B), G_sum_(gate ? size_t(B) * d.H : 0, 0.0) {}

  void step(S* out, const DecodeInputs<S>& in) final {
    const int B = B_, H = dims_.H, D = dims_.D, t = in.t, T = t + 1;
    if (in.B != B || t != cache_.tokens())
      fail("decoder: token {} of {} sequences fed to a state at token {} of {}", t, in.B, cache_.tokens(), B);
    const size_t HD = size_t(H) * D;
    q_.assign(in.q, in.q + B * HD);
    k_.assign(in.k, in.k + B * HD);
    position(q_.data(), k_.data(), in);
    if (gate_) {
      log_f_.resize(size_t(B) * H);
      log_f(log_f_.data(), in);
      for (size_t i = 0; i < G_sum_.size(); ++i) {
        G_sum_[i] += log_f_[i];
        G_[i / H].push_back(S(G_sum_[i]));  // G_t of (b, h)
      }
    }
    update_keys(in);
    cache_.append(k_.data(), in.v);
    int stride = 0;
    const S* bias = this->bias(T, in, stride);
    const S scale = S(1.0 / std::sqrt(double(D)));
#pragma omp parallel for schedule(static) if (int64_t(B) * H * T * D >= (int64_t(1) << 15))
    for (int bh = 0; bh < B * H; ++bh) {
      const int b = bh / H, h = bh % H;
      const Eigen::Map<const Vec> q(q_.data() + bh * D, D);  // (D)
      Vec p = q * cache_.key_head(b, h).transpose();         // (T) q_t·k_j
      auto s = p.array();
      // s_tj = scale·q_t·k_j + G_t − G_j (+ b_h(t − j))
      if (gate_) {
        const S* G = G_[b].data();  // (T, H)
        for (int j = 0; j < T; ++j) s(j) = scale * s(j) + (G[size_t(t) * H + h] - G[size_t(j) * H + h]);
      } else {
        s *= scale;
      }
      if (bias)
        for (int j = 0; j < T; ++j) s(j) += bias[int64_t(h) * stride + (t - j)];
      // A_tj = exp(s_tj − max_j s_tj) / Σ_j exp(s_tj − max_j s_tj),  o_t = Σ_j A_tj v_j
      s = (s - s.maxCoeff()).exp();
      s /= s.sum();
      Eigen::Map<Vec>(out + bh * D, D).noalias() = p * cache_.value_head(b, h);
    }
  }

 protected:
  using Vec = Eigen::Matrix<S, 1, Eigen::Dynamic>;

  // q and k (B, H, D) of the token, transformed in place before k is cached (rope).
  virtual void position(S* /*q*/, S* /*k*/, const DecodeInputs<S>&) {}
  // log f (B, H) of the token (with gate).
  virtual void log_f(S* /*log_f*/, const DecodeInputs<S>&) {}
  // The bias table b_h(r) for r < T at bias[h · stride + r], or null for none.
  virtual const S* bias(int /*T*/, const DecodeInputs<S>&, int& /*stride*/) { return nullptr; }
  // Called before the token's key is cached, when keys(b) (t, H, D) holds tokens 0 .. t − 1 (PaTH).
  virtual void update_keys(const DecodeInputs<S>&) {}

  std::vector<S>& keys(int b) { return cache_.keys[b]; }
  const LayerDims dims_;
  const int B_;

 private:
  KvCache<S> cache_;
  bool gate_;
  std::vector<std::vector<S>> G_;  // per sequence (t, H) with gate
  std::vector<double> G_sum_;      // (B, H) running Σ log f
  std::vector<S> q_, k_, log_f_;   // (B, H, D), (B, H, D), (B, H)
};

}  // namespace pb
