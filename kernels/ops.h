// The ops of the model: one declaration here, the reference in kernels/cpu/<op>.cpp (templated on
// float and double, so gradient checks run in double), the fast path in kernels/cuda/<op>.cu.
//
// Conventions
//   Argument order: outputs, saved, inputs, weights, then sizes / the op's *Args struct; optional
//   hooks added later follow the Args struct and default to null (off).
//   Layouts are row-major; every buffer's shape is in the comment beside it.
//   Attention tensors are (B, T, H, D): batch, time, heads, head dim. Per-head scalars
//   (beta, log_f, lse) are (B, T, H).
//   Gradient contract: gradients of parameters accumulate (+=); gradients of activations
//   overwrite (=), unless the op takes a GradMode, where the caller chooses (two paths that
//   meet, like the residual stream or x feeding several projections, accumulate).
//   Threading: OpenMP inside each op; results do not depend on the thread count.
#pragma once
#include <cstdint>

namespace pb {

enum class GradMode { Overwrite, Accumulate };

// Stacked runs: `count` independent models of one shape computed as one (`sweep --stack`,
// docs/sweeps.md). Run r's copy of a parameter p lies at p + r·stride (each run's parameters are
// one contiguous block of the flat buffer); every activation's rows split evenly over the runs, run
// r owning the r-th 1/count of them (of the sequences, for ops over (B, T, ·)). An op that reads a
// parameter takes a Runs, default one run; its parameter gradient goes to each run's own copy.
struct Runs {
  int count = 1;
  int64_t stride = 0;  // elements between two runs' copies of a parameter
};

// ---------------------------------------------------------------------------------------------
// Dense ops (kernels/cpu/{matmul,rmsnorm,swiglu,embedding,cross_entropy,adamw,short_conv,l2norm}.cpp)
// The CUDA engine declares the same ops for float device pointers in kernels/cuda/ops.h.

// y = x w  (+= when mode is Accumulate).
template <class S>
void matmul_forward(S* y,           // (N, M)
                    const S* x,     // (N, K)
                    const S* w,     // (K, M)
                    int N, int K, int M, GradMode mode = GradMode::Overwrite, Runs runs = {});
// dx = dy wᵀ (per mode), dw += xᵀ dy.
template <class S>
void matmul_backward(S* dx,         // (N, K), may be null
                     S* dw,         // (K, M)
                     const S* dy,   // (N, M)
                     const S* x,    // (N, K)
                     const S* w,    // (K, M)
                     int N, int K, int M, GradMode mode, Runs runs = {});

// y = x / sqrt(mean(x²) + eps) * g
template <class S>
void rmsnorm_forward(S* y,          // (N, C)
                     S* rstd,       // (N)  saved
                     const S* x,    // (N, C)
                     const S* g,    // (C)
                     int N, int C, double eps, Runs runs = {});
template <class S>
void rmsnorm_backward(S* dx,        // (N, C), per mode
                      S* dg,        // (C), +=
                      const S* dy, const S* x, const S* rstd, const S* g, int N, int C,
                      GradMode mode, Runs runs = {});

// h = silu(a) ⊙ b, with a, b the two halves of the up projection: ab (N, 2F) = [a | b].
template <class S>
void swiglu_forward(S* h,           // (N, F)
                    const S* ab,    // (N, 2F)
                    int N, int F);
template <class S>
void swiglu_backward(S* dab,        // (N, 2F), overwrite
                     const S* dh, const S* ab, int N, int F);

// x[n] = table[tokens[n]]
template <class S>
void embedding_forward(S* x,             // (N, C)
                       const int32_t* tokens,  // (N)
                       const S* table,   // (V, C)
                       int N, int C, Runs runs = {});
template <class S>
void embedding_backward(S* dtable,       // (V, C), +=
                        const S* dx, const int32_t* tokens, int N, int C, Runs runs = {});

// Softmax cross-entropy over rows with a target (target < 0: row ignored, loss 0, no gradient).
// loss[n] = logsumexp(logits[n]) - logits[n, target[n]]; argmax[n] = the predicted token.
template <class S>
void cross_entropy_forward(S* loss,             // (N)
                           int32_t* argmax,     // (N), may be null
                           const S* logits,     // (N, V)
                           const int32_t* targets,  // (N)
                           int N, int V);
// dlogits = (softmax(logits) - onehot(target)) * scale[r] on rows with a target (r: the row's
// run), 0 elsewhere. scale is a buffer on the op's device (so a captured CUDA graph can reuse it).
template <class S>
void cross_entropy_backward(S* dlogits,         // (N, V), overwrite
                            const S* logits, const int32_t* targets, int N, int V,
                            const S* scale,     // (runs.count)
                            Runs runs = {});
// Per run r: mean[r] = Σ_{target ≥ 0} loss[n] / count over its rows, scale[r] = 1 / count (both 0
// when count = 0).
template <class S>
void loss_mean(S* mean,                 // (runs.count)
               S* scale,                // (runs.count)
               const S* loss,           // (N)
               const int32_t* targets,  // (N)
               int N, Runs runs = {});

// Causal depthwise convolution over time, width kShortConvWidth, then SiLU:
//   y[b,t,c] = silu( Σ_{k<3} a[k,c] · u[b,t-k,c] ),  u[b,t<0,c] = 0
constexpr int kShortConvWidth = 3;
template <class S>
void short_conv_forward(S* y,        // (B, T, C)
                        const S* u,  // (B, T, C)
                        const S* a,  // (3, C): a[k] multiplies u[t-k]
                        int B, int T, int C, Runs runs = {});
template <class S>
void short_conv_backward(S* du,      // (B, T, C), overwrite
                         S* da,      // (3, C), +=
                         const S* dy, const S* u, const S* a, int B, int T, int C, Runs runs = {});

// Row-wise L2 normalisation: y = x / sqrt(|x|² + eps), rows of length D.
template <class S>
void l2norm_forward(S* y, const S* x, int n_rows, int D, double eps);
template <class S>
void l2norm_backward(S* dx,          // overwrite
                     const S* dy, const S* x, int n_rows, int D, double eps);

// out[0] = Σ x² (accumulated in double on the CPU), the squared gradient norm; non-finite when
// any entry is.
template <class S>
void sum_squares(S* out,       // (1)
                 const S* x,   // (n)
                 int64_t n);

// AdamW on a flat buffer (decoupled weight decay; `decay_mask[i]` 0 turns it off for entry i),
// with gradient-norm clipping: g ← g · min(1, clip / sqrt(grad_norm_sq[0])) when clip > 0.
struct AdamWArgs {
  double lr, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  int64_t step = 1;   // 1-based, for bias correction
  double clip = 0.0;  // max gradient norm; 0 turns clipping off
};
template <class S>
void adamw_update(S* params, S* m, S* v, const S* grads, const uint8_t* decay_mask, int64_t n,
                  const AdamWArgs& args,
                  const S* grad_norm_sq);  // (1) Σ g², read when args.clip > 0; may be null otherwise

// ---------------------------------------------------------------------------------------------
// Per-head gates of the position encodings (kernels/cpu/gates.cpp): biases and the sigmoid maps
// that turn a logit z into FoX's log f or PaTH's β. Backward ops may run in place (dz == dy).

// z[n, h] += b[h]
template <class S>
void add_bias(S* z, const S* b, int N, int H, Runs runs = {});         // z (N, H), b (H)
// db[h] += Σ_n dz[n, h]
template <class S>
void bias_backward(S* db, const S* dz, int N, int H, Runs runs = {});  // db (H), dz (N, H)
// y = scale · log σ(z)
template <class S>
void log_sigmoid_forward(S* y, const S* z, int64_t n, double scale);
// dz = scale · dy · σ(−z)
template <class S>
void log_sigmoid_backward(S* dz, const S* dy, const S* z, int64_t n, double scale);
// PaTH's β = max · σ(z) ∈ (0, max), max ≤ 2; clipped to 2 − clip when clip > 0
struct BetaArgs {
  double max = 2;
  double clip = 0;
};
template <class S>
void beta_forward(S* beta, const S* z, int64_t n, const BetaArgs& args);
// dz = dβ · max σ(z)(1 − σ(z)), 0 where the clip is active
template <class S>
void beta_backward(S* dz, const S* dbeta, const S* z, int64_t n, const BetaArgs& args);

// ---------------------------------------------------------------------------------------------
// Attention (kernels/cpu/{rope,softmax_attention,stick_breaking,path_attention}.cpp)

struct AttnShape {
  int B, T, H, D;
};

// RoPE, rotate-half pairing over the whole head dim: channel m pairs with m + D/2, angle
// (offset + t)·base^(-2m/D). out may alias in. Backward is the rotation by the opposite angle.
struct RopeArgs {
  AttnShape shape;
  double base = 10000.0;
  int offset = 0;  // row t is at position offset + t (decoding rotates one token at its position)
};
template <class S>
void rope_forward(S* out, const S* in, const RopeArgs& args);   // (B, T, H, D)
template <class S>
void rope_backward(S* din, const S* dout, const RopeArgs& args);  // (B, T, H, D)

// Causal softmax attention with two optional score hooks, an additive gate (FoX) and a per-head
// relative-position bias table (KERPLE, T5 buckets):
//   s_ij = scale · q_i·k_j + (G_i − G_j) + b_h(i − j),  G_t = Σ_{u≤t} log_f_u (per b, h),  j ≤ i
//   o_i  = Σ_j softmax_j(s_ij) v_j,                    lse_i = log Σ_j exp(s_ij)
// log_f null means no gate (G = 0), bias null no bias (b = 0). ALiBi is the gate with constant
// log_f = −m_h. The bias gradient sums dS along diagonals: db_h(r) = Σ_{b, i − j = r} dS_ij.
struct SoftmaxAttentionArgs {
  AttnShape shape;
  double scale;
};
template <class S>
void softmax_attention_forward(S* o,             // (B, T, H, D)
                               S* lse,           // (B, T, H) saved
                               const S* q, const S* k, const S* v,  // (B, T, H, D)
                               const S* log_f,   // (B, T, H) or null
                               const SoftmaxAttentionArgs& args,
                               const S* bias = nullptr);  // (H, T): b_h(r), r = 0 .. T − 1, or null
template <class S>
void softmax_attention_backward(S* dq, S* dk, S* dv,  // (B, T, H, D), overwrite
                                S* dlog_f,            // (B, T, H), overwrite; null if log_f null
                                const S* dout, const S* o, const S* lse,
                                const S* q, const S* k, const S* v, const S* log_f,
                                const SoftmaxAttentionArgs& args,
                                S* dbias = nullptr,           // (H, T), overwrite; null if bias null
                                const S* bias = nullptr);     // (H, T) or null

// Stick-breaking attention (Tan et al. 2025), log space, leftover mass to the current token:
//   z_ij = scale · q_i·k_j,  log A_ij = z_ij − Σ_{j≤l<i} softplus(z_il)  (j < i)
//   o_i  = Σ_{j<i} A_ij v_j + (1 − Σ_{j<i} A_ij) v_i
struct StickBreakingArgs {
  AttnShape shape;
  double scale;
  double bias = 0;  // added to every logit: z_ij = scale·q_i·k_j + bias
};
template <class S>
void stick_breaking_forward(S* o, const S* q, const S* k, const S* v, const StickBreakingArgs& args);
template <class S>
void stick_breaking_backward(S* dq, S* dk, S* dv,  // overwrite
                             const S* dout, const S* q, const S* k, const S* v,
                             const StickBreakingArgs& args);

// PaTH attention (Yang et al. 2025) with an optional FoX gate, by the blockwise UT transform:
//   s_ij = scale · q_iᵀ H_i H_{i−1} ⋯ H_{j+1} k_j + (G_i − G_j),  H_t = I − β_t w_t w_tᵀ
//   o_i  = Σ_{j≤i} softmax_j(s_ij) v_j
// w rows must be unit-norm (not re-normalised here). `block` is the UT block size; the result
// does not depend on it (up to rounding).
struct PathAttentionArgs {
  AttnShape shape;
  double scale;
  int block = 64;
};
template <class S>
void path_attention_forward(S* o,              // (B, T, H, D)
                            S* lse,            // (B, T, H) saved
                            const S* q, const S* k, const S* v, const S* w,  // (B, T, H, D)
                            const S* beta,     // (B, T, H)
                            const S* log_f,    // (B, T, H) or null
                            const PathAttentionArgs& args);
template <class S>
void path_attention_backward(S* dq, S* dk, S* dv, S* dw,  // (B, T, H, D), overwrite
                             S* dbeta,                    // (B, T, H), overwrite
                             S* dlog_f,                   // (B, T, H), overwrite; null if no gate
                             const S* dout, const S* o, const S* lse,
                             const S* q, const S* k, const S* v, const S* w, const S* beta,
                             const S* log_f, const PathAttentionArgs& args);

// ---------------------------------------------------------------------------------------------
// Decoding one token per sequence against a KV cache (kernels/cpu/decode.cpp; models/decoder.h).
// The cache kc, vc is (B, H, Tmax, D): the keys of one (b, h) are contiguous, rows 0 .. T − 1
// filled. Per-head scalars of one token are (B, H).
struct DecodeArgs {
  int B, H, D;
  int Tmax;      // the cache's capacity in tokens
  int T;         // tokens in the cache with the new one: the new token is at position t = T − 1
  double scale;     // the logit scale (decode_attention, decode_stick_breaking)
  double bias = 0;  // the logits' offset (decode_stick_breaking)
};
// kc[b, h, t] = k[b, h],  vc[b, h, t] = v[b, h]
template <class S>
void kv_append(S* kc, S* vc,             // (B, H, Tmax, D)
               const S* k, const S* v,   // (B, H, D)
               const DecodeArgs& args);
// The gate's prefix sum at the new token: G_sum += log f (in double), G[b, h, t] = G_sum[b, h].
template <class S>
void decode_gate(S* G,              // (B, H, Tmax)
                 double* G_sum,     // (B, H) running Σ log f, zero before token 0
                 const S* log_f,    // (B, H)
                 const DecodeArgs& args);
// Softmax attention of the new token (query q at position t) over the cached tokens j < T:
//   s_j = scale · q·k_j + (G_t − G_j) + b_h(t − j),  o = Σ_j softmax_j(s_j) v_j
// G null: no gate; bias null: no bias, else b_h(r) = bias[h · bias_stride + r] for r < T.
template <class S>
void decode_attention(S* o,                          // (B, H, D)
                      const S* q,                    // (B, H, D)
                      const S* kc, const S* vc,      // (B, H, Tmax, D)
                      const S* G,                    // (B, H, Tmax) or null
                      const DecodeArgs& args,
                      const S* bias = nullptr,       // (H, bias_stride) or null
                      int bias_stride = 0);
// PaTH's key update by the new token's transition, before its key is cached:
//   k_j ← H_t k_j = k_j − β_t (w_t·k_j) w_t  for j < t = T − 1 (per b, h)
// so the cache holds H_t ⋯ H_{j+1} k_j and the logit of query t is scale · q_t·k_j.
template <class S>
void path_key_update(S* kc,           // (B, H, Tmax, D), rows j < T − 1 in place
                     const S* w,      // (B, H, D) w_t, unit rows
                     const S* beta,   // (B, H) β_t
                     const DecodeArgs& args);
// Stick-breaking attention of the new token (query at t = T − 1) over the cached tokens:
//   z_j = scale · q·k_j + bias,  log A_j = log σ(z_j) − Σ_{j<l<t} softplus(z_l)  (j < t)
//   o = Σ_{j<t} A_j v_j + (1 − Σ_{j<t} A_j) v_t,  1 − Σ A_j = exp(−Σ_{j<t} softplus(z_j))
template <class S>
void decode_stick_breaking(S* o,                      // (B, H, D)
                           const S* q,                // (B, H, D)
                           const S* kc, const S* vc,  // (B, H, Tmax, D)
                           const DecodeArgs& args);
// short_conv_forward for one token: y = silu(a[0] ⊙ u + a[1] ⊙ u_{t−1} + a[2] ⊙ u_{t−2}) with
// state = (u_{t−1}, u_{t−2}) (zero before token 0), then state = (u, u_{t−1}).
template <class S>
void short_conv_step(S* y,         // (B, C)
                     S* state,     // (B, 2, C) in place
                     const S* u,   // (B, C)
                     const S* a,   // (3, C)
                     int B, int C);

}  // namespace pb
