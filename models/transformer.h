// A small decoder-only transformer, written out by hand (llm.c style): token embedding → L blocks of
// [RMSNorm → attention with a position encoding → residual; RMSNorm → SwiGLU MLP → residual] →
// RMSNorm → untied LM head → cross-entropy over the positions that have a target. With kv_conv,
// k and v pass through PaTH's short convolution (causal depthwise, width 3, then SiLU), each with
// its own filter: the ablation that gives every encoding what PaTH has for w.
// Templated on the engine (models/engine.h): Cpu32 for CPU training, Cpu64 for gradient checks,
// CudaEngine on the GPU. A training step is set_batch() then run_forward() and backward(), which
// only enqueue engine ops (on the GPU: capturable in a CUDA graph); forward() does all three
// steps of a forward pass and returns the loss on the host. Decoder<E> (models/decoder.h) runs the
// same model token by token with a KV cache.
// Stacked runs: built from R seeds, the object is R independent models of this shape computed as
// one (Runs, kernels/ops.h): R parameter blocks, a batch of R·B sequences whose r-th B belong to
// run r, every parameter op one launch over all runs, and one mean loss per run. Each run's
// numbers are those of the model built from its seed alone (bit-identical on the CPU).
// Head rows: with target_every = k > 1 the final RMSNorm, the LM head and the loss run only on the
// positions t ≡ 0 (mod k) of each sequence, the only ones where the task puts targets (MQRAR: the
// keys: half the rows; the head is about half of paper-mqrar's FLOPs). The rows are gathered
// from x_final and their gradient scattered back (the embedding ops), so the loss and every
// gradient are those of the full head; a target elsewhere is an error.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/params.h"
#include "models/position/position_encoding.h"

namespace pb {

constexpr double kNormEps = 1e-6;  // inside the sqrt of every RMSNorm

template <class E>
class Decoder;

struct ModelConfig {
  int vocab = 0;
  int layers = 1;
  int d_model = 64;
  int heads = 2;
  int ffn = 256;          // SwiGLU hidden width F
  std::string pe = kDefaultEncoding;
  bool kv_conv = false;   // k = SiLU(conv3(h1 Wk)), v likewise
  int target_every = 1;   // the head runs at positions t % target_every == 0 only (Task::target_every)
};

template <class E>
class Transformer {
 public:
  using S = typename E::Scalar;
  template <class T>
  using Buf = typename E::template Buffer<T>;

  Transformer(const ModelConfig& cfg, uint64_t seed) : Transformer(cfg, std::vector<uint64_t>{seed}) {}
  // One stacked run per seed; parameters N(0, 0.02²), norms 1, biases 0.
  Transformer(const ModelConfig& cfg, const std::vector<uint64_t>& seeds);

  // Copies a batch into the engine: tokens and targets are host arrays (B, T), B a multiple of
  // runs(), run r's sequences the r-th B / runs().
  void set_batch(const int32_t* tokens, const int32_t* targets, int B, int T);
  // Forward over the batch: per run, the mean cross-entropy over the positions with target ≥ 0
  // (0 if none) into loss_buffer(), keeping what backward() needs.
  void run_forward();
  // Gradients of each run's mean loss, accumulated into its block of params.grads (zero them first).
  void backward();
  // set_batch + run_forward, then the loss on the host (run 0's).
  double forward(const int32_t* tokens, const int32_t* targets, int B, int T);

  const S* loss_buffer() const { return loss_.data(); }  // (runs) in the engine's memory
  int runs() const { return stack_.count; }
  // For data parallelism (runners/data_parallel.h): the mean loss and the backward's scale
  // (1 / number of targets), (1) each in the engine's memory, and the batch's targets (n = B·T),
  // so the shard's mean can be replaced by the global batch's between run_forward() and backward().
  // One run only.
  struct LossState {
    S* mean;
    S* scale;
    const int32_t* targets;
    int64_t n;
  };
  LossState loss_state() { return {loss_.data(), scale_.data(), targets_.data(), M_}; }
  // After a forward pass, on the host: predicted tokens and per-position losses, (B, T) each
  // (-1 and 0 at positions the head skips, target_every).
  const int32_t* predictions();
  const S* row_losses();
  const S* logits() const { return logits_.data(); }  // (M, V) in the engine's memory: head_rows()
  int64_t head_rows() const { return M_; }             // B·T, or B·⌈T / target_every⌉

  ParamStore<E> params;
  const ModelConfig& config() const { return cfg_; }

 private:
  friend class Decoder<E>;
  struct Layer {
    int64_t attn_norm, wq, wk, wv, wo, mlp_norm, w_up, w_down;  // offsets into params
    int64_t k_conv = -1, v_conv = -1;                           // (3, H·D) filters, with kv_conv
    std::vector<int64_t> pe_params;                             // offsets, in the encoding's order
    std::unique_ptr<PositionEncoding<E>> pe;
    Buf<S> x, h1, q, k, v, att, x_mid, h2, ab, hh;               // saved activations, see .cpp
    Buf<S> k_in, v_in;                                          // h1 Wk, h1 Wv before the conv
    Buf<S> rstd1, rstd2;                                        // (B·T)
  };
  void resize(int B, int T);
  template <class X>
  const X* per_position(std::vector<X>& host, const Buf<X>& rows, X skipped) const;
  AttnInputs<S> attn_inputs(Layer& l, std::vector<const S*>& p) const;

  ModelConfig cfg_;
  Runs stack_;  // the stacked runs: count, and the stride of their parameter blocks
  int D_;  // head dim
  int64_t embed_, final_norm_, head_;
  std::vector<Layer> layers_;
  int B_ = 0, T_ = 0;
  int64_t M_ = 0;                           // head rows: B·T, or B·⌈T / target_every⌉
  Buf<int32_t> tokens_;                     // (B, T)
  Buf<int32_t> targets_, argmax_, rows_;    // (M): the head rows' targets, predictions, index in B·T
  Buf<S> loss_, scale_;                     // (runs): mean loss, 1 / number of targets
  Buf<S> x_final_;                          // (B·T, C)
  Buf<S> x_head_, dx_head_;                 // (M, C): x_final's head rows and their gradient, k > 1
  Buf<S> hf_, rstd_f_, logits_, loss_rows_;  // (M, C), (M), (M, V), (M)
  Buf<S> dx_, dh_, dbuf_, dq_, dk_, dv_, dlogits_, dab_, dhh_;  // backward scratch
  Buf<S> dk_in_, dv_in_;                                        // (B·T, H·D), with kv_conv
  std::vector<int32_t> host_argmax_, host_targets_;  // host copies: predictions(), row_losses(),
  std::vector<S> host_loss_rows_;                    // set_batch()'s head rows
  std::vector<int32_t> host_rows_;                   // (M): rows_ on the host, k > 1
};

}  // namespace pb
