// The ops of kernels/ops.h for the CUDA engine: float device pointers, the same names, argument
// order and semantics (GradMode, overwrite vs +=), one file each in this folder with the CPU
// file's stem. Every op is enqueued on the calling thread's stream (runtime.h: cuda::stream()),
// returns at once, and never synchronises or allocates, so a training step can be captured in a
// CUDA graph. Scalars that change between steps (loss scale, gradient norm) live in one-element
// device buffers.
#pragma once
#include <cstdint>

#include "kernels/ops.h"

namespace pb::cuda {

// --- Dense ops -------------------------------------------------------------------------------
// matmul.cu (cuBLAS; fp32, TF32 or bf16 products as precision() says, runtime.h)
void matmul_forward(float* y, const float* x, const float* w, int N, int K, int M,
                    GradMode mode = GradMode::Overwrite, Runs runs = {});
void matmul_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, int N,
                     int K, int M, GradMode mode, Runs runs = {});
// rmsnorm.cu
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* g, int N, int C, double eps,
                     Runs runs = {});
void rmsnorm_backward(float* dx, float* dg, const float* dy, const float* x, const float* rstd,
                      const float* g, int N, int C, GradMode mode, Runs runs = {});
// swiglu.cu
void swiglu_forward(float* h, const float* ab, int N, int F);
void swiglu_backward(float* dab, const float* dh, const float* ab, int N, int F);
// embedding.cu
void embedding_forward(float* x, const int32_t* tokens, const float* table, int N, int C, Runs runs = {});
void embedding_backward(float* dtable, const float* dx, const int32_t* tokens, int N, int C, Runs runs = {});
// cross_entropy.cu
void cross_entropy_forward(float* loss, int32_t* argmax, const float* logits, const int32_t* targets,
                           int N, int V);
void cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets, int N, int V,
                            const float* scale, Runs runs = {});
void loss_mean(float* mean, float* scale, const float* loss, const int32_t* targets, int N, Runs runs = {});
// short_conv.cu
void short_conv_forward(float* y, const float* u, const float* a, int B, int T, int C, Runs runs = {});
void short_conv_backward(float* du, float* da, const float* dy, const float* u, const float* a, int B,
                         int T, int C, Runs runs = {});
// l2norm.cu
void l2norm_forward(float* y, const float* x, int n_rows, int D, double eps);
void l2norm_backward(float* dx, const float* dy, const float* x, int n_rows, int D, double eps);
// adamw.cu
void sum_squares(float* out, const float* x, int64_t n);
void adamw_update(float* params, float* m, float* v, const float* grads, const uint8_t* decay_mask,
                  int64_t n, const AdamWArgs& args, const float* grad_norm_sq);
// gates.cu
void add_bias(float* z, const float* b, int N, int H, Runs runs = {});
void bias_backward(float* db, const float* dz, int N, int H, Runs runs = {});
void log_sigmoid_forward(float* y, const float* z, int64_t n, double scale);
void log_sigmoid_backward(float* dz, const float* dy, const float* z, int64_t n, double scale);
void beta_forward(float* beta, const float* z, int64_t n, const BetaArgs& args);
void beta_backward(float* dz, const float* dbeta, const float* z, int64_t n, const BetaArgs& args);

// --- Attention -------------------------------------------------------------------------------
// rope.cu
void rope_forward(float* out, const float* in, const RopeArgs& args);
void rope_backward(float* din, const float* dout, const RopeArgs& args);
// softmax_attention.cu
void softmax_attention_forward(float* o, float* lse, const float* q, const float* k, const float* v,
                               const float* log_f, const SoftmaxAttentionArgs& args,
                               const float* bias = nullptr);
void softmax_attention_backward(float* dq, float* dk, float* dv, float* dlog_f, const float* dout,
                                const float* o, const float* lse, const float* q, const float* k,
                                const float* v, const float* log_f, const SoftmaxAttentionArgs& args,
                                float* dbias = nullptr, const float* bias = nullptr);
// stick_breaking.cu
void stick_breaking_forward(float* o, const float* q, const float* k, const float* v,
                            const StickBreakingArgs& args);
void stick_breaking_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                             const float* k, const float* v, const StickBreakingArgs& args);
// path_launch.cu (the stages in path_*.cu, kernels/cuda/README.md)
void path_attention_forward(float* o, float* lse, const float* q, const float* k, const float* v,
                            const float* w, const float* beta, const float* log_f,
                            const PathAttentionArgs& args);
void path_attention_backward(float* dq, float* dk, float* dv, float* dw, float* dbeta, float* dlog_f,
                             const float* dout, const float* o, const float* lse, const float* q,
                             const float* k, const float* v, const float* w, const float* beta,
                             const float* log_f, const PathAttentionArgs& args);

// --- Decoding --------------------------------------------------------------------------------
// decode.cu
void kv_append(float* kc, float* vc, const float* k, const float* v, const DecodeArgs& args);
void decode_gate(float* G, double* G_sum, const float* log_f, const DecodeArgs& args);
void decode_attention(float* o, const float* q, const float* kc, const float* vc, const float* G,
                      const DecodeArgs& args, const float* bias = nullptr, int bias_stride = 0);
void path_key_update(float* kc, const float* w, const float* beta, const DecodeArgs& args);
void decode_stick_breaking(float* o, const float* q, const float* kc, const float* vc, const DecodeArgs& args);
void short_conv_step(float* y, float* state, const float* u, const float* a, int B, int C);

}  // namespace pb::cuda
