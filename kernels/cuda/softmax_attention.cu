// Causal softmax attention with the optional FoX gate on the GPU: FlashAttention-2 in fp32 (FFMA),
// O(T·D) memory. Formulas and the backward derivation: kernels/README.md, "Softmax attention and
// the FoX gate"; the reference is kernels/cpu/softmax_attention.cpp.
//
// Tiles. 256 threads (a block, or half of one, see Kernels) are a 16 × 16 grid (ty, tx) over one
// (BM × BN) tile of logits of one (b, h): thread (ty, tx) owns RM rows r_a (a < RM) and the
// columns tx + 16·b (b < RN) of it, and rows r_a × columns n_j = (j / VW)·16·VW + tx·VW + j % VW
// (j < NV) of a (BM × DP) output tile (in dq at DP ≥ 128: of its half of the DP columns).
// BN = 64 for DP ≤ 128, 32 for DP = 256; BM = BN, except in the forward at DP = 64 and 128, where
// BM = 128 queries (an 8 × 4 micro-tile: twice the FFMA per shared-memory load). DP is the head
// dim D rounded up to 32, 64, 128 or 256 (columns d ≥ D are zero in shared memory and never
// stored). Shared-memory tiles are row-major with the row stride padded by 4 floats, so the float4
// loads of the inner products are free of bank conflicts. A warp is 4 ty × 8 tx and r_a = ty + 16·a
// (Layout): each LDS.128 is one wavefront. The 16 threads of a row span two warps: row maxima and
// sums are xor shuffles over 8 lanes, then the two halves through shared memory (row_reduce).
//
// Kernels (one launch each for all B·H heads; grid (B·H, tiles), the longest tiles first):
//   forward:    per query tile, key tiles left to right, online softmax → o, lse
//   backward:   δ_i = dout_i·o_i; [gate: G by a prefix scan]; per key tile dk, dv (query tiles
//               below the diagonal); per query tile dq (the next K / V tile loads by cp.async
//               under the current one's products, except at DP = 64); [gate: dlog_f by a suffix
//               scan]. At DP ≥ 128 the dk/dv and dq blocks are 512 threads, two halves of 256
//               with one logits product each (s or dp), so that a thread needs ≤ 128 registers
//               and an SM runs 16 warps.
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

