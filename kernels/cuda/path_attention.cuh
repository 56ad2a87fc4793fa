// The parts of the fp32 PaTH kernels (path_prep.cu, path_ut_backward.cu, driven by path_launch.cu)
// that the bf16 kernels (path_bf16_forward.cu, path_bf16_backward.cu) build on. Internal to
// kernels/cuda/.
#pragma once
#include <cuda_bf16.h>

#include "kernels/cuda/attention_bf16.h"
#include "kernels/ops.h"

namespace pb::cuda {

// bf16_bits (attention_bf16.h) as CUDA's bf16.
inline const __nv_bfloat16* bf(const bf16_bits* p) { return reinterpret_cast<const __nv_bfloat16*>(p); }
inline __nv_bfloat16* bf(bf16_bits* p) { return reinterpret_cast<__nv_bfloat16*>(p); }

}  // namespace pb::cuda

namespace pb::cuda::path {

// The C form (kernels/README.md, "PaTH attention"): the bf16 scans move queries across a key block
// of S rows by one DP × DP product R C_J, C_J = W_Jᵀ U_J, where that is cheaper than the two
// products R W_Jᵀ, (R W_Jᵀ) U_J: DP ≤ S. Prep then also writes C, and backward_end takes dC.
constexpr bool c_form(int S, int DP) { return DP <= S; }

// These run the prep and the UT backward with their products on TF32 tensor cores (the TC = true
// instantiation, path_tiles.cuh), reading bf16 q, k, v, dout and writing bf16 dq, dk, dv
// (converted to fp32 in shared memory, gradients rounded to nearest once); w, β, log_f and their
// gradients stay fp32. The fp32 ops keep plain fp32 arithmetic on fp32 tensors.
//
// The forward's per-block precomputation (prep), on bf16 q, k and fp32 w (B, T, H, D): per (b, h)
// the sequence is cut into blocks of S rows (S = 64, or 32 for D > 64), rows padded to
// Tp = n_blocks · S, head dim padded to DP (32, 64 or 128; padded rows and columns are zero). The
// arrays live in scratch arena 0, valid until its next use.
struct Prepared {
  int S, DP, n_blocks, Tp;
  const double* g;     // (B·H, Tp): G_t = Σ_{u≤t} log_f_u, 0 without a gate
  const float* q_hat;  // (B·H, Tp, DP): Q̃, queries moved to their block's left edge
  const float* k_hat;  // (B·H, Tp, DP): K̃, keys moved to their block's right edge
  const float* u;      // (B·H, Tp, DP): U = Tm diag(β) W, so that P_block = I − Wᵀ U
  const float* c;      // (B·H, n_blocks, DP, DP): C = Wᵀ U (P_block = I − C) where DP ≤ S, else null
  const float* s_loc;  // (B·H, n_blocks, S, S): unscaled logits within each block (lower triangle)
};
Prepared prepare(const bf16_bits* q, const bf16_bits* k, const float* w, const float* beta,
                 const float* log_f, const PathAttentionArgs& args);

// The backward around its scan: backward_begin runs prep and zeroes the scan's accumulators
// (arena 0); a scan fills them (the bf16 one); backward_end runs the UT backward (the diagonal
// blocks and the UT transform in reverse, TF32 products on fp32 data) and the gate's reverse
// prefix sum, writing the gradients: dq, dk, dv bf16 (B, T, H, D), dw fp32 (B, T, H, D), dβ,
// dlog_f fp32 (B, T, H). Its inputs: dout, q, k, v bf16 (B, T, H, D), w fp32 (B, T, H, D), lse,
// β, log_f fp32 (B, T, H).
struct Accumulators : Prepared {
  float* delta;    // (B·H, Tp): δ_i = dout_i·o_i, written by the scan
  float* dq_hat;   // (B·H, Tp, DP): dQ̃, written by the scan (every row; 0 in block 0)
  float* dk_hat;   // (B·H, Tp, DP): dK̃ from the off-diagonal blocks, +=
  float* du;       // (B·H, Tp, DP): dU from the scan, +=
  float* dw_scan;  // (B·H, Tp, DP): dW from the scan, +=
  float* dv;       // (B·H, Tp, DP): dV from the off-diagonal blocks, +=
  float* dc;       // (B·H, n_blocks, DP, DP): dC, += (where c is not null; the scan then leaves
                   // du and dw_scan to backward_end, which derives them from dc)
  float* dg;       // (B·H, Tp): Σ_j dS_ij − Σ_i' dS_i'i over the off-diagonal blocks, +=
};
Accumulators backward_begin(const bf16_bits* q, const bf16_bits* k, const float* w, const float* beta,
                            const float* log_f, const PathAttentionArgs& args);
void backward_end(const Accumulators& acc, bf16_bits* dq, bf16_bits* dk, bf16_bits* dv, float* dw,
                  float* dbeta, float* dlog_f, const bf16_bits* dout, const float* lse,
                  const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const float* w,
                  const float* beta, const float* log_f, const PathAttentionArgs& args);

}  // namespace pb::cuda::path
