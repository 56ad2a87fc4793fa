// A small decoder-only transformer, written out by hand (llm.c style): token embedding → L blocks of
// [RMSNorm → attention with a position encoding → residual; RMSNorm → SwiGLU MLP → residual] →
// RMSNorm → untied LM head → cross-entropy over the positions that have a target.
// Templated on the scalar type: float for training, double for gradient checks.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/params.h"
#include "models/position/position_encoding.h"

namespace pb {

struct ModelConfig {
  int vocab = 0;
  int layers = 1;
  int d_model = 64;
  int heads = 2;
  int ffn = 256;          // SwiGLU hidden width F
  std::string pe = "rope";
};

template <class S>
class Transformer {
 public:
  Transformer(const ModelConfig& cfg, uint64_t seed);  // parameters N(0, 0.02²), norms 1, biases 0

  // Forward over a batch: tokens and targets are (B, T); returns the mean cross-entropy over the
  // positions with target ≥ 0 (0 if none) and keeps what backward() needs.
  double forward(const int32_t* tokens, const int32_t* targets, int B, int T);
  // Gradients of that mean loss, accumulated into params.grads (zero them first).
  void backward();

  const int32_t* predictions() const { return argmax_.data(); }  // (B, T) after forward()
  const S* logits() const { return logits_.data(); }              // (B, T, V)
  const std::vector<S>& row_losses() const { return loss_rows_; }  // (B, T)

  ParamStore<S> params;
  const ModelConfig& config() const { return cfg_; }

 private:
  struct Layer {
    int64_t attn_norm, wq, wk, wv, wo, mlp_norm, w_up, w_down;  // offsets into params
    std::vector<int64_t> pe_params;                             // offsets, in the encoding's order
    std::unique_ptr<PositionEncoding<S>> pe;
    std::vector<S> x, h1, q, k, v, att, x_mid, h2, ab, hh;       // saved activations, see .cpp
    std::vector<S> rstd1, rstd2;                                // (B·T)
  };
  void resize(int B, int T);
  AttnInputs<S> attn_inputs(Layer& l, std::vector<const S*>& p) const;

  ModelConfig cfg_;
  int D_;  // head dim
  int64_t embed_, final_norm_, head_;
  std::vector<Layer> layers_;
  int B_ = 0, T_ = 0;
  const int32_t* tokens_ = nullptr;
  const int32_t* targets_ = nullptr;
  int64_t n_targets_ = 0;
  std::vector<S> x_final_, hf_, rstd_f_, logits_, loss_rows_;
  std::vector<int32_t> argmax_;
  std::vector<S> dx_, dh_, dbuf_, dq_, dk_, dv_, dlogits_, dab_, dhh_;  // backward scratch
};

}  // namespace pb
