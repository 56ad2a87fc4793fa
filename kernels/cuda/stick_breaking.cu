// Stick-breaking attention (Tan et al. 2025) on the GPU, in log space with the leftover mass to the
// current token: tiled like FlashAttention in fp32 (FFMA), O(T·D) memory plus two floats per query
// and key tile. Formulas and the backward derivation: kernels/README.md, "Stick-breaking
// attention"; the reference is kernels/cpu/stick_breaking.cpp.
//
// Tiles, inner products and launches: attention_tiles.cuh (rows of a logit tile are queries,
// columns keys; a tile row belongs to a half-warp, so its scans over keys are shuffles).
//
// The sums over keys of one query row, Σ_{j<l<i} softplus(z_il) and Σ_{l<j<i} g_ij, run right to
// left: key tiles from the diagonal leftwards, a shuffle suffix scan inside a tile, and per query
// a carry (the sum over the tiles to the right). Kernels (grid (B·H, tiles), longest tiles first):
//   forward:   per query tile → o
//   backward:  per query tile: the forward again → δ_i = dout_i·o_i, rem_i; per query tile → dq and
//              the carries at every key tile (scratch); per key tile, from those carries → dk, dv.
// Every output element is written by one thread in a fixed order: results are deterministic.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "core/cuda/runtime.h"

