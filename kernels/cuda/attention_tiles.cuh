// Shared by the flash-style fp32 attention kernels (softmax_attention.cu, stick_breaking.cu): the
// tile geometry, shared-memory tile loads, the register-tiled inner products, where a head lives,
// and the launch helpers. Included after common.cuh; internal linkage, one copy per .cu file.
//
// Tiles. A block of 256 threads is a 16 × 16 grid (ty, tx) over one (BT × BT) tile of logits of one
// (b, h): thread (ty, tx) owns rows ty·RM + a (a < RM) and columns tx + 16·b (b < RN) of it, and
// rows ty·RM + a × columns n_j = (j / VW)·16·VW + tx·VW + j % VW (j < NV) of a (BT × DP) output
// tile. BT = 64 for DP ≤ 128, 32 for DP = 256; DP is the head dim D rounded up to 32, 64, 128 or
// 256 (columns d ≥ D are zero in shared memory and never stored). Shared-memory tiles are row-major
// with the row stride padded by 4 floats, so the float4 loads of the inner products are free of
// bank conflicts. The 16 threads of a row are one half-warp: row reductions are xor shuffles.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/ops.h"

namespace pb::cuda {
namespace {

constexpr int kThreads = 256;  // 16 × 16
constexpr unsigned kFull = 0xffffffffu;

// Queries or keys per tile for the padded head dim DP.
constexpr int tile_rows(int DP) { return DP <= 128 ? 64 : 32; }

// Tile geometry for the padded head dim DP.
template <int DP>
struct Tile {
  static constexpr int BT = tile_rows(DP);        // queries or keys per tile
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
// scalar t of lse, log_f, G, δ, ... at scalar + t·H.
struct HeadIndex {
  int64_t head, scalar;
  int stride;
  __device__ HeadIndex(int bh, int T, int H, int D)
      : head((int64_t(bh / H) * T * H + bh % H) * D),
        scalar(int64_t(bh / H) * T * H + bh % H),
        stride(H * D) {}
};

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

// The padded head dim of D: 32, 64, 128 or 256 (`op` names the attention in the error).
inline int padded_head_dim(int D, const char* op) {
  if (D < 1 || D > 256)
    throw std::invalid_argument(std::string(op) + ": head dim " + std::to_string(D) + " outside 1..256");
  return D <= 32 ? 32 : D <= 64 ? 64 : D <= 128 ? 128 : 256;
}

}  // namespace
}  // namespace pb::cuda
