// The parts shared by the bf16 PaTH scans (path_bf16_forward.cu, path_bf16_backward.cu) and their
// packing kernels (path_bf16_pack.cu): warp counts, the C form's query move, cp.async row staging and
// the packed bf16 / f16 copies of prep's arrays. The math and the names are those of the fp32
// kernels (path_common.cuh) and kernels/README.md ("PaTH attention"); the block products
// P_J = H_{J·S+S−1} ⋯ H_{J·S} = I − W_Jᵀ U_J come from the TF32 prep (path_attention.cuh).
//
// Forward (three launches, four in the C form):
//   prep     path_prep_tf32 (path_prep.cu; TF32 tensor cores on bf16 q, k widened to fp32 in shared
//            memory), per (block, b·h): G, Q̃ (queries at their block's left edge), K̃ (keys at their
//            block's right edge), U, S_loc (the logits inside each block) and, in the C form (D ≤ S:
//            D = 32, 64), C_J = W_Jᵀ U_J (P_J = I − C_J)
//   pack     path_pack_kwu_bf16: K̃ → bf16, W, U → f16 (not in the C form); path_pack_c_bf16:
//            C → f16 (C form); for 16-byte cp.async copies
//   scan     path_fwd_scan_bf16 (path_bf16_forward.cu)
// Backward: prep and zeroed accumulators (path::backward_begin), pack, the tensor-core backward scan
// path_bwd_scan_bf16 (path_bf16_backward.cu: it writes δ, dQ̃ and the off-diagonal dV, dK̃, dG, and
// dC or dU, dW), then the UT backward and gate kernels (path::backward_end, path_ut_backward.cu:
// path_bwd_dc_tf32 first in the C form, path_bwd_ut_tf32, path_gate_suffix_f64), which read bf16
// q, k, v, dout and write dq, dk, dv rounded to bf16 once.
// Design, predictions and measurements: kernels/dev/path_bf16_notes.md. Internal to kernels/cuda/.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/attention_bf16.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/path_attention.cuh"

namespace pb::cuda::path {

// Constants and device helpers, one copy per .cu file (internal linkage).
namespace {

constexpr int kFwdWarps = 8, kBwdWarps = 8;  // warps per CTA, 16 query rows each
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// The C form (path::c_form: D ≤ S): queries cross key block J by R ← R − R C_J with the D × D
// matrix C_J = W_Jᵀ U_J, one product instead of two (x = R W_Jᵀ, R ← R − x U_J).
template <int S, int D>
constexpr bool kC = path::c_form(S, D);

// R ← R + (−R) C_J, i.e. R P_J in the C form: R (16 × D) in fp32 C fragments, rh the A fragments
// of −R in f16 (taken before the update), C_J (D × D, f16) in shared memory. The forward scan and
// the backward's pre-scan both move queries with it, so they compute the same R_J.
template <int D, int LD>
__device__ __forceinline__ void move_c(float (&r)[D / 8][4], const uint32_t (&rh)[D / 16][4],
                                       const uint16_t* c) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int nd = 0; nd < D / 16; ++nd) {
      uint32_t bc[4];
      mma::load_b_kn(bc, c, LD, 16 * kk, 16 * nd);
      mma::mma_16816<mma::F16>(r[2 * nd], rh[kk], bc[0], bc[1]);
      mma::mma_16816<mma::F16>(r[2 * nd + 1], rh[kk], bc[2], bc[3]);
    }
}

// ROWS rows of an (·, D) b16 tile, by the NT threads of the CTA, from global rows `stride` elements
// apart into shared memory (stride LD); rows ≥ n_valid are zero-filled instead of read. Each thread
// copies one 16-byte chunk column of every NT / (D / 8)-th row: the addresses are set up once.
template <int ROWS, int D, int LD, int NT>
__device__ __forceinline__ void stage_rows(uint16_t* dst, const void* src, int64_t stride, int n_valid) {
  constexpr int kChunks = D / 8, kStep = NT / kChunks;  // 16-byte chunks per row, rows per pass
  static_assert(NT % kChunks == 0, "whole rows per pass");
  const int r0 = threadIdx.x / kChunks, c = (threadIdx.x % kChunks) * 8;
  const uint16_t* s = static_cast<const uint16_t*>(src) + r0 * stride + c;
  uint16_t* d = dst + r0 * LD + c;
#pragma unroll
  for (int i = 0; i < (ROWS + kStep - 1) / kStep; ++i) {
    const int r = r0 + i * kStep;
    if (ROWS % kStep != 0 && r >= ROWS) break;
    if (r < n_valid)
      mma::cp_async16(d + i * kStep * LD, s + i * kStep * stride);
    else
      *reinterpret_cast<uint4*>(d + i * kStep * LD) = make_uint4(0, 0, 0, 0);
  }
}

}  // namespace

// The packed copies the scans read, in scratch arena 2 after `cv`'s earlier arrays: K̃ (bf16), and
// in the C form C (f16; the backward also bf16), else W, U (f16; the backward also bf16).
struct Packed {
  __nv_bfloat16 *kb = nullptr, *wb = nullptr, *ub = nullptr;  // (B·H, Tp, D)
  __half *wh = nullptr, *uh = nullptr;                        // (B·H, Tp, D)
  __half* ch = nullptr;                                       // (B·H, n_blocks, D, D)
  __nv_bfloat16* cb = nullptr;                                // (B·H, n_blocks, D, D)
};
Packed take_packed(Carver& cv, const AttnShape& sh, int S, bool backward);
// Fills the packed copies from prep's arrays and w (B, T, H, D): path_pack_kwu_bf16, and
// path_pack_c_bf16 in the C form.
void pack_all(const Packed& pk, const Prepared& p, const float* w, const AttnShape& sh);

// Head dims 32, 64 or 128, else a CUDA error.
void check_shape(const AttnShape& sh);

}  // namespace pb::cuda::path
