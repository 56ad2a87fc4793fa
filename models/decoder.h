// Token-by-token decoding of a Transformer on any engine: B sequences advance together, one token
// each per step(), up to a maximum length Tmax; each layer keeps its encoding's decoding state
// (AttnDecoder, position_encoding.h: a KV cache, plus gate sums, PaTH's updated keys and
// convolution state; with kv_conv also the state of the k and v convolutions) in the engine's
// memory, O(Tmax·d) per sequence. After feeding tokens 0 .. t
// the logits are those of the parallel forward at position t.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "models/transformer.h"

namespace pb {

template <class E>
class Decoder {
 public:
  using S = typename E::Scalar;

  // Empty caches for B sequences of at most Tmax tokens; the model must outlive the decoder and not
  // change meanwhile.
  Decoder(const Transformer<E>& model, int B, int Tmax);
  // Feeds one token per sequence (B, host memory) at position position() < Tmax; returns the
  // logits (B, V) of that position in E's memory, valid until the next step.
  const S* step(const int32_t* tokens);
  int position() const { return t_; }
  int batch() const { return B_; }

 private:
  const Transformer<E>& model_;
  int B_, t_ = 0;
  std::vector<std::unique_ptr<AttnDecoder<S>>> attn_;  // per layer
  typename E::template Buffer<int32_t> tokens_;        // (B)
  typename E::template Buffer<S> x_, h_, x_mid_, rstd_;  // (B, C), (B, C), (B, C), (B)
  typename E::template Buffer<S> q_, k_, v_, att_;       // (B, H·D)
  typename E::template Buffer<S> ab_, hh_, logits_;      // (B, 2F), (B, F), (B, V)
  typename E::template Buffer<S> k_in_, v_in_;           // kv_conv: h1 Wk, h1 Wv (B, H·D)
  typename E::template Buffer<S> conv_state_;            // kv_conv: (layers, 2, B, 2, H·D)
};

}  // namespace pb
