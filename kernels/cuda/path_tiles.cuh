// Register tiles of the PaTH prep and UT backward (path_prep.cu, path_ut_backward.cu) and the fp32
// scans: an M × N product result held by the 256 threads of a CTA, with one interface for two kinds
// of arithmetic.
//   Tile<M, N>     plain fp32 FFMA: the 16 × 16 threads each hold the elements
//                  (ty + 16 i, tx + 16 j), ty = tid / 16, tx = tid % 16.
//   TcTile<M, N, NW[, KU]>  TF32 tensor cores (mma.sync m16n8k8, fp32 accumulation): NW warps,
//                  of which the first WM × WN hold the tile (the rest, if any, none), warp
//                  (wm, wn) rows 16 wm … 16 wm + 15 and FN n-tiles of 8 columns from wn·N/WN, in
//                  the C-fragment layout of mma.cuh (lane 4g + t: rows g, g + 8, columns 2t,
//                  2t + 1). Its operands are TF32 values (10-bit mantissa, finer than the bf16
//                  they feed) that the kernel stored rounded, tf32_operand<TC>(x), so mma reads
//                  them as they are; only the KScale products round A(m, k)·ks[k] here. Its mma
//                  unrolls KU k-steps (default 2). The bf16 PaTH path uses it.
// mma(c, K, α, a, am, ak, b, bk, bn[, ks]) adds α·A B over k < K (a multiple of 8), with
// A(m, k) = a[m·am + k·ak], B(k, n) = b[k·bk + n·bn] in shared memory (and A(m, k) also times
// ks[k] with KScale). each(f) calls f(row, col, element&) for the thread's elements; add(o) adds
// another tile of the type elementwise;
// add_row_sums / add_col_sums atomically add the tile's row / column sums into shared arrays.
// Bank conflicts: Tile reads rows and columns of arrays with odd strides conflict-free; TcTile's
// fragment loads are at most 2-way with strides ≡ 4 (mod 32), and mma picks per product the k order
// with fewer conflicts (see there). kPad<TC> gives that padding.
#pragma once
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"

namespace pb::cuda {

constexpr int kThreads = 256;  // threads of a CTA with Tile (16 × 16), the default for TcTile

__device__ __forceinline__ int tile_ty() { return int(threadIdx.x) >> 4; }
__device__ __forceinline__ int tile_tx() { return int(threadIdx.x) & 15; }

template <int M, int N>
struct Tile {
  static constexpr int TM = M / 16, TN = N / 16;
  static_assert(M % 16 == 0 && N % 16 == 0, "tile sizes are multiples of 16");
  float v[TM][TN];

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) v[i][j] = 0.f;
  }
  template <class F>
  __device__ __forceinline__ void each(F&& f) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) f(tile_ty() + 16 * i, tile_tx() + 16 * j, v[i][j]);
  }
  __device__ __forceinline__ void add(const Tile& o) {  // elementwise, same layout
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) v[i][j] += o.v[i][j];
  }
  // dst[r] += Σ_c v(r, c): a half-warp holds a whole row, so one add per row (deterministic).
  __device__ __forceinline__ void add_row_sums(float* dst) const {
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      float s = 0.f;
#pragma unroll
      for (int j = 0; j < TN; ++j) s += v[i][j];
      s = half_warp_sum(s);
      if (tile_tx() == 0) atomicAdd(&dst[tile_ty() + 16 * i], s);
    }
  }
  __device__ __forceinline__ void add_col_sums(float* dst) const {
#pragma unroll
    for (int j = 0; j < TN; ++j) {
      float s = 0.f;
#pragma unroll
      for (int i = 0; i < TM; ++i) s += v[i][j];
      atomicAdd(&dst[tile_tx() + 16 * j], s);
    }
  }
};

template <bool KScale = false, int M, int N>
__device__ __forceinline__ void mma(Tile<M, N>& c, int K, float alpha, const float* a, int am,
                                    int ak, const float* b, int bk, int bn,
                                    const float* ks = nullptr) {
  const float* ap = a + tile_ty() * am;
  const float* bp = b + tile_tx() * bn;
#pragma unroll 4
  for (int k = 0; k < K; ++k) {
    const float s = KScale ? alpha * ks[k] : alpha;
    float av[Tile<M, N>::TM], bv[Tile<M, N>::TN];
#pragma unroll
    for (int i = 0; i < Tile<M, N>::TM; ++i) av[i] = s * ap[16 * i * am + k * ak];
#pragma unroll
    for (int j = 0; j < Tile<M, N>::TN; ++j) bv[j] = bp[k * bk + 16 * j * bn];
#pragma unroll
    for (int i = 0; i < Tile<M, N>::TM; ++i)
#pragma unroll
      for (int j = 0; j < Tile<M, N>::TN; ++j) c.v[i][j] = fmaf(av[i], bv[j], c.v[i][j]);
  }
}

template <int M, int N, int NW = kThreads / 32, int KU = 2>
struct TcTile {
  static constexpr int WM = M / 16 < NW ? M / 16 : NW;                     // warps along rows
  static constexpr int WN = NW / WM < N / 8 ? NW / WM : N / 8;             // and along columns
  static constexpr int NC = N / WN, FN = NC / 8, kActive = WM * WN;       // columns, n-tiles per warp
  static_assert(M % 16 == 0 && NW % WM == 0 && N % (8 * WN) == 0, "TcTile shape");
  float v[FN][4];

