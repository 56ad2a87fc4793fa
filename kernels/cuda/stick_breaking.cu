// Stick-breaking attention (Tan et al. 2025) on the GPU, in log space with the leftover mass to the
// current token: tiled like FlashAttention in fp32 (FFMA), O(T·D) memory plus two floats per query
// and key tile. Formulas and the backward derivation: kernels/README.md, "Stick-breaking
// attention"; the reference is kernels/cpu/stick_breaking.cpp.
//
// Tiles (as in softmax_attention.cu). A block of 256 threads is a 16 × 16 grid (ty, tx) over one
// (BT × BT) tile of logits of one (b, h): thread (ty, tx) owns rows ty·RM + a (queries) and columns
// tx + 16·b (keys), and rows ty·RM + a × columns n_j = (j / VW)·16·VW + tx·VW + j % VW of a
// (BT × DP) output tile. BT = 64 for DP ≤ 128, 32 for DP = 256; DP is D rounded up to 32, 64, 128
// or 256. Shared-memory tiles are row-major with the stride padded by 4 floats (conflict-free
// float4 loads). A tile row belongs to a half-warp, so its scans over keys are shuffles.
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

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"

namespace pb::cuda {
namespace {

constexpr int kThreads = 256;  // 16 × 16
constexpr unsigned kFull = 0xffffffffu;

// Tile geometry for the padded head dim DP.
template <int DP>
struct Tile {
  static constexpr int BT = DP <= 128 ? 64 : 32;  // queries or keys per tile
  static constexpr int RM = BT / 16;              // tile rows per thread
  static constexpr int RN = BT / 16;              // tile columns per thread
  static constexpr int NV = DP / 16;              // output-tile columns per thread
  static constexpr int VW = NV < 4 ? NV : 4;      // their vector width
  static constexpr int LD = DP + 4;               // row stride of (BT, DP) smem tiles
  static constexpr int LP = BT + 4;               // row stride of (BT, BT) smem tiles
  // Output-tile column of the thread's j-th accumulator.
  __device__ static int col(int j, int tx) { return (j / VW) * 16 * VW + tx * VW + j % VW; }
};

// N consecutive floats of shared memory (16-byte aligned for N = 4, 8-byte for N = 2).
template <int N>
__device__ __forceinline__ void load_vec(float* out, const float* p) {
  if constexpr (N == 4) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    out[0] = t.x, out[1] = t.y, out[2] = t.z, out[3] = t.w;
  } else if constexpr (N == 2) {
    const float2 t = *reinterpret_cast<const float2*>(p);
    out[0] = t.x, out[1] = t.y;
  } else {
    for (int i = 0; i < N; ++i) out[i] = p[i];
  }
}

// Sum over the 16 threads of a tile row (a half-warp); every one gets the same bits.
__device__ __forceinline__ float row_sum(float x) {
  for (int o = 8; o > 0; o >>= 1) x += __shfl_xor_sync(kFull, x, o);
  return x;
}

// s (BT, LD) ← rows t0 .. t0+BT−1 of one head's (T, D) slice g (row stride `stride`); zero at
// t ≥ T and d ≥ D.
template <int DP>
__device__ __forceinline__ void load_tile(float* s, const float* __restrict__ g, int t0, int T,
                                          int stride, int D) {
  using L = Tile<DP>;
  constexpr int kRows = kThreads / DP;  // rows per sweep of the block; column d is fixed
  const int d = threadIdx.x % DP, r0 = threadIdx.x / DP;
  const float* p = g + int64_t(t0 + r0) * stride + d;
  const int64_t step = int64_t(kRows) * stride;
#pragma unroll
  for (int it = 0; it < L::BT / kRows; ++it) {
    const int r = r0 + it * kRows;
    s[r * L::LD + d] = (t0 + r < T && d < D) ? p[it * step] : 0.f;
  }
}

// acc[a][b] += Σ_d X[ty·RM + a][d] · Y[tx + 16b][d]      X, Y: (BT, LD) smem tiles
template <int DP>
__device__ __forceinline__ void mm_abt(float (&acc)[Tile<DP>::RM][Tile<DP>::RN], const float* X,
                                       const float* Y, int ty, int tx) {
  using L = Tile<DP>;
#pragma unroll 1
  for (int d = 0; d < DP; d += 4) {
    float x[L::RM][4], y[L::RN][4];
#pragma unroll
    for (int a = 0; a < L::RM; ++a) load_vec<4>(x[a], X + (ty * L::RM + a) * L::LD + d);
#pragma unroll
    for (int b = 0; b < L::RN; ++b) load_vec<4>(y[b], Y + (tx + 16 * b) * L::LD + d);
#pragma unroll
    for (int a = 0; a < L::RM; ++a)
#pragma unroll
      for (int b = 0; b < L::RN; ++b)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[a][b] = fmaf(x[a][e], y[b][e], acc[a][b]);
  }
}

// acc[a][j] += Σ_c P[ty·RM + a][c] · Y[c][n_j]            P: (BT, LP), Y: (BT, LD) smem tiles
template <int DP>
__device__ __forceinline__ void mm_ab(float (&acc)[Tile<DP>::RM][Tile<DP>::NV], const float* P,
                                      const float* Y, int ty, int tx) {
  using L = Tile<DP>;
#pragma unroll 1
  for (int c = 0; c < L::BT; c += 4) {
    float p[L::RM][4];
#pragma unroll
    for (int a = 0; a < L::RM; ++a) load_vec<4>(p[a], P + (ty * L::RM + a) * L::LP + c);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float y[L::NV];
#pragma unroll
      for (int g = 0; g < L::NV / L::VW; ++g)
        load_vec<L::VW>(y + g * L::VW, Y + (c + e) * L::LD + g * 16 * L::VW + tx * L::VW);
#pragma unroll
      for (int a = 0; a < L::RM; ++a)
#pragma unroll
        for (int j = 0; j < L::NV; ++j) acc[a][j] = fmaf(p[a][e], y[j], acc[a][j]);
    }
  }
}