namespace pb::cuda {
namespace {

// One thread's part of a tile row: query i, keys j = j0 + 16·b (j0 = k0 + tx); entries with j ≥ i
// or i ≥ T are masked (weight and gradient 0).

// e[b] = Σ_{c' > c} x_{c'} over the tile row (c = tx + 16b); returns Σ_c x_c. Per 16-column segment
// an exclusive suffix scan over the half-warp, plus the totals of the segments to its right.
template <int RN>
__device__ __forceinline__ float row_suffix_scan(const float (&x)[RN], float (&e)[RN], int tx) {
  float right = 0.f;  // Σ over the segments right of b
#pragma unroll
  for (int b = RN - 1; b >= 0; --b) {
    // w = Σ_{tx' > tx} x[tx' + 16b]: shift by one lane, then an inclusive suffix scan
    float w = __shfl_down_sync(kFull, x[b], 1, 16);
    if (tx == 15) w = 0.f;
#pragma unroll
    for (int o = 1; o < 16; o <<= 1) {
      const float y = __shfl_down_sync(kFull, w, o, 16);
      if (tx + o < 16) w += y;
    }
    e[b] = w + right;
    right += __shfl_sync(kFull, w + x[b], 0, 16);
  }
  return right;
}

// From the scaled logits z_ij, with carry = Σ_{l right of the tile, l<i} softplus(z_il):
//   softplus(z) = max(z, 0) + log(1 + e^{−|z|}),  log σ(z) = min(z, 0) − log(1 + e^{−|z|})
//   A_ij = exp(log σ(z_ij) − Σ_{j<l<i} softplus(z_il))
// Returns Σ_{j in the tile, j<i} softplus(z_ij), the carry's increment. e^{−|z|} by the fast
// intrinsic: its relative error becomes an absolute error ≤ 2⁻²¹·e^{−|z|} of the log1p.
template <int RN>
__device__ __forceinline__ float stick_weights(float (&A)[RN],         // A_ij
                                               float (&log_sig)[RN],   // log σ(z_ij)
                                               const float (&z)[RN], int i, int j0, int T,
                                               float carry, int tx) {
  float sp[RN], right[RN];
#pragma unroll
  for (int b = 0; b < RN; ++b) {
    const float t = log1pf(__expf(-fabsf(z[b])));
    sp[b] = (j0 + 16 * b < i && i < T) ? fmaxf(z[b], 0.f) + t : 0.f;
    log_sig[b] = fminf(z[b], 0.f) - t;
  }
  const float total = row_suffix_scan(sp, right, tx);
#pragma unroll
  for (int b = 0; b < RN; ++b)
    A[b] = (j0 + 16 * b < i && i < T) ? expf(log_sig[b] - right[b] - carry) : 0.f;
  return total;
}

// From A_ij, log σ(z_ij), dA_ij = dout_i·v_j, δ_i = dout_i·o_i and carry = Σ_{j right of the tile,
// j<i} g_ij:
//   g_ij = A_ij dA_ij,  dz_il = g_il − σ(z_il) (δ_i − Σ_{l<j<i} g_ij)
// (δ_i − Σ_{l<j<i} g_ij = rem_i drem_i + Σ_{j≤l} g_ij, README). Returns Σ_{j in the tile} g_ij.
template <int RN>
__device__ __forceinline__ float stick_grads(float (&dz)[RN], const float (&A)[RN],
                                             const float (&log_sig)[RN], const float (&dA)[RN],
                                             int i, int j0, int T, float carry, float delta_i,
                                             int tx) {
  float g[RN], right[RN];
#pragma unroll
  for (int b = 0; b < RN; ++b) g[b] = A[b] * dA[b];  // 0 where masked
  const float total = row_suffix_scan(g, right, tx);
#pragma unroll
  for (int b = 0; b < RN; ++b)
    dz[b] = (j0 + 16 * b < i && i < T)
                ? g[b] - expf(log_sig[b]) * (delta_i - right[b] - carry)
                : 0.f;
  return total;
}

// ---------------------------------------------------------------------------------------------
// Forward, and the δ pass of the backward

// Per query tile (blockIdx.y counted from the last), key tiles diagonal .. 0:
//   acc_i += Σ_j A_ij v_j,  carry_i += Σ_j softplus(z_ij)
// then rem_i = e^{−carry_i} and o_i = acc_i + rem_i v_i. With kDelta, o stays in registers and
// δ_i = dout_i·o_i and rem_i are written instead.
template <int DP, bool kDelta>
__global__ void __launch_bounds__(kThreads, DP <= 64 ? 2 : 1)
    sba_forward_kernel(float* __restrict__ out,         // kDelta ? δ (B, T, H) : o (B, T, H, D)
                       float* __restrict__ rem,         // (B, T, H), kDelta only
                       const float* __restrict__ dout,  // (B, T, H, D), kDelta only
                       const float* __restrict__ q,     // (B, T, H, D)
                       const float* __restrict__ k,     // (B, T, H, D)
                       const float* __restrict__ v,     // (B, T, H, D)
                       int T, int H, int D, float scale, float bias) {
  using L = Tile<DP>;
  extern __shared__ float4 smem4[];
  float* sq = reinterpret_cast<float*>(smem4);  // (BT, LD) queries of this tile
  float* sk = sq + L::BT * L::LD;               // (BT, LD) keys
  float* sv = sk + L::BT * L::LD;               // (BT, LD) values
  float* sa = sv + L::BT * L::LD;               // (BT, LP) A
  const HeadIndex at(blockIdx.x, T, H, D);
  const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * L::BT;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

  load_tile<DP>(sq, q + at.head, q0, T, at.stride, D);
  float carry[L::RM] = {}, acc[L::RM][L::NV] = {};
  for (int kt = qt; kt >= 0; --kt) {
    const int k0 = kt * L::BT;
    __syncthreads();  // the previous tile's sk, sv, sa are read
    load_tile<DP>(sk, k + at.head, k0, T, at.stride, D);
    load_tile<DP>(sv, v + at.head, k0, T, at.stride, D);
    __syncthreads();
    // z_ij = scale·q_i·k_j + bias
    float z[L::RM][L::RN] = {};
    mm_abt<DP>(z, sq, sk, ty, tx);
#pragma unroll
    for (int a = 0; a < L::RM; ++a) {
      float zs[L::RN], A[L::RN], log_sig[L::RN];
#pragma unroll
      for (int b = 0; b < L::RN; ++b) zs[b] = scale * z[a][b] + bias;
      carry[a] += stick_weights(A, log_sig, zs, q0 + ty * L::RM + a, k0 + tx, T, carry[a], tx);
#pragma unroll
      for (int b = 0; b < L::RN; ++b) sa[(ty * L::RM + a) * L::LP + tx + 16 * b] = A[b];
    }
    __syncthreads();
    // acc_i += Σ_j A_ij v_j
    mm_ab<DP>(acc, sa, sv, ty, tx);
  }
#pragma unroll
  for (int a = 0; a < L::RM; ++a) {
    const int i = q0 + ty * L::RM + a;
    // rem_i = e^{−Σ_{l<i} softplus(z_il)},  o_i = Σ_{j<i} A_ij v_j + rem_i v_i
    const float r = expf(-carry[a]);
    float dot = 0.f;  // Σ_n dout_in o_in over this thread's columns
#pragma unroll
    for (int j = 0; j < L::NV; ++j) {
      const int n = L::col(j, tx);
      if (i >= T || n >= D) continue;
      const int64_t e = at.head + int64_t(i) * at.stride + n;
      const float o_in = fmaf(r, v[e], acc[a][j]);
      if constexpr (kDelta) {
        dot = fmaf(dout[e], o_in, dot);
      } else {
        out[e] = o_in;
      }
    }
    if constexpr (kDelta) {
      // δ_i = dout_i·o_i
      dot = half_warp_sum(dot);
      if (tx == 0 && i < T) {
        out[at.scalar + int64_t(i) * H] = dot;
        rem[at.scalar + int64_t(i) * H] = r;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Backward

// Index of the carries of query t at key tile kt: (B·H, tiles, T).
__device__ __forceinline__ int64_t carry_index(int bh, int kt, int n_tiles, int T, int t) {
  return (int64_t(bh) * n_tiles + kt) * T + t;
}

// Per query tile (blockIdx.y counted from the last), key tiles diagonal .. 0, saving the carries
// at each tile (the sums over the keys right of it) for sba_dkdv_kernel:
//   dq_i = scale Σ_{l<i} dz_il k_l
template <int DP>
__global__ void __launch_bounds__(kThreads, DP <= 64 ? 2 : 1)
    sba_dq_kernel(float* __restrict__ dq,               // (B, T, H, D)
                  float* __restrict__ carry_sp,         // (B·H, tiles, T) Σ_{l right, l<i} softplus(z_il)
                  float* __restrict__ carry_g,          // (B·H, tiles, T) Σ_{j right, j<i} g_ij
                  const float* __restrict__ dout,       // (B, T, H, D)
                  const float* __restrict__ q,          // (B, T, H, D)
                  const float* __restrict__ k,          // (B, T, H, D)
                  const float* __restrict__ v,          // (B, T, H, D)
                  const float* __restrict__ delta,      // (B, T, H)
                  int T, int H, int D, float scale, float bias) {
  using L = Tile<DP>;
  extern __shared__ float4 smem4[];
  float* sq = reinterpret_cast<float*>(smem4);  // (BT, LD) queries of this tile
  float* sdo = sq + L::BT * L::LD;              // (BT, LD) dout
  float* sk = sdo + L::BT * L::LD;              // (BT, LD) keys
  float* sv = sk + L::BT * L::LD;               // (BT, LD) values
  float* sdz = sv + L::BT * L::LD;              // (BT, LP) dz
  const HeadIndex at(blockIdx.x, T, H, D);
  const int n_tiles = gridDim.y, qt = n_tiles - 1 - blockIdx.y, q0 = qt * L::BT;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

  load_tile<DP>(sq, q + at.head, q0, T, at.stride, D);
  load_tile<DP>(sdo, dout + at.head, q0, T, at.stride, D);
  float acc[L::RM][L::NV] = {}, c_sp[L::RM] = {}, c_g[L::RM] = {}, delta_i[L::RM];
#pragma unroll
  for (int a = 0; a < L::RM; ++a)
    delta_i[a] = delta[at.scalar + int64_t(min(q0 + ty * L::RM + a, T - 1)) * H];
  for (int kt = qt; kt >= 0; --kt) {
    const int k0 = kt * L::BT;
    __syncthreads();  // the previous tile's sk, sv, sdz are read
    load_tile<DP>(sk, k + at.head, k0, T, at.stride, D);
    load_tile<DP>(sv, v + at.head, k0, T, at.stride, D);
    __syncthreads();
    // z_ij = scale·q_i·k_j + bias,  dA_ij = dout_i·v_j
    float z[L::RM][L::RN] = {}, dA[L::RM][L::RN] = {};
    mm_abt<DP>(z, sq, sk, ty, tx);
    mm_abt<DP>(dA, sdo, sv, ty, tx);
#pragma unroll
    for (int a = 0; a < L::RM; ++a) {
      const int i = q0 + ty * L::RM + a;
      if (tx == 0 && i < T) {
        const int64_t c = carry_index(blockIdx.x, kt, n_tiles, T, i);
        carry_sp[c] = c_sp[a];
        carry_g[c] = c_g[a];
      }
      float zs[L::RN], A[L::RN], log_sig[L::RN], dz[L::RN];
#pragma unroll
      for (int b = 0; b < L::RN; ++b) zs[b] = scale * z[a][b] + bias;
      c_sp[a] += stick_weights(A, log_sig, zs, i, k0 + tx, T, c_sp[a], tx);
      c_g[a] += stick_grads(dz, A, log_sig, dA[a], i, k0 + tx, T, c_g[a], delta_i[a], tx);
#pragma unroll
      for (int b = 0; b < L::RN; ++b) sdz[(ty * L::RM + a) * L::LP + tx + 16 * b] = dz[b];
    }
    __syncthreads();
    // dq_i += Σ_l dz_il k_l
    mm_ab<DP>(acc, sdz, sk, ty, tx);
  }
#pragma unroll
  for (int a = 0; a < L::RM; ++a) {
    const int i = q0 + ty * L::RM + a;
    if (i >= T) continue;
#pragma unroll
    for (int j = 0; j < L::NV; ++j) {
      const int n = L::col(j, tx);
      if (n < D) dq[at.head + int64_t(i) * at.stride + n] = scale * acc[a][j];
    }
  }
}

// Per key tile (blockIdx.y; the first ones have the most work), query tiles diagonal .. last, the
// weights and dz recomputed with the carries of sba_dq_kernel:
//   dv_l = Σ_{i>l} A_il dout_i + rem_l dout_l,  dk_l = scale Σ_{i>l} dz_il q_i
template <int DP>
__global__ void __launch_bounds__(kThreads, DP <= 64 ? 2 : 1)
    sba_dkdv_kernel(float* __restrict__ dk,               // (B, T, H, D)
                    float* __restrict__ dv,               // (B, T, H, D)
                    const float* __restrict__ carry_sp,   // (B·H, tiles, T)
                    const float* __restrict__ carry_g,    // (B·H, tiles, T)
                    const float* __restrict__ delta,      // (B, T, H)
                    const float* __restrict__ rem,        // (B, T, H)
                    const float* __restrict__ dout,       // (B, T, H, D)
                    const float* __restrict__ q,          // (B, T, H, D)
                    const float* __restrict__ k,          // (B, T, H, D)
                    const float* __restrict__ v,          // (B, T, H, D)
                    int T, int H, int D, float scale, float bias) {
  using L = Tile<DP>;
  extern __shared__ float4 smem4[];
  float* sk = reinterpret_cast<float*>(smem4);  // (BT, LD) keys of this tile
  float* sv = sk + L::BT * L::LD;               // (BT, LD) values
  float* sq = sv + L::BT * L::LD;               // (BT, LD) queries
  float* sdo = sq + L::BT * L::LD;              // (BT, LD) dout
  float* sa = sdo + L::BT * L::LD;              // (BT, LP) A: [i][l]
  float* sdz = sa + L::BT * L::LP;              // (BT, LP) dz: [i][l]
  const HeadIndex at(blockIdx.x, T, H, D);
  const int n_tiles = gridDim.y, kt = blockIdx.y, k0 = kt * L::BT;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

  load_tile<DP>(sk, k + at.head, k0, T, at.stride, D);
  load_tile<DP>(sv, v + at.head, k0, T, at.stride, D);
  float acc_k[L::RM][L::NV] = {}, acc_v[L::RM][L::NV] = {};  // rows: keys ty·RM + a
  for (int qt = kt; qt < n_tiles; ++qt) {
    const int q0 = qt * L::BT;
    __syncthreads();  // the previous tile's sq, sdo, sa, sdz are read
    load_tile<DP>(sq, q + at.head, q0, T, at.stride, D);
    load_tile<DP>(sdo, dout + at.head, q0, T, at.stride, D);
    __syncthreads();
    // z_il = scale·q_i·k_l + bias,  dA_il = dout_i·v_l  (rows: queries, columns: keys)
    float z[L::RM][L::RN] = {}, dA[L::RM][L::RN] = {};
    mm_abt<DP>(z, sq, sk, ty, tx);
    mm_abt<DP>(dA, sdo, sv, ty, tx);
#pragma unroll
    for (int a = 0; a < L::RM; ++a) {
      const int i = q0 + ty * L::RM + a, ic = min(i, T - 1);
      const int64_t c = carry_index(blockIdx.x, kt, n_tiles, T, ic);
      float zs[L::RN], A[L::RN], log_sig[L::RN], dz[L::RN];
#pragma unroll
      for (int b = 0; b < L::RN; ++b) zs[b] = scale * z[a][b] + bias;
      stick_weights(A, log_sig, zs, i, k0 + tx, T, carry_sp[c], tx);
      stick_grads(dz, A, log_sig, dA[a], i, k0 + tx, T, carry_g[c],
                  delta[at.scalar + int64_t(ic) * H], tx);
#pragma unroll
      for (int b = 0; b < L::RN; ++b) {
        sa[(ty * L::RM + a) * L::LP + tx + 16 * b] = A[b];
        sdz[(ty * L::RM + a) * L::LP + tx + 16 * b] = dz[b];
      }
    }
    __syncthreads();
    // dv_l += Σ_i A_il dout_i,  dk_l += Σ_i dz_il q_i
    mm_atb<DP>(acc_v, sa, sdo, ty, tx);
    mm_atb<DP>(acc_k, sdz, sq, ty, tx);
  }
#pragma unroll
  for (int a = 0; a < L::RM; ++a) {
    const int l = k0 + ty * L::RM + a;
    if (l >= T) continue;
    const float r = rem[at.scalar + int64_t(l) * H];
#pragma unroll
    for (int j = 0; j < L::NV; ++j) {
      const int n = L::col(j, tx);
      if (n >= D) continue;
      const int64_t e = at.head + int64_t(l) * at.stride + n;
      dk[e] = scale * acc_k[a][j];
      dv[e] = fmaf(r, dout[e], acc_v[a][j]);
    }
  }
}

template <int DP>
void forward(float* o, const float* q, const float* k, const float* v,
             const StickBreakingArgs& args) {
  const AttnShape& s = args.shape;
  launch<DP>(sba_forward_kernel<DP, false>, smem_bytes<DP>(3, 1), s, o, static_cast<float*>(nullptr),
             static_cast<const float*>(nullptr), q, k, v, s.T, s.H, s.D, float(args.scale),
             float(args.bias));
}

template <int DP>
void backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
              const float* v, const StickBreakingArgs& args) {
  const AttnShape& s = args.shape;
  const float scale = float(args.scale), bias = float(args.bias);
  const size_t n = size_t(s.B) * s.T * s.H, n_carry = n * ceil_div(s.T, Tile<DP>::BT);
  float* delta = static_cast<float*>(scratch(sizeof(float) * (2 * n + 2 * n_carry)));  // (B, T, H)
  float* rem = delta + n;          // (B, T, H)
  float* carry_sp = rem + n;       // (B·H, tiles, T)
  float* carry_g = carry_sp + n_carry;  // (B·H, tiles, T)
  // δ_i = dout_i·o_i, rem_i
  launch<DP>(sba_forward_kernel<DP, true>, smem_bytes<DP>(3, 1), s, delta, rem, dout, q, k, v, s.T,
             s.H, s.D, scale, bias);
  launch<DP>(sba_dq_kernel<DP>, smem_bytes<DP>(4, 1), s, dq, carry_sp, carry_g, dout, q, k, v, delta,
             s.T, s.H, s.D, scale, bias);
  launch<DP>(sba_dkdv_kernel<DP>, smem_bytes<DP>(4, 2), s, dk, dv, static_cast<const float*>(carry_sp),
             static_cast<const float*>(carry_g), static_cast<const float*>(delta),
             static_cast<const float*>(rem), dout, q, k, v, s.T, s.H, s.D, scale, bias);
}

}  // namespace

void stick_breaking_forward(float* o, const float* q, const float* k, const float* v,
                            const StickBreakingArgs& args) {
  const AttnShape& s = args.shape;
  if (int64_t(s.B) * s.H * s.T == 0) return;
  switch (padded_head_dim(s.D, "stick-breaking attention")) {
    case 32: forward<32>(o, q, k, v, args); break;
    case 64: forward<64>(o, q, k, v, args); break;
    case 128: forward<128>(o, q, k, v, args); break;
    default: forward<256>(o, q, k, v, args); break;
  }
}

void stick_breaking_backward(float* dq, float* dk, float* dv, const float* dout, const float* q,
                             const float* k, const float* v, const StickBreakingArgs& args) {
  const AttnShape& s = args.shape;
  if (int64_t(s.B) * s.H * s.T == 0) return;
  switch (padded_head_dim(s.D, "stick-breaking attention")) {
    case 32: backward<32>(dq, dk, dv, dout, q, k, v, args); break;
    case 64: backward<64>(dq, dk, dv, dout, q, k, v, args); break;
    case 128: backward<128>(dq, dk, dv, dout, q, k, v, args); break;
    default: backward<256>(dq, dk, dv, dout, q, k, v, args); break;
  }
}

}  // namespace pb::cuda