  __device__ __forceinline__ static int warp() { return int(threadIdx.x) >> 5; }
  __device__ __forceinline__ static bool holds() { return kActive == NW || warp() < kActive; }
  __device__ __forceinline__ static int row0() { return 16 * (warp() % WM); }
  __device__ __forceinline__ static int col0() { return NC * (warp() / WM); }
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int j = 0; j < FN; ++j) v[j][0] = v[j][1] = v[j][2] = v[j][3] = 0.f;
  }
  template <class F>
  __device__ __forceinline__ void each(F&& f) {
    if (!holds()) return;
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int j = 0; j < FN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) f(row0() + g + 8 * (e >> 1), col0() + 8 * j + 2 * t + (e & 1), v[j][e]);
  }
  __device__ __forceinline__ void add(const TcTile& o) {  // elementwise, same layout
#pragma unroll
    for (int j = 0; j < FN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) v[j][e] += o.v[j][e];
  }
  // dst[r] += Σ_c v(r, c): the 4 lanes of a row, then one add per warp and row (WN adds per row).
  __device__ __forceinline__ void add_row_sums(float* dst) const {
    if (!holds()) return;
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float s = 0.f;
#pragma unroll
      for (int j = 0; j < FN; ++j) s += v[j][2 * h] + v[j][2 * h + 1];
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      if (t == 0) atomicAdd(&dst[row0() + g + 8 * h], s);
    }
  }
  // dst[c] += Σ_r v(r, c): the 16 rows of the warp (8 lanes g, two halves), one add per column.
  __device__ __forceinline__ void add_col_sums(float* dst) const {
    if (!holds()) return;
    const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
#pragma unroll
    for (int j = 0; j < FN; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float s = v[j][e] + v[j][e + 2];
        s += __shfl_xor_sync(0xffffffffu, s, 4);
        s += __shfl_xor_sync(0xffffffffu, s, 8);
        s += __shfl_xor_sync(0xffffffffu, s, 16);
        if (g == 0) atomicAdd(&dst[col0() + 8 * j + 2 * t + e], s);
      }
  }
};

// x rounded to TF32 as cvt.rna.tf32.f32 does (nearest, ties away from zero: + half an ulp of the
// 10-bit mantissa, then the low 13 bits cleared), as a float: what a TC kernel stores in shared
// memory for TcTile's products. Rounding once per stored value, not once per fragment load, keeps
// the mma loops at loads and HMMA (cvt.rna is two instructions per operand element on sm_90: a
// range test and an add). Plain fp32 kernels (TC = false) store x itself.
template <bool TC>
__device__ __forceinline__ float tf32_operand(float x) {
  if constexpr (TC) return __uint_as_float((__float_as_uint(x) + 0x1000u) & 0xffffe000u);
  else return x;
}
__device__ __forceinline__ uint32_t bits(float x) { return __float_as_uint(x); }

// One warp per 16 × NW block of c; per 8-wide k step an A fragment (rows g, g + 8; k = k_lo, k_hi)
// and FN B fragments (k = k_lo, k_hi; column g of each n-tile), then FN mma.sync m16n8k8. α is ±1
// (exact on TF32 values), or with KScale any: α·ks[k]·A(m, k) is rounded to TF32 here.
// The 8 k of a step may go to the lanes in any order A and B share (it permutes the sum). With
// strides ≡ 4 (mod 32), lane (g, t) reading k = t, t + 4 is conflict-free for a k-contiguous
// operand (ak = 1, bk = 1) and 2-way for a k-strided one; k = 2t, 2t + 1 is the reverse. Each
// product takes the order with fewer shared-memory wavefronts per step (A: 4 loads, B: 2·FN).
template <bool KScale = false, int M, int N, int NW, int KU>
__device__ __forceinline__ void mma(TcTile<M, N, NW, KU>& c, int K, float alpha, const float* a, int am,
                                    int ak, const float* b, int bk, int bn,
                                    const float* ks = nullptr) {
  using Tc = TcTile<M, N, NW, KU>;
  if (!Tc::holds()) return;
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const bool paired = (ak != 1 ? 4 : 8) + (bk != 1 ? 2 : 4) * Tc::FN <
                      (ak != 1 ? 8 : 4) + (bk != 1 ? 4 : 2) * Tc::FN;
  const int k_lo = paired ? 2 * t : t, dk = paired ? 1 : 4;  // k_hi = k_lo + dk
  const float* ap = a + (Tc::row0() + g) * am + k_lo * ak;
  const float* bp = b + k_lo * bk + (Tc::col0() + g) * bn;
#pragma unroll KU
  for (int k0 = 0; k0 < K; k0 += 8) {
    const float s0 = KScale ? alpha * ks[k0 + k_lo] : alpha;
    const float s1 = KScale ? alpha * ks[k0 + k_lo + dk] : alpha;
    const float* ak0 = ap + k0 * ak;
    const auto A = [&](float s, float x) { return bits(KScale ? tf32_operand<true>(s * x) : s * x); };
    const uint32_t a0 = A(s0, ak0[0]), a1 = A(s0, ak0[8 * am]);
    const uint32_t a2 = A(s1, ak0[dk * ak]), a3 = A(s1, ak0[8 * am + dk * ak]);
#pragma unroll
    for (int j = 0; j < Tc::FN; ++j) {
      const float* bj = bp + k0 * bk + 8 * j * bn;
      const uint32_t b0 = bits(bj[0]), b1 = bits(bj[dk * bk]);
      float(&d)[4] = c.v[j];
      asm volatile(
          "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
          "{%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
  }
}

// The tile of a kernel instantiated for TF32 tensor cores (TC, NW warps) or plain fp32 (8 warps),
// and the row padding of its shared arrays (odd strides for Tile, ≡ 4 mod 32 for TcTile).
template <int M, int N, bool TC, int NW = kThreads / 32, int KU = 2>
using TileOf = std::conditional_t<TC, TcTile<M, N, NW, KU>, Tile<M, N>>;
template <bool TC>
constexpr int kPad = TC ? 4 : 1;

}  // namespace pb::cuda