// acc[a][j] += Σ_r P[r][ty·RM + a] · Y[r][n_j]            P: (BT, LP), Y: (BT, LD) smem tiles
template <int DP>
__device__ __forceinline__ void mm_atb(float (&acc)[Tile<DP>::RM][Tile<DP>::NV], const float* P,
                                       const float* Y, int ty, int tx) {
  using L = Tile<DP>;
#pragma unroll 4
  for (int r = 0; r < L::BT; ++r) {
    float p[L::RM], y[L::NV];
    load_vec<L::RM>(p, P + r * L::LP + ty * L::RM);
#pragma unroll
    for (int g = 0; g < L::NV / L::VW; ++g)
      load_vec<L::VW>(y + g * L::VW, Y + r * L::LD + g * 16 * L::VW + tx * L::VW);
#pragma unroll
    for (int a = 0; a < L::RM; ++a)
#pragma unroll
      for (int j = 0; j < L::NV; ++j) acc[a][j] = fmaf(p[a], y[j], acc[a][j]);
  }
}

// Where one (b, h) lives: element (t, d) of q, k, v, o, ... at head + t·stride + d, the per-head
// scalar t of δ and rem at scalar + t·H.
struct HeadIndex {
  int64_t head, scalar;
  int stride;
  __device__ HeadIndex(int bh, int T, int H, int D)
      : head((int64_t(bh / H) * T * H + bh % H) * D),
        scalar(int64_t(bh / H) * T * H + bh % H),
        stride(H * D) {}
};