// Tile geometry for the padded head dim DP and RM logits rows per thread.
template <int DP, int RM_ = (DP <= 128 ? 4 : 2)>
struct Tile {
  static constexpr int RM = RM_;                  // logits-tile rows per thread
  static constexpr int RN = DP <= 128 ? 4 : 2;    // logits-tile columns per thread
  static constexpr int BM = 16 * RM;              // rows of the logits tile
  static constexpr int BN = 16 * RN;              // its columns
  static constexpr int NV = DP / 16;              // output-tile columns per thread
  static constexpr int VW = NV < 4 ? NV : 4;      // their vector width
  static constexpr int LD = DP + 4;               // row stride of (BM or BN, DP) smem tiles
  static constexpr int LP = BN + 4;               // row stride of (BM, BN) smem tiles
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

// Thread layout: a warp is 4 row groups × 8 column groups,
//   ty = 4·(warp / 2) + lane / 8,  tx = 8·(warp % 2) + lane % 8,  rows r_a = ty + 16·a (a < RM).
// Each LDS.128 of the tile products then reads 4 distinct X / P rows (in distinct banks: the row
// strides are ≡ 4 mod 32) or 8 distinct Y rows: one wavefront each. At DP = 128 and RM = 4 that is
// 8 wavefronts per 64 FFMA in q·kᵀ and 12 per 128 in P·V, against 12 and 20 with 2 × 16 warps.
struct Layout {
  int tx, ty;
  __device__ explicit Layout(int tid)  // 0 .. 255
      : tx(8 * (tid / 32 % 2) + tid % 8), ty(4 * (tid / 64) + tid % 32 / 8) {}
};

// x[a] ← max (kMax) or Σ over the 16 column groups tx of row ty + 16·a of x[a], the same bits in
// every one: xor shuffles over the warp's 8, then warp (tx < 8) ∘ warp (tx ≥ 8) through red
// (2, BM). A block-wide barrier: every thread calls it; red is free again after the caller's next
// barrier.
template <class L, bool kMax>
__device__ __forceinline__ void row_reduce(float (&x)[L::RM], float* red, int ty, int tx) {
#pragma unroll
  for (int a = 0; a < L::RM; ++a) {
    float y = x[a];
    for (int o = 1; o < 8; o <<= 1) {
      const float z = __shfl_xor_sync(kFull, y, o);
      y = kMax ? fmaxf(y, z) : y + z;
    }
    red[(tx / 8) * L::BM + ty + 16 * a] = y;
  }
  __syncthreads();
#pragma unroll
  for (int a = 0; a < L::RM; ++a) {
    const float y0 = red[ty + 16 * a], y1 = red[L::BM + ty + 16 * a];
    x[a] = kMax ? fmaxf(y0, y1) : y0 + y1;
  }
}

// s (ROWS, DP + 4) ← rows t0 .. t0+ROWS−1 of one head's (T, D) slice g (row stride `stride`);
// zero at t ≥ T and d ≥ D. By 256 threads tid = 0 .. 255.
template <int DP, int ROWS>
__device__ __forceinline__ void load_tile(float* s, const float* __restrict__ g, int t0, int T,
                                          int stride, int D, int tid) {
  constexpr int LD = DP + 4;
  constexpr int kRows = kThreads / DP;  // rows per sweep of the threads; column d is fixed
  static_assert(ROWS % kRows == 0, "whole sweeps");
  const int d = tid % DP, r0 = tid / DP;
  const float* p = g + int64_t(t0 + r0) * stride + d;
  const int64_t step = int64_t(kRows) * stride;
#pragma unroll
  for (int it = 0; it < ROWS / kRows; ++it) {
    const int r = r0 + it * kRows;
    s[r * LD + d] = (t0 + r < T && d < D) ? p[it * step] : 0.f;
  }
}

// Asynchronous copy of one float, global → shared (cp.async, sm_80+); zero-fill when !valid, then
// nothing is read from src.
__device__ __forceinline__ void cp_async_f32(float* dst, const float* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
               ::"r"(d), "l"(src), "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed groups are in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// load_tile with cp.async: issued here, complete after cp_async_commit, cp_async_wait and a
// barrier.
template <int DP, int ROWS>
__device__ __forceinline__ void load_tile_async(float* s, const float* __restrict__ g, int t0,
                                                int T, int stride, int D, int tid) {
  constexpr int LD = DP + 4;
  constexpr int kRows = kThreads / DP;
  static_assert(ROWS % kRows == 0, "whole sweeps");
  const int d = tid % DP, r0 = tid / DP;
  const float* p = g + int64_t(t0 + r0) * stride + d;
  const int64_t step = int64_t(kRows) * stride;
#pragma unroll
  for (int it = 0; it < ROWS / kRows; ++it) {
    const int r = r0 + it * kRows;
    const bool valid = t0 + r < T && d < D;
    cp_async_f32(s + r * LD + d, valid ? p + it * step : g, valid);
  }
}

// acc[a][b] += Σ_d X[ty + 16a][d] · Y[tx + 16b][d]      X: (BM, LD), Y: (BN, LD) smem tiles
template <class L, int kUnroll>
__device__ __forceinline__ void mm_abt(float (&acc)[L::RM][L::RN], const float* X, const float* Y,
                                       int ty, int tx) {
  constexpr int DP = L::LD - 4;
#pragma unroll kUnroll
  for (int d = 0; d < DP; d += 4) {
    float x[L::RM][4], y[L::RN][4];
#pragma unroll
    for (int a = 0; a < L::RM; ++a) load_vec<4>(x[a], X + (ty + 16 * a) * L::LD + d);
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

// acc[a][j] += Σ_c P[ty + 16a][c] · Y[c][n_j]            P: (BM, LP), Y: (BN, LD) smem tiles
template <class L, int kUnroll>
__device__ __forceinline__ void mm_ab(float (&acc)[L::RM][L::NV], const float* P, const float* Y,
                                      int ty, int tx) {
#pragma unroll kUnroll
  for (int c = 0; c < L::BN; c += 4) {
    float p[L::RM][4];
#pragma unroll
    for (int a = 0; a < L::RM; ++a) load_vec<4>(p[a], P + (ty + 16 * a) * L::LP + c);
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

// Where one (b, h) lives: element (t, d) of q, k, v, o, ... at head + t·stride + d, the per-head
// scalar t of lse, log_f, G, ... at scalar + t·H.
struct HeadIndex {
  int64_t head, scalar;
  int stride;
  __device__ HeadIndex(int bh, int T, int H, int D)
      : head((int64_t(bh / H) * T * H + bh % H) * D),
        scalar(int64_t(bh / H) * T * H + bh % H),
        stride(H * D) {}
};

// ---------------------------------------------------------------------------------------------
// Forward

// Forward tile: 128 queries × 64 keys (RM = 8) at DP = 64 and 128, square otherwise.
template <int DP>
using FwdTile = Tile<DP, DP == 64 || DP == 128 ? 8 : Tile<DP>::RN>;

// Per query tile (blockIdx.y counted from the last), key tiles 0 .. the last with a key ≤ the
// tile's last query < T:
//   s_ij = scale·q_i·k_j + (G_i − G_j)  (j ≤ i),  m_i ← max(m_i, max_j s_ij),
//   l_i ← l_i·e^{m_old − m_i} + Σ_j e^{s_ij − m_i},  acc_i ← acc_i·e^{m_old − m_i} + Σ_j e^{s_ij − m_i} v_j
// then o_i = acc_i / l_i, lse_i = m_i + log l_i.
template <int DP>
__global__ void __launch_bounds__(kThreads, DP <= 64 ? 2 : 1)
    forward_kernel(float* __restrict__ o,          // (B, T, H, D)
                   float* __restrict__ lse,        // (B, T, H)
                   const float* __restrict__ q,    // (B, T, H, D)
                   const float* __restrict__ k,    // (B, T, H, D)
                   const float* __restrict__ v,    // (B, T, H, D)
                   const double* __restrict__ G,   // (B, T, H) or null
                   int T, int H, int D, float scale) {
  using L = FwdTile<DP>;
  constexpr int kUnroll = DP >= 128 ? 2 : 1;  // of the tile products' loops (spills at DP ≤ 64)
  extern __shared__ float4 smem4[];
  float* sq = reinterpret_cast<float*>(smem4);  // (BM, LD) queries of this tile
  float* sk = sq + L::BM * L::LD;               // (BN, LD) keys
  float* sv = sk + L::BN * L::LD;               // (BN, LD) values
  float* sp = sv + L::BN * L::LD;               // (BM, LP) e^{s − m}
  float* red = sp + L::BM * L::LP;              // (2, BM) halves of row maxima and sums
  const HeadIndex at(blockIdx.x, T, H, D);
  const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * L::BM;
  const int last_kt = (min(q0 + L::BM, T) - 1) / L::BN;  // key tiles above it are fully masked
  const Layout lay(threadIdx.x);
  const int tx = lay.tx, ty = lay.ty;  // thread rows (queries) ty + 16·a, columns (keys) tx + 16·b

  load_tile<DP, L::BM>(sq, q + at.head, q0, T, at.stride, D, threadIdx.x);
  float m[L::RM], l[L::RM], acc[L::RM][L::NV] = {};
  double gi[L::RM];  // G_i
#pragma unroll
  for (int a = 0; a < L::RM; ++a) {
    m[a] = -INFINITY;
    l[a] = 0.f;  // this thread's columns only; summed over the row at the end
    gi[a] = G ? G[at.scalar + int64_t(min(q0 + ty + 16 * a, T - 1)) * H] : 0.0;
  }
  for (int kt = 0; kt <= last_kt; ++kt) {
    const int k0 = kt * L::BN;
    __syncthreads();  // the previous tile's sk, sv, sp are read
    load_tile<DP, L::BN>(sk, k + at.head, k0, T, at.stride, D, threadIdx.x);
    load_tile<DP, L::BN>(sv, v + at.head, k0, T, at.stride, D, threadIdx.x);
    __syncthreads();
    float s[L::RM][L::RN] = {};
    mm_abt<L, kUnroll>(s, sq, sk, ty, tx);
    double gj[L::RN];  // G_j
#pragma unroll
    for (int b = 0; b < L::RN; ++b)
      gj[b] = G ? G[at.scalar + int64_t(min(k0 + tx + 16 * b, T - 1)) * H] : 0.0;
    float tile_max[L::RM];
#pragma unroll
    for (int a = 0; a < L::RM; ++a) {
      const int i = q0 + ty + 16 * a;
      // s_ij = scale·q_i·k_j + (G_i − G_j) for j ≤ i, −∞ above the diagonal. Key tile 0 keeps
      // j = 0 ≤ i in every row, so m is finite from it on; a row masked out of a later tile
      // keeps m (α = 1, p = 0).
      tile_max[a] = -INFINITY;
#pragma unroll
      for (int b = 0; b < L::RN; ++b) {
        const int j = k0 + tx + 16 * b;
        s[a][b] = j <= i ? fmaf(scale, s[a][b], float(gi[a] - gj[b])) : -INFINITY;
        tile_max[a] = fmaxf(tile_max[a], s[a][b]);
      }
    }
    row_reduce<L, true>(tile_max, red, ty, tx);  // max_j s_ij over the tile's row
#pragma unroll
    for (int a = 0; a < L::RM; ++a) {
      // m_new = max(m, max_j s_ij); l, acc rescaled by e^{m − m_new} (0 on the first tile)
      const float m_new = fmaxf(m[a], tile_max[a]);
      const float alpha = expf(m[a] - m_new);
      l[a] *= alpha;
#pragma unroll
      for (int j = 0; j < L::NV; ++j) acc[a][j] *= alpha;
      // p_ij = e^{s_ij − m_new}
#pragma unroll
      for (int b = 0; b < L::RN; ++b) {
        const float p = expf(s[a][b] - m_new);
        l[a] += p;
        sp[(ty + 16 * a) * L::LP + tx + 16 * b] = p;
      }
      m[a] = m_new;
    }
    __syncthreads();
    // acc_i += Σ_j p_ij v_j
    mm_ab<L, kUnroll>(acc, sp, sv, ty, tx);
  }
  row_reduce<L, false>(l, red, ty, tx);  // l_i = Σ over the row
#pragma unroll
  for (int a = 0; a < L::RM; ++a) {
    const int i = q0 + ty + 16 * a;
    if (i >= T) continue;
    // lse_i = m_i + log l_i,  o_i = acc_i / l_i
    if (tx == 0) lse[at.scalar + int64_t(i) * H] = m[a] + logf(l[a]);
    const float inv = 1.f / l[a];
#pragma unroll
    for (int j = 0; j < L::NV; ++j) {
      const int n = L::col(j, tx);
      if (n < D) o[at.head + int64_t(i) * at.stride + n] = acc[a][j] * inv;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Small kernels of the gate and the backward

// δ_r = Σ_d x_rd y_rd over n rows of D: one warp per row.
__global__ void row_dot_kernel(float* __restrict__ delta,   // (n)
                               const float* __restrict__ x, // (n, D)
                               const float* __restrict__ y, // (n, D)
                               int64_t n, int D) {
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= n) return;  // whole warps leave together
  const int lane = threadIdx.x % 32;
  float acc = 0.f;
  for (int d = lane; d < D; d += 32) acc = fmaf(x[r * D + d], y[r * D + d], acc);
  acc = warp_sum(acc);
  if (lane == 0) delta[r] = acc;
}

// Per (b, h) = blockIdx.x, in double: out_t = Σ_{u≤t} x_u (prefix) or Σ_{u≥t} x_u (kSuffix), with
// x_t = a_t − c_t (c may be null). Chunks of 256 steps: warp scans, then the warps before.
template <bool kSuffix, class Out>
__global__ void scan_kernel(Out* __restrict__ out,       // (B, T, H)
                            const float* __restrict__ a, // (B, T, H)
                            const float* __restrict__ c, // (B, T, H) or null
                            int T, int H) {
  constexpr int kWarps = kThreads / 32;
  __shared__ double warp_total[kWarps];
  const int64_t base = int64_t(blockIdx.x / H) * T * H + blockIdx.x % H;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  double carry = 0;  // Σ x over the previous chunks
  for (int s0 = 0; s0 < T; s0 += kThreads) {
    const int step = s0 + threadIdx.x;
    const int64_t idx = base + int64_t(kSuffix ? T - 1 - step : step) * H;
    double x = 0;
    if (step < T) x = double(a[idx]) - (c ? double(c[idx]) : 0.0);
    // inclusive scan over the warp's steps
    for (int o = 1; o < 32; o <<= 1) {
      const double y = __shfl_up_sync(kFull, x, o);
      if (lane >= o) x += y;
    }
    if (lane == 31) warp_total[warp] = x;
    __syncthreads();
    double before = carry, chunk = carry;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) before += warp_total[w];
      chunk += warp_total[w];
    }
    if (step < T) out[idx] = Out(before + x);
    carry = chunk;
    __syncthreads();  // warp_total is rewritten by the next chunk
  }
}

// G_t = Σ_{u≤t} log_f_u per (b, h), in double.
void gate_prefix(double* G, const float* log_f, const AttnShape& s) {
  scan_kernel<false, double><<<s.B * s.H, kThreads, 0, stream()>>>(G, log_f, nullptr, s.T, s.H);
  PB_LAUNCH_CHECK();
}

// ---------------------------------------------------------------------------------------------
// Backward

// dkdv_kernel at DP ≥ 128 runs 512 threads as two halves of 256: half 0 computes s, A and dv,
// half 1 dp, dS and dk, each with one logits and one output micro-tile, so a thread holds half the
// accumulators (≤ 128 registers) and an SM runs 16 warps instead of 8. At DP ≤ 64 one 256-thread
// group does both (2 blocks per SM).
template <int DP>
constexpr bool kDkdvSplit = DP >= 128;

// Per key tile (blockIdx.y; the first ones have the most work), query tiles diagonal .. last,
// with s, A transposed: thread rows are keys j, columns queries i.
//   A_ij = e^{s_ij − lse_i},  dS_ij = A_ij (dout_i·v_j − δ_i)   (i ≥ j)
//   dv_j = Σ_i A_ij dout_i,  dk_j = scale Σ_i dS_ij q_i,  col_j = Σ_i dS_ij (gate only)
template <int DP>
__global__ void __launch_bounds__(kDkdvSplit<DP> ? 2 * kThreads : kThreads, DP <= 64 ? 2 : 1)
    dkdv_kernel(float* __restrict__ dk,            // (B, T, H, D)
                float* __restrict__ dv,            // (B, T, H, D)
                float* __restrict__ col,           // (B, T, H) or null
                const float* __restrict__ dout,    // (B, T, H, D)
                const float* __restrict__ q,       // (B, T, H, D)
                const float* __restrict__ k,       // (B, T, H, D)
                const float* __restrict__ v,       // (B, T, H, D)
                const float* __restrict__ lse,     // (B, T, H)
                const float* __restrict__ delta,   // (B, T, H)
                const double* __restrict__ G,      // (B, T, H) or null
                int T, int H, int D, float scale) {
  using L = Tile<DP>;
  static_assert(L::BM == L::BN, "key tile kt meets query tiles kt ..");
  constexpr bool kSplit = kDkdvSplit<DP>;
  constexpr int kUnroll = DP >= 128 ? 2 : 1;  // of the tile products' loops (spills at DP ≤ 64)
  extern __shared__ float4 smem4[];
  float* sk = reinterpret_cast<float*>(smem4);  // (BM, LD) keys of this tile
  float* sv = sk + L::BM * L::LD;               // (BM, LD) values
  float* sq = sv + L::BM * L::LD;               // (BN, LD) queries
  float* sdo = sq + L::BN * L::LD;              // (BN, LD) dout
  float* sa = sdo + L::BN * L::LD;              // (BM, LP) A transposed: [j][i]
  float* sds = sa + L::BM * L::LP;              // (BM, LP) dS transposed: [j][i]
  float* red = sds + L::BM * L::LP;             // (halves, 2, BM) halves of Σ_i dS_ij
  const HeadIndex at(blockIdx.x, T, H, D);
  const int kt = blockIdx.y, k0 = kt * L::BM, n_tiles = gridDim.y;
  const int half = kSplit ? threadIdx.x / kThreads : 0, tid = threadIdx.x % kThreads;
  const bool role_v = !kSplit || half == 0;  // loads k, q; computes s, A, dv
  const bool role_k = !kSplit || half == 1;  // loads v, dout; computes dp, dS, dk, col
  const Layout lay(tid);
  const int tx = lay.tx, ty = lay.ty;  // thread rows (keys) ty + 16·a, columns (queries) tx + 16·b

  if (role_v) load_tile<DP, L::BM>(sk, k + at.head, k0, T, at.stride, D, tid);
  if (role_k) load_tile<DP, L::BM>(sv, v + at.head, k0, T, at.stride, D, tid);
  // acc[0]: dv (half 0) or dk (half 1); unsplit acc[0] = dv, acc[1] = dk
  float acc[kSplit ? 1 : 2][L::RM][L::NV] = {}, col_sum[L::RM] = {};
  float(&acc_v)[L::RM][L::NV] = acc[0];
  float(&acc_k)[L::RM][L::NV] = acc[kSplit ? 0 : 1];
  double gj[L::RM];  // G_j
#pragma unroll
  for (int a = 0; a < L::RM; ++a)
    gj[a] = G ? G[at.scalar + int64_t(min(k0 + ty + 16 * a, T - 1)) * H] : 0.0;
  for (int qt = kt; qt < n_tiles; ++qt) {
    const int q0 = qt * L::BN;
    __syncthreads();  // the previous tile's sq, sdo, sa, sds are read
    if (role_v) load_tile<DP, L::BN>(sq, q + at.head, q0, T, at.stride, D, tid);
    if (role_k) load_tile<DP, L::BN>(sdo, dout + at.head, q0, T, at.stride, D, tid);
    __syncthreads();
    // s_ji = k_j·q_i (role v),  dp_ji = v_j·dout_i (role k); one array per half when split
    float sx[kSplit ? 1 : 2][L::RM][L::RN] = {};
    float(&s)[L::RM][L::RN] = sx[0];
    float(&dp)[L::RM][L::RN] = sx[kSplit ? 0 : 1];
    if (role_v) mm_abt<L, kUnroll>(s, sk, sq, ty, tx);
    if (role_k) mm_abt<L, kUnroll>(dp, sv, sdo, ty, tx);
    if (role_v) {
#pragma unroll
      for (int b = 0; b < L::RN; ++b) {
        const int i = q0 + tx + 16 * b;
        const int64_t si = at.scalar + int64_t(min(i, T - 1)) * H;
        const float lse_i = lse[si];
        const double gi = G ? G[si] : 0.0;
#pragma unroll
        for (int a = 0; a < L::RM; ++a) {
          const int j = k0 + ty + 16 * a;
          // A_ij = e^{scale·q_i·k_j + G_i − G_j − lse_i}  (i ≥ j, i < T)
          sa[(ty + 16 * a) * L::LP + tx + 16 * b] =
              (j <= i && i < T) ? expf(fmaf(scale, s[a][b], float(gi - gj[a])) - lse_i) : 0.f;
        }
      }
    }
    if (kSplit) __syncthreads();  // A of half 0 → half 1 (the same (ty, tx) positions)
    if (role_k) {
#pragma unroll
      for (int b = 0; b < L::RN; ++b) {
        const float delta_i = delta[at.scalar + int64_t(min(q0 + tx + 16 * b, T - 1)) * H];
#pragma unroll
        for (int a = 0; a < L::RM; ++a) {
          // dS_ij = A_ij (dout_i·v_j − δ_i)
          const int e = (ty + 16 * a) * L::LP + tx + 16 * b;
          const float ds = sa[e] * (dp[a][b] - delta_i);
          col_sum[a] += ds;
          sds[e] = ds;
        }
      }
    }
    __syncthreads();
    // dv_j += Σ_i A_ij dout_i,  dk_j += Σ_i dS_ij q_i
    if (role_v) mm_ab<L, kUnroll>(acc_v, sa, sdo, ty, tx);
    if (role_k) mm_ab<L, kUnroll>(acc_k, sds, sq, ty, tx);
  }
  // col is null for the whole grid or for none; each half reduces into its own red
  if (col) row_reduce<L, false>(col_sum, red + half * 2 * L::BM, ty, tx);
#pragma unroll
  for (int a = 0; a < L::RM; ++a) {
    const int j = k0 + ty + 16 * a;
    if (j >= T) continue;
    if (col && role_k && tx == 0) col[at.scalar + int64_t(j) * H] = col_sum[a];
#pragma unroll
    for (int jj = 0; jj < L::NV; ++jj) {
      const int n = L::col(jj, tx);
      if (n >= D) continue;
      const int64_t e = at.head + int64_t(j) * at.stride + n;
      if (role_k) dk[e] = scale * acc_k[a][jj];
      if (role_v) dv[e] = acc_v[a][jj];
    }
  }
}

// K / V buffers of dq_kernel: two (the next key tile loads under the current one's products),
// except at DP = 64, where the extra 34 KB would cost the second block per SM.
template <int DP>
constexpr int kDqBuffers = DP == 64 ? 1 : 2;

// dq_kernel at DP ≥ 128 runs 512 threads as two halves of 256, like dkdv_kernel: half 0 computes
// s and A, half 1 dp and dS, and each half accumulates dq for its half of the head dim.
template <int DP>
constexpr bool kDqSplit = DP >= 128;

// The output-tile geometry of L restricted to one of kParts equal column ranges of DP (NV / kParts
// columns per thread, same strides); kParts = 1 is L itself.
template <class L, int kParts>
struct ColPart : L {
  static constexpr int NV = L::NV / kParts;
  static constexpr int VW = NV < 4 ? NV : 4;
  __device__ static int col(int j, int tx) { return (j / VW) * 16 * VW + tx * VW + j % VW; }
};

// Per query tile (blockIdx.y counted from the last), key tiles 0 .. diagonal:
//   dS_ij as above,  dq_i = scale Σ_j dS_ij k_j,  row_i = Σ_j dS_ij (gate only)
template <int DP>
__global__ void __launch_bounds__(kDqSplit<DP> ? 2 * kThreads : kThreads, DP <= 64 ? 2 : 1)
    dq_kernel(float* __restrict__ dq,             // (B, T, H, D)
              float* __restrict__ row,            // (B, T, H) or null
              const float* __restrict__ dout,     // (B, T, H, D)
              const float* __restrict__ q,        // (B, T, H, D)
              const float* __restrict__ k,        // (B, T, H, D)
              const float* __restrict__ v,        // (B, T, H, D)
              const float* __restrict__ lse,      // (B, T, H)
              const float* __restrict__ delta,    // (B, T, H)
              const double* __restrict__ G,       // (B, T, H) or null
              int T, int H, int D, float scale) {
  using L = Tile<DP>;
  constexpr bool kSplit = kDqSplit<DP>;
  constexpr int kHalves = kSplit ? 2 : 1;
  using LO = ColPart<L, kHalves>;  // this thread's share of the dq columns
  constexpr int kUnroll = DP == 256 ? 2 : 1;  // of the tile products' loops (2 spills below)
  constexpr int kBuf = kDqBuffers<DP>;
  extern __shared__ float4 smem4[];
  float* sq = reinterpret_cast<float*>(smem4);  // (BM, LD) queries of this tile
  float* sdo = sq + L::BM * L::LD;              // (BM, LD) dout
  float* sds = sdo + L::BM * L::LD;             // (BM, LP) A, then dS in place
  float* red = sds + L::BM * L::LP;             // (halves, 2, BM) halves of Σ_j dS_ij
  float* skv = red + kHalves * 2 * L::BM;       // kBuf × [(BN, LD) keys | (BN, LD) values]
  const HeadIndex at(blockIdx.x, T, H, D);
  const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * L::BM;
  const int last_kt = (min(q0 + L::BM, T) - 1) / L::BN;  // key tiles above it are fully masked
  const int half = kSplit ? threadIdx.x / kThreads : 0, tid = threadIdx.x % kThreads;
  const bool role_s = !kSplit || half == 0;  // loads q, k; computes s, A
  const bool role_d = !kSplit || half == 1;  // loads dout, v; computes dp, dS, row
  const int n0 = half * (DP / kHalves);      // the first dq column of this half
  const Layout lay(tid);
  const int tx = lay.tx, ty = lay.ty;  // thread rows (queries) ty + 16·a, columns (keys) tx + 16·b
  // keys and values of key tile kt into buffer kt % kBuf: cp.async with two buffers, else plain
  const auto issue = [&](int kt) {
    float* sk = skv + (kt % kBuf) * 2 * L::BN * L::LD;
    const int k0 = kt * L::BN;
    if constexpr (kBuf == 2) {
      if (role_s) load_tile_async<DP, L::BN>(sk, k + at.head, k0, T, at.stride, D, tid);
      if (role_d)
        load_tile_async<DP, L::BN>(sk + L::BN * L::LD, v + at.head, k0, T, at.stride, D, tid);
      cp_async_commit();
    } else {
      if (role_s) load_tile<DP, L::BN>(sk, k + at.head, k0, T, at.stride, D, tid);
      if (role_d) load_tile<DP, L::BN>(sk + L::BN * L::LD, v + at.head, k0, T, at.stride, D, tid);
    }
  };

  if (role_s) load_tile<DP, L::BM>(sq, q + at.head, q0, T, at.stride, D, tid);
  if (role_d) load_tile<DP, L::BM>(sdo, dout + at.head, q0, T, at.stride, D, tid);
  float acc[L::RM][LO::NV] = {}, row_part[L::RM] = {}, lse_i[L::RM], delta_i[L::RM];
  double gi[L::RM];  // G_i
#pragma unroll
  for (int a = 0; a < L::RM; ++a) {
    const int64_t si = at.scalar + int64_t(min(q0 + ty + 16 * a, T - 1)) * H;
    lse_i[a] = lse[si];
    delta_i[a] = delta[si];
    gi[a] = G ? G[si] : 0.0;
  }
  if (kBuf == 2) issue(0);
  for (int kt = 0; kt <= last_kt; ++kt) {
    const int k0 = kt * L::BN;
    __syncthreads();  // the previous tile's sds and K / V buffer ((kt + 1) % kBuf) are read
    if (kBuf == 1) {
      issue(kt);
    } else if (kt < last_kt) {
      issue(kt + 1);
      cp_async_wait<1>();  // tile kt has landed, kt + 1 may be in flight
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // tile kt is in shared memory for every thread
    const float* sk = skv + (kt % kBuf) * 2 * L::BN * L::LD;  // (BN, LD) keys
    const float* sv = sk + L::BN * L::LD;                     // (BN, LD) values
    // s_ij = q_i·k_j (role s),  dp_ij = dout_i·v_j (role d). Unsplit, one thread computes both:
    // they must be two arrays (aliased, dp would accumulate onto s and both A and dS be wrong).
    // Split, each half uses only its own one (sx[0] in half 0, sx[1] in half 1).
    float sx[2][L::RM][L::RN] = {};
    float(&s)[L::RM][L::RN] = sx[0];
    float(&dp)[L::RM][L::RN] = sx[1];
    if (role_s) mm_abt<L, kUnroll>(s, sq, sk, ty, tx);
    if (role_d) mm_abt<L, kUnroll>(dp, sdo, sv, ty, tx);
    if (role_s) {
      double gj[L::RN];  // G_j
#pragma unroll
      for (int b = 0; b < L::RN; ++b)
        gj[b] = G ? G[at.scalar + int64_t(min(k0 + tx + 16 * b, T - 1)) * H] : 0.0;
#pragma unroll
      for (int a = 0; a < L::RM; ++a) {
        const int i = q0 + ty + 16 * a;
#pragma unroll
        for (int b = 0; b < L::RN; ++b) {
          const int j = k0 + tx + 16 * b;
          // A_ij = e^{scale·q_i·k_j + G_i − G_j − lse_i}  (j ≤ i)
          sds[(ty + 16 * a) * L::LP + tx + 16 * b] =
              j <= i ? expf(fmaf(scale, s[a][b], float(gi[a] - gj[b])) - lse_i[a]) : 0.f;
        }
      }
    }
    if (kSplit) __syncthreads();  // A of half 0 → half 1 (the same (ty, tx) positions)
    if (role_d) {
#pragma unroll
      for (int a = 0; a < L::RM; ++a)
#pragma unroll
        for (int b = 0; b < L::RN; ++b) {
          // dS_ij = A_ij (dout_i·v_j − δ_i), in place of A_ij
          const int e = (ty + 16 * a) * L::LP + tx + 16 * b;
          const float ds = sds[e] * (dp[a][b] - delta_i[a]);
          row_part[a] += ds;
          sds[e] = ds;
        }
    }
    __syncthreads();
    // dq_i += Σ_j dS_ij k_j over this half's columns n0 + n
    mm_ab<LO, kUnroll>(acc, sds, sk + n0, ty, tx);
  }
  // row is null for the whole grid or for none; each half reduces into its own red
  if (row) row_reduce<L, false>(row_part, red + half * 2 * L::BM, ty, tx);
#pragma unroll
  for (int a = 0; a < L::RM; ++a) {
    const int i = q0 + ty + 16 * a;
    if (i >= T) continue;
    if (row && role_d && tx == 0) row[at.scalar + int64_t(i) * H] = row_part[a];
#pragma unroll
    for (int j = 0; j < LO::NV; ++j) {
      const int n = n0 + LO::col(j, tx);
      if (n < D) dq[at.head + int64_t(i) * at.stride + n] = scale * acc[a][j];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Launches

// Shared memory of n_rows (BM, LD), n_cols (BN, LD), n_p (BM, LP) tiles and n_red (BM) vectors.
template <class L>
constexpr size_t smem_bytes(int n_rows, int n_cols, int n_p, int n_red) {
  return sizeof(float) * ((size_t(n_rows) * L::BM + size_t(n_cols) * L::BN) * L::LD +
                          size_t(n_p) * L::BM * L::LP + size_t(n_red) * L::BM);
}

// Launches `kernel` on grid (B·H, ⌈T / BM⌉) with `bytes` of dynamic shared memory (the whole
// unified L1 as shared memory: the tiles are staged there, and 2 blocks of 102 KB fit per SM).
template <class L, class Kernel, class... Args>
void launch(Kernel kernel, int threads, size_t bytes, const AttnShape& s, Args... args) {
  PB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  PB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     int(cudaSharedmemCarveoutMaxShared)));
  const dim3 grid(s.B * s.H, ceil_div(s.T, L::BM));
  kernel<<<grid, threads, bytes, stream()>>>(args...);
  PB_LAUNCH_CHECK();
}

template <int DP>
void forward(float* o, float* lse, const float* q, const float* k, const float* v, const double* G,
             const SoftmaxAttentionArgs& args) {
  const AttnShape& s = args.shape;
  using L = FwdTile<DP>;
  launch<L>(forward_kernel<DP>, kThreads, smem_bytes<L>(1, 2, 1, 2), s, o, lse, q, k, v, G, s.T,
            s.H, s.D, float(args.scale));
}

template <int DP>
void backward(float* dq, float* dk, float* dv, float* row, float* col, const float* dout,
              const float* q, const float* k, const float* v, const float* lse, const float* delta,
              const double* G, const SoftmaxAttentionArgs& args) {
  const AttnShape& s = args.shape;
  const float scale = float(args.scale);
  using L = Tile<DP>;
  constexpr int halves = kDkdvSplit<DP> ? 2 : 1;
  launch<L>(dkdv_kernel<DP>, halves * kThreads, smem_bytes<L>(2, 2, 2, 2 * halves), s, dk, dv, col,
            dout, q, k, v, lse, delta, G, s.T, s.H, s.D, scale);
  constexpr int dq_halves = kDqSplit<DP> ? 2 : 1;
  launch<L>(dq_kernel<DP>, dq_halves * kThreads,
            smem_bytes<L>(2, 2 * kDqBuffers<DP>, 1, 2 * dq_halves), s, dq, row, dout, q, k, v, lse,
            delta, G, s.T, s.H, s.D, scale);
}

// The padded head dim of D: 32, 64, 128 or 256.
int padded_head_dim(int D) {
  if (D < 1 || D > 256)
    throw std::invalid_argument("softmax attention: head dim " + std::to_string(D) +
                                " outside 1..256");
  return D <= 32 ? 32 : D <= 64 ? 64 : D <= 128 ? 128 : 256;
}

}  // namespace

void softmax_attention_forward(float* o, float* lse, const float* q, const float* k, const float* v,
                               const float* log_f, const SoftmaxAttentionArgs& args) {
  const AttnShape& s = args.shape;
  if (int64_t(s.B) * s.H * s.T == 0) return;
  const int DP = padded_head_dim(s.D);
  double* G = nullptr;  // (B, T, H)
  if (log_f) {
    G = static_cast<double*>(scratch(sizeof(double) * size_t(s.B) * s.T * s.H));
    gate_prefix(G, log_f, s);
  }
  switch (DP) {
    case 32: forward<32>(o, lse, q, k, v, G, args); break;
    case 64: forward<64>(o, lse, q, k, v, G, args); break;
    case 128: forward<128>(o, lse, q, k, v, G, args); break;
    default: forward<256>(o, lse, q, k, v, G, args); break;
  }
}

void softmax_attention_backward(float* dq, float* dk, float* dv, float* dlog_f, const float* dout,
                                const float* o, const float* lse, const float* q, const float* k,
                                const float* v, const float* log_f,
                                const SoftmaxAttentionArgs& args) {
  const AttnShape& s = args.shape;
  if (int64_t(s.B) * s.H * s.T == 0) return;
  const int DP = padded_head_dim(s.D);
  const size_t n = size_t(s.B) * s.T * s.H;
  // scratch: [G (n) double | δ (n) | row (n) | col (n)], the gate's parts only with a gate
  char* base = static_cast<char*>(scratch(log_f ? n * (sizeof(double) + 3 * sizeof(float))
                                                : n * sizeof(float)));
  double* G = log_f ? reinterpret_cast<double*>(base) : nullptr;  // (B, T, H)
  float* delta = reinterpret_cast<float*>(base + (log_f ? n * sizeof(double) : 0));  // (B, T, H)
  float* row = log_f ? delta + n : nullptr;  // (B, T, H) Σ_j dS_tj
  float* col = log_f ? row + n : nullptr;    // (B, T, H) Σ_i dS_it

  // δ_i = dout_i·o_i
  constexpr int kRowsPerBlock = kThreads / 32;
  row_dot_kernel<<<ceil_div(int64_t(n), kRowsPerBlock), kThreads, 0, stream()>>>(delta, dout, o,
                                                                                  int64_t(n), s.D);
  PB_LAUNCH_CHECK();
  if (log_f) gate_prefix(G, log_f, s);
  switch (DP) {
    case 32: backward<32>(dq, dk, dv, row, col, dout, q, k, v, lse, delta, G, args); break;
    case 64: backward<64>(dq, dk, dv, row, col, dout, q, k, v, lse, delta, G, args); break;
    case 128: backward<128>(dq, dk, dv, row, col, dout, q, k, v, lse, delta, G, args); break;
    default: backward<256>(dq, dk, dv, row, col, dout, q, k, v, lse, delta, G, args); break;
  }
  if (!log_f) return;
  // dG_t = Σ_j dS_tj − Σ_i dS_it,  dlog_f_u = Σ_{t≥u} dG_t
  scan_kernel<true, float><<<s.B * s.H, kThreads, 0, stream()>>>(dlog_f, row, col, s.T, s.H);
  PB_LAUNCH_CHECK();
}

}  // namespace pb::cuda
