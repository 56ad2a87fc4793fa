// Attention on bf16 tensor cores (mma.sync m16n8k16, fp32 accumulation), forward and backward:
// the kernels `pathbench bench attention --dtype bf16` measures and `--precision bf16` trains
// with. Same math, layouts and conventions as the fp32 ops of kernels/ops.h (tensors (B, T, H, D),
// per-head scalars (B, T, H), natural-log lse, the FoX gate G_i − G_j added unscaled, the bias
// table b_h(i − j) (H, T)); q, k, v, o and their gradients are bf16, w, β, log_f, bias, lse and
// their gradients fp32. Head dims 32, 64, 128.
// Plain C++ sees bf16 as its bits (uint16_t), so this header needs no CUDA header.
//   flash_attention_bf16.cu   causal softmax attention, optional gate and bias table (NoPE, RoPE
//                             after rotation, ALiBi, FoX, KERPLE, T5)
//   path_bf16_forward.cu, path_bf16_backward.cu   PaTH and PaTH-FoX
// Like every op of ops.h: enqueued on the calling thread's stream, no sync, no allocation
// (scratch() only), so calls can be captured in a CUDA graph.
#pragma once
#include <cstdint>

#include "kernels/ops.h"

namespace pb::cuda {

using bf16_bits = uint16_t;

void flash_attention_bf16_forward(bf16_bits* o,        // (B, T, H, D)
                                  float* lse,          // (B, T, H) saved
                                  const bf16_bits* q, const bf16_bits* k, const bf16_bits* v,
                                  const float* log_f,  // (B, T, H) or null
                                  const SoftmaxAttentionArgs& args,
                                  const float* bias = nullptr);  // (H, T) or null
void flash_attention_bf16_backward(bf16_bits* dq, bf16_bits* dk, bf16_bits* dv,  // overwrite
                                   float* dlog_f,  // (B, T, H) overwrite; null if log_f null
                                   const bf16_bits* dout, const bf16_bits* o, const float* lse,
                                   const bf16_bits* q, const bf16_bits* k, const bf16_bits* v,
                                   const float* log_f, const SoftmaxAttentionArgs& args,
                                   float* dbias = nullptr,        // (H, T) overwrite; null if bias null
                                   const float* bias = nullptr);  // (H, T) or null

void path_attention_bf16_forward(bf16_bits* o, float* lse, const bf16_bits* q, const bf16_bits* k,
                                 const bf16_bits* v,
                                 const float* w,      // (B, T, H, D) unit rows
                                 const float* beta,   // (B, T, H)
                                 const float* log_f,  // (B, T, H) or null
                                 const PathAttentionArgs& args);
void path_attention_bf16_backward(bf16_bits* dq, bf16_bits* dk, bf16_bits* dv,  // overwrite
                                  float* dw, float* dbeta, float* dlog_f,       // overwrite
                                  const bf16_bits* dout, const bf16_bits* o, const float* lse,
                                  const bf16_bits* q, const bf16_bits* k, const bf16_bits* v,
                                  const float* w, const float* beta, const float* log_f,
                                  const PathAttentionArgs& args);

// fp32 ↔ bf16 conversion of n elements (round to nearest even), on the stream.
void to_bf16(bf16_bits* y, const float* x, int64_t n);
void from_bf16(float* y, const bf16_bits* x, int64_t n);

}  // namespace pb::cuda