// ---------------------------------------------------------------------------------------------
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
    forward_kernel(float* __restrict__ out,         // kDelta ? δ (B, T, H) : o (B, T, H, D)
                   float* __restrict__ rem,         // (B, T, H), kDelta only
                   const float* __restrict__ dout,  // (B, T, H, D), kDelta only
                   const float* __restrict__ q,     // (B, T, H, D)
                   const float* __restrict__ k,     // (B, T, H, D)
                   const float* __restrict__ v,     // (B, T, H, D)
                   int T, int H, int D, float scale) {
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
    // z_ij = scale·q_i·k_j
    float z[L::RM][L::RN] = {};
    mm_abt<DP>(z, sq, sk, ty, tx);
#pragma unroll
    for (int a = 0; a < L::RM; ++a) {
      float zs[L::RN], A[L::RN], log_sig[L::RN];
#pragma unroll
      for (int b = 0; b < L::RN; ++b) zs[b] = scale * z[a][b];
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
      dot = row_sum(dot);
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
// at each tile (the sums over the keys right of it) for dkdv_kernel:
//   dq_i = scale Σ_{l<i} dz_il k_l
template <int DP>
__global__ void __launch_bounds__(kThreads, DP <= 64 ? 2 : 1)
    dq_kernel(float* __restrict__ dq,               // (B, T, H, D)
              float* __restrict__ carry_sp,         // (B·H, tiles, T) Σ_{l right, l<i} softplus(z_il)
              float* __restrict__ carry_g,          // (B·H, tiles, T) Σ_{j right, j<i} g_ij
              const float* __restrict__ dout,       // (B, T, H, D)
              const float* __restrict__ q,          // (B, T, H, D)
              const float* __restrict__ k,          // (B, T, H, D)
              const float* __restrict__ v,          // (B, T, H, D)
              const float* __restrict__ delta,      // (B, T, H)
              int T, int H, int D, float scale) {
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
    // z_ij = scale·q_i·k_j,  dA_ij = dout_i·v_j
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
      for (int b = 0; b < L::RN; ++b) zs[b] = scale * z[a][b];
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
// weights and dz recomputed with the carries of dq_kernel:
//   dv_l = Σ_{i>l} A_il dout_i + rem_l dout_l,  dk_l = scale Σ_{i>l} dz_il q_i
template <int DP>
__global__ void __launch_bounds__(kThreads, DP <= 64 ? 2 : 1)
    dkdv_kernel(float* __restrict__ dk,               // (B, T, H, D)
                float* __restrict__ dv,               // (B, T, H, D)
                const float* __restrict__ carry_sp,   // (B·H, tiles, T)
                const float* __restrict__ carry_g,    // (B·H, tiles, T)
                const float* __restrict__ delta,      // (B, T, H)
                const float* __restrict__ rem,        // (B, T, H)
                const float* __restrict__ dout,       // (B, T, H, D)
                const float* __restrict__ q,          // (B, T, H, D)
                const float* __restrict__ k,          // (B, T, H, D)
                const float* __restrict__ v,          // (B, T, H, D)
                int T, int H, int D, float scale) {
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
    // z_il = scale·q_i·k_l,  dA_il = dout_i·v_l  (rows: queries, columns: keys)
    float z[L::RM][L::RN] = {}, dA[L::RM][L::RN] = {};
    mm_abt<DP>(z, sq, sk, ty, tx);
    mm_abt<DP>(dA, sdo, sv, ty, tx);
#pragma unroll
    for (int a = 0; a < L::RM; ++a) {
      const int i = q0 + ty * L::RM + a, ic = min(i, T - 1);
      const int64_t c = carry_index(blockIdx.x, kt, n_tiles, T, ic);
      float zs[L::RN], A[L::RN], log_sig[L::RN], dz[L::RN];
#pragma unroll
      for (int b = 0; b < L::RN; ++b) zs[b] = scale * z[a][b];
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

// ---------------------------------------------------------------------------------------------
// Launches

template <int DP>
constexpr size_t smem_bytes(int n_dp_tiles, int n_bt_tiles) {
  return sizeof(float) * (size_t(n_dp_tiles) * Tile<DP>::BT * Tile<DP>::LD +
                          size_t(n_bt_tiles) * Tile<DP>::BT * Tile<DP>::LP);
}

// Launches `kernel` on grid (B·H, ⌈T / BT⌉) with `bytes` of dynamic shared memory.
template <int DP, class Kernel, class... Args>
void launch(Kernel kernel, size_t bytes, const AttnShape& s, Args... args) {
  PB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  const dim3 grid(s.B * s.H, ceil_div(s.T, Tile<DP>::BT));
  kernel<<<grid, kThreads, bytes, stream()>>>(args...);
  PB_LAUNCH_CHECK();
}

template <int DP>
void forward(float* o, const float* q, const float* k, const float* v,
             const StickBreakingArgs& args) {
  const AttnShape& s = args.shape;
  launch<DP>(forward_kernel<DP, false>, smem_bytes<DP>(3, 1), s, o, static_cast<float*>(nullptr),
             static_cast<const float*>(nullptr), q, k, v, s.T, s.H, s.D, float(args.scale));
}

template <int DP>
void backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
              const float* v, const StickBreakingArgs& args) {
  const AttnShape& s = args.shape;
  const float scale = float(args.scale);
  const size_t n = size_t(s.B) * s.T * s.H, n_carry = n * ceil_div(s.T, Tile<DP>::BT);
  float* delta = static_cast<float*>(scratch(sizeof(float) * (2 * n + 2 * n_carry)));  // (B, T, H)
  float* rem = delta + n;          // (B, T, H)
  float* carry_sp = rem + n;       // (B·H, tiles, T)
  float* carry_g = carry_sp + n_carry;  // (B·H, tiles, T)
  // δ_i = dout_i·o_i, rem_i
  launch<DP>(forward_kernel<DP, true>, smem_bytes<DP>(3, 1), s, delta, rem, dout, q, k, v, s.T,
             s.H, s.D, scale);
  launch<DP>(dq_kernel<DP>, smem_bytes<DP>(4, 1), s, dq, carry_sp, carry_g, dout, q, k, v, delta,
             s.T, s.H, s.D, scale);
  launch<DP>(dkdv_kernel<DP>, smem_bytes<DP>(4, 2), s, dk, dv, static_cast<const float*>(carry_sp),
             static_cast<const float*>(carry_g), static_cast<const float*>(delta),
             static_cast<const float*>(rem), dout, q, k, v, s.T, s.H, s.D, scale);
}

// The padded head dim of D: 32, 64, 128 or 256.
int padded_head_dim(int D) {
  if (D < 1 || D > 256)
    throw std::invalid_argument("stick-breaking attention: head dim " + std::to_string(D) +
                                " outside 1..256");
  return D <= 32 ? 32 : D <= 64 ? 64 : D <= 128 ? 128 : 256;
}

}  // namespace

void stick_breaking_forward(float* o, const float* q, const float* k, const float* v,
                            const StickBreakingArgs& args) {
  const AttnShape& s = args.shape;
  if (int64_t(s.B) * s.H * s.T == 0) return;
  switch (padded_head_dim(s.D)) {
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
  switch (padded_head_dim(s.D)) {
    case 32: backward<32>(dq, dk, dv, dout, q, k, v, args); break;
    case 64: backward<64>(dq, dk, dv, dout, q, k, v, args); break;
    case 128: backward<128>(dq, dk, dv, dout, q, k, v, args); break;
    default: backward<256>(dq, dk, dv, dout, q, k, v, args); break;
  }
}

}  // namespace pb::cuda
