// Causal softmax attention with the optional FoX gate and bias table on bf16 tensor cores: FlashAttention-2
// with mma.sync m16n8k16 (bf16 operands, fp32 accumulators; fragment layouts in mma.cuh), O(T·D) memory.
//   s_ij = scale·q_i·k_j + (G_i − G_j) + b_h(i − j)  (j ≤ i),  G_t = Σ_{u≤t} log_f_u,  o_i = Σ_j A_ij v_j
// Same math as softmax_attention.cu (fp32); the reference is kernels/cpu/softmax_attention.cpp.
//
// Tiles: 64 queries (32 in the backward at D = 128, for registers) × 64 keys; a CTA is 4 warps,
// a warp owns 16 rows of the tile (queries in the forward, keys in the backward). Shared-memory
// tiles are bf16 (rows, D + 8): the 16-byte pad puts the 8 rows of an ldmatrix in distinct banks.
// Rows t ≥ T are zero in shared memory (no global read past the head), masked in the logits, and
// never stored. Logits run in base 2: x = s·log2e, so e^{s − m} = 2^{x − m₂}.
//
// The gate. G (double, a prefix scan) is rebased to the CTA's first row in double before it is
// rounded to float: the fp32 logits then only carry G differences between rows of this CTA's
// tile and of the tile it meets, not |G_t| itself (which grows like T·|log_f|).
//
// Forward, per (query tile, b·h): Q fragments in registers, K and V tiles of 0 .. the diagonal
// staged by cp.async, double-buffered; online softmax in fp32; P = 2^{x − m} goes from the C
// fragments of S straight into the A fragments of P V (c_to_a). o = acc / l, lse = (m₂ + log2 l)·ln2.
//
// Backward, per (key tile, b·h), query tiles from the diagonal to the end (Q, dO, lse, δ
// double-buffered): each warp computes its 16 keys' rows of the transposed tiles
//   Sᵀ = K Qᵀ,  Pᵀ_ji = 2^{x_ij − lse_i·log2e},  dPᵀ = V dOᵀ,  dSᵀ_ji = Pᵀ_ji (dPᵀ_ji − δ_i)
// so dV += Pᵀ dO and dK += dSᵀ Q are register products like P V of the forward. dQ += dS K needs
// dS with queries as rows: dSᵀ goes to shared memory as bf16 and comes back through transposed
// ldmatrix (load_a_t); the (T, D) fp32 sums from all key tiles meet in scratch by atomicAdd, then
// dq = scale·sum in bf16. (So dq and dlog_f are not bitwise reproducible; o, lse, dk, dv are.)
// Gate gradient: dG_t = Σ_j dS_tj − Σ_i dS_it, both sums from the same fp32 dS: the column sums
// are owned by the key CTA, the row sums meet by atomicAdd. (The row sums are 0 in exact
// arithmetic, but not with δ from the bf16 o, and they cancel that error of the column sums:
// dlog_f_u = Σ_{t≥u} dG_t = Σ_{i≥u, j<u} dS_ij only sees the pairs crossing u.) dlog_f by a
// suffix scan in double.
// Bias gradient db_h(r) = Σ_{i − j = r} dS_ij: per (key tile, query tile) the fp32 dS meet by shared
// atomics in one slot per distance, then one global atomicAdd per distance (not bitwise reproducible).
//
// All launches on stream(), scratch() only: capturable in a CUDA graph.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "kernels/cuda/attention_bf16.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gate_scan.cuh"
#include "kernels/cuda/mma.cuh"
#include "core/cuda/runtime.h"
#include "core/error.h"

namespace pb::cuda {
namespace {

using mma::Bf16;

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kBQ = 64, kBK = 64;  // queries, keys per tile (kBQ = 16·kWarps rows per forward CTA)
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
constexpr double kLog2eD = 1.4426950408889634;
static_assert(kBQ == 16 * kWarps && kBK == 16 * kWarps, "a warp owns 16 rows of a tile");

// Where one head lives: blockIdx.x = b·H + h; element (t, d) of the head is at
// head0 + t·stride + d of a (B, T, H, D) tensor, scalar t at scalar0 + t·H of a (B, T, H) one.
struct Head {
  int64_t scalar0, head0, stride;
  __device__ Head(int T, int H, int D)
      : scalar0(int64_t(blockIdx.x / H) * T * H + blockIdx.x % H),
        head0(scalar0 * D),
        stride(int64_t(H) * D) {}
};

// (G_t − G_t0)·log2e, the difference taken in double (the gate rebased to row t0).
__device__ __forceinline__ float gate_diff(const double* __restrict__ G, const Head& at, int H, int t,
                                           int t0) {
  return float((G[at.scalar0 + int64_t(t) * H] - G[at.scalar0 + int64_t(t0) * H]) * kLog2eD);
}

// s (R, D + 8) ← rows t0 .. t0+R−1 of one head (g at row 0, row stride `stride`), zero at t ≥ T.
// 16-byte cp.async chunks; the caller commits.
template <int R, int D>
__device__ __forceinline__ void load_rows(uint16_t* s, const uint16_t* __restrict__ g, int t0, int T,
                                          int64_t stride) {
  constexpr int kChunks = D / 8;
  static_assert(R * kChunks % kThreads == 0, "whole sweeps of the block");
#pragma unroll
  for (int it = 0; it < R * kChunks / kThreads; ++it) {
    const int c = threadIdx.x + it * kThreads, r = c / kChunks, d = c % kChunks * 8;
    uint16_t* dst = s + r * (D + 8) + d;
    if (t0 + r < T)
      mma::cp_async16(dst, g + (t0 + r) * stride + d);
    else
      *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
  }
}

// c[n] += A B over the 16-column n-tiles pairs n = 2·nn, 2·nn + 1 (nn < N / 16) and the k-tiles
// kk < K / 16, with A from `a(kk)` and B from X by load_b_nk (X: N × K) or load_b_kn (X: K × N).
template <int N, int K, bool kNK, class A>
__device__ __forceinline__ void mma_tile(float (&c)[N / 8][4], const A& a, const uint16_t* x, int ld) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t af[4];
    a(af, kk);
#pragma unroll
    for (int nn = 0; nn < N / 16; ++nn) {
      uint32_t b[4];
      if constexpr (kNK)
        mma::load_b_nk(b, x, ld, 16 * nn, 16 * kk);
      else
        mma::load_b_kn(b, x, ld, 16 * kk, 16 * nn);
      mma::mma_16816<Bf16>(c[2 * nn], af, b[0], b[1]);
      mma::mma_16816<Bf16>(c[2 * nn + 1], af, b[2], b[3]);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Forward

// Per query tile (blockIdx.y counted from the last), key tiles 0 .. diagonal; warp w owns rows
// i = q0 + 16w + g (+8) (g = lane / 4), with x_ij = s_ij·log2e:
//   m_i ← max(m_i, max_j x_ij),  l_i ← l_i·2^{m_old − m_i} + Σ_j 2^{x_ij − m_i},
//   acc_i ← acc_i·2^{m_old − m_i} + Σ_j 2^{x_ij − m_i} v_j
template <int D, bool kGate>
__global__ void __launch_bounds__(kThreads)
    flash_fwd_bf16_kernel(uint16_t* __restrict__ o,        // (B, T, H, D)
                   float* __restrict__ lse,         // (B, T, H)
                   const uint16_t* __restrict__ q,  // (B, T, H, D)
                   const uint16_t* __restrict__ k,  // (B, T, H, D)
                   const uint16_t* __restrict__ v,  // (B, T, H, D)
                   const double* __restrict__ G,    // (B, T, H), kGate only
                   const float* __restrict__ bias,  // (H, T) or null
                   int T, int H, float scale_log2) {
  constexpr int LD = D + 8;
  extern __shared__ uint4 smem[];
  uint16_t* sq = reinterpret_cast<uint16_t*>(smem);          // (kBQ, LD) queries
  uint16_t* sk = sq + kBQ * LD;                              // (2, kBK, LD) keys, double-buffered
  uint16_t* sv = sk + 2 * kBK * LD;                          // (2, kBK, LD) values
  float* sg = reinterpret_cast<float*>(sv + 2 * kBK * LD);   // (2, kBK) (G_j − G_q0)·log2e
  const Head at(T, H, D);
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kBQ;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const int r0 = q0 + 16 * warp;  // the warp's first row
  const int n_kt = (min(q0 + kBQ, T) - 1) / kBK + 1;
  const float* bias_h = bias ? bias + int64_t(blockIdx.x % H) * T : nullptr;  // (T) or null

  float gi[2] = {0.f, 0.f};  // (G_i − G_q0)·log2e of rows g, g + 8
  if constexpr (kGate)
#pragma unroll
    for (int r = 0; r < 2; ++r) gi[r] = gate_diff(G, at, H, min(r0 + g + 8 * r, T - 1), q0);
  auto load_kv = [&](int kt, int st) {
    const int k0 = kt * kBK;
    load_rows<kBK, D>(sk + st * kBK * LD, k + at.head0, k0, T, at.stride);
    load_rows<kBK, D>(sv + st * kBK * LD, v + at.head0, k0, T, at.stride);
    if constexpr (kGate) {
      const int j = k0 + threadIdx.x;
      if (threadIdx.x < kBK)
        sg[st * kBK + threadIdx.x] = j < T ? gate_diff(G, at, H, j, q0) : 0.f;
    }
  };

  // cp.async groups: Q, then one K/V tile per group
  load_rows<kBQ, D>(sq, q + at.head0, q0, T, at.stride);
  mma::cp_async_commit();
  load_kv(0, 0);
  mma::cp_async_commit();
  mma::cp_async_wait<1>();
  __syncthreads();
  uint32_t qa[D / 16][4];  // A fragments of the warp's 16 × D queries
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) mma::load_a(qa[kk], sq, LD, 16 * warp, 16 * kk);

  float acc[D / 8][4] = {};  // (16, D) Σ_j 2^{x_ij − m_i} v_j
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g, g + 8; l: this thread's columns
  for (int kt = 0; kt < n_kt; ++kt) {
    if (kt + 1 < n_kt) load_kv(kt + 1, (kt + 1) & 1);
    mma::cp_async_commit();
    mma::cp_async_wait<1>();  // tile kt has landed
    __syncthreads();
    const int k0 = kt * kBK, st = kt & 1;
    const uint16_t* skt = sk + st * kBK * LD;
    const uint16_t* svt = sv + st * kBK * LD;
    if (r0 < T) {  // warp-uniform: the warp has rows < T
      // S = Q Kᵀ  (16, kBK)
      float s[kBK / 8][4] = {};
      mma_tile<kBK, D, true>(s, [&](uint32_t(&a)[4], int kk) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[e] = qa[kk][e];
      }, skt, LD);
      // x_ij = s_ij·scale·log2e + (G_i − G_j)·log2e (+ b_h(i − j)·log2e), −∞ for j > i (c[n][e]:
      // row g + 8·(e / 2), key k0 + 8n + 2t + e % 2)
      const bool diag = k0 + kBK - 1 > r0;
      float mx[2] = {m[0], m[1]};
#pragma unroll
      for (int n = 0; n < kBK / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int jj = 8 * n + 2 * t + e % 2;
          float x = s[n][e] * scale_log2;
          if constexpr (kGate) x += gi[e / 2] - sg[st * kBK + jj];
          if (bias_h) x += bias_h[min(max(r0 + g + 8 * (e / 2) - k0 - jj, 0), T - 1)] * kLog2e;
          if (diag && k0 + jj > r0 + g + 8 * (e / 2)) x = -INFINITY;
          s[n][e] = x;
          mx[e / 2] = fmaxf(mx[e / 2], x);
        }
      // m_new = max(m, max_j x_ij) (finite: key 0 is in every row's first tile); l, acc rescaled
      // by 2^{m − m_new} (0 on the first tile)
      float alpha[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = mma::quad_max(mx[r]);
        alpha[r] = exp2f(m[r] - mx[r]);
        m[r] = mx[r];
        l[r] *= alpha[r];
      }
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[n][e] *= alpha[e / 2];
      // p_ij = 2^{x_ij − m_i}
#pragma unroll
      for (int n = 0; n < kBK / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[n][e] = exp2f(s[n][e] - m[e / 2]);
          l[e / 2] += s[n][e];
        }
      // acc += P V  (P rounded to bf16)
      mma_tile<D, kBK, false>(acc, [&](uint32_t(&a)[4], int kk) {
        mma::c_to_a<Bf16>(a, s[2 * kk], s[2 * kk + 1]);
      }, svt, LD);
    }
    __syncthreads();  // stage st is read before it is refilled
  }

  // o_i = acc_i / l_i,  lse_i = (m_i + log2 l_i)·ln2
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = mma::quad_sum(l[r]);
    const int i = r0 + g + 8 * r;
    if (i >= T) continue;
    const float inv = 1.f / sum;
    uint16_t* orow = o + at.head0 + i * at.stride;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<uint32_t*>(orow + 8 * n + 2 * t) =
          mma::pack2<Bf16>(acc[n][2 * r] * inv, acc[n][2 * r + 1] * inv);
    if (t == 0) lse[at.scalar0 + int64_t(i) * H] = (m[r] + log2f(sum)) * kLn2;
  }
}

// ---------------------------------------------------------------------------------------------
// Backward

// Query-tile height of the backward: 32 for D = 128 keeps Sᵀ, dPᵀ, dK and dV in registers.
template <int D>
constexpr int kBwdBQ = D <= 64 ? 64 : 32;

// Per key tile k0 = blockIdx.y·kBK (the first ones have the most work), query tiles from the
// diagonal to the end; warp w owns keys j = k0 + 16w + g (+8), tiles transposed (rows keys j,
// columns queries i):
//   Pᵀ_ji = 2^{s_ij·log2e − lse_i·log2e} (0 for i < j, i ≥ T),  dSᵀ_ji = Pᵀ_ji (dout_i·v_j − δ_i)
//   dv_j = Σ_i P_ij dout_i,  dk_j = scale Σ_i dS_ij q_i,  col_j = Σ_i dS_ij (kGate)
//   dq_acc_i += Σ_j dS_ij k_j,  row_i += Σ_j dS_ij (kGate)  (atomic; dq = scale·dq_acc later)
template <int D, bool kGate>
__global__ void __launch_bounds__(kThreads)
    flash_bwd_bf16_kernel(uint16_t* __restrict__ dk,          // (B, T, H, D)
                    uint16_t* __restrict__ dv,          // (B, T, H, D)
                    float* __restrict__ dq_acc,         // (B, T, H, D) +=
                    float* __restrict__ row,            // (B, T, H) +=, kGate only
                    float* __restrict__ col,            // (B, T, H), kGate only
                    const uint16_t* __restrict__ dout,  // (B, T, H, D)
                    const uint16_t* __restrict__ q,     // (B, T, H, D)
                    const uint16_t* __restrict__ k,     // (B, T, H, D)
                    const uint16_t* __restrict__ v,     // (B, T, H, D)
                    const float* __restrict__ lse,      // (B, T, H)
                    const float* __restrict__ delta,    // (B, T, H)
                    const double* __restrict__ G,       // (B, T, H), kGate only
                    const float* __restrict__ bias,     // (H, T) or null
                    float* __restrict__ dbias,          // (H, T) +=, with bias
                    int T, int H, float scale_log2, float scale) {
  constexpr int BQ = kBwdBQ<D>, LD = D + 8, LS = BQ + 8, NR = BQ + kBK - 1;
  extern __shared__ uint4 smem[];
  uint16_t* sk = reinterpret_cast<uint16_t*>(smem);           // (kBK, LD) keys
  uint16_t* sv = sk + kBK * LD;                               // (kBK, LD) values
  uint16_t* sq = sv + kBK * LD;                               // (2, BQ, LD) queries, double-buffered
  uint16_t* sdo = sq + 2 * BQ * LD;                           // (2, BQ, LD) dout
  uint16_t* sds = sdo + 2 * BQ * LD;                          // (kBK, LS) dSᵀ
  float* slse = reinterpret_cast<float*>(sds + kBK * LS);     // (2, BQ) lse_i·log2e
  float* sdelta = slse + 2 * BQ;                              // (2, BQ) δ_i
  float* sg = sdelta + 2 * BQ;                                // (2, BQ) (G_i − G_k0)·log2e
  float* sdb = sg + 2 * BQ;  // (NR) Σ dS_ij at i − j = q0 − k0 − (kBK − 1) + slot, with bias
  const Head at(T, H, D);
  const float* bias_h = bias ? bias + int64_t(blockIdx.x % H) * T : nullptr;  // (T) or null
  float* dbias_h = dbias ? dbias + int64_t(blockIdx.x % H) * T : nullptr;     // (T) or null
  const int k0 = blockIdx.y * kBK;
  const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
  const int j0 = k0 + 16 * warp;  // the warp's first key
  const int qt0 = k0 / BQ, n_qt = (T + BQ - 1) / BQ;

  float gj[2] = {0.f, 0.f};  // (G_j − G_k0)·log2e of keys g, g + 8
  if constexpr (kGate)
#pragma unroll
    for (int r = 0; r < 2; ++r) gj[r] = gate_diff(G, at, H, min(j0 + g + 8 * r, T - 1), k0);
  auto load_q = [&](int qt, int st) {
    const int q0 = qt * BQ;
    load_rows<BQ, D>(sq + st * BQ * LD, q + at.head0, q0, T, at.stride);
    load_rows<BQ, D>(sdo + st * BQ * LD, dout + at.head0, q0, T, at.stride);
    const int i = q0 + threadIdx.x;  // zero at i ≥ T (masked, but 0·NaN would not be)
    if (threadIdx.x < BQ) {
      const int64_t si = at.scalar0 + int64_t(min(i, T - 1)) * H;
      slse[st * BQ + threadIdx.x] = i < T ? lse[si] * kLog2e : 0.f;
      sdelta[st * BQ + threadIdx.x] = i < T ? delta[si] : 0.f;
      if constexpr (kGate) sg[st * BQ + threadIdx.x] = i < T ? gate_diff(G, at, H, i, k0) : 0.f;
    }
  };

  load_rows<kBK, D>(sk, k + at.head0, k0, T, at.stride);
  load_rows<kBK, D>(sv, v + at.head0, k0, T, at.stride);
  load_q(qt0, 0);
  mma::cp_async_commit();

  float dk_acc[D / 8][4] = {}, dv_acc[D / 8][4] = {};  // (16, D) per warp
  float cs[2] = {0.f, 0.f};                             // Σ_i dS_ij, this thread's columns
  for (int qt = qt0; qt < n_qt; ++qt) {
    const int st = (qt - qt0) & 1, q0 = qt * BQ;
    if (qt + 1 < n_qt) load_q(qt + 1, st ^ 1);
    mma::cp_async_commit();
    mma::cp_async_wait<1>();  // K, V and query tile qt have landed
    for (int r = threadIdx.x; dbias_h && r < NR; r += kThreads) sdb[r] = 0.f;
    __syncthreads();
    const uint16_t* sqt = sq + st * BQ * LD;
    const uint16_t* sdot = sdo + st * BQ * LD;
    const float* lse_t = slse + st * BQ;
    const float* delta_t = sdelta + st * BQ;
    const float* g_t = sg + st * BQ;
    const bool mask = q0 < k0 + kBK || q0 + BQ > T;  // some i < j or i ≥ T in the tile

    // Sᵀ = K Qᵀ  (16, BQ); c[n][e]: key j0 + g + 8·(e / 2), query q0 + 8n + 2t + e % 2
    float p[BQ / 8][4] = {};
    mma_tile<BQ, D, true>(
        p, [&](uint32_t(&a)[4], int kk) { mma::load_a(a, sk, LD, 16 * warp, 16 * kk); }, sqt, LD);
    // Pᵀ_ji = 2^{s_ij·scale·log2e + (G_i − G_j)·log2e (+ b_h(i − j)·log2e) − lse_i·log2e}
#pragma unroll
    for (int n = 0; n < BQ / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ii = 8 * n + 2 * t + e % 2, i = q0 + ii, j = j0 + g + 8 * (e / 2);
        float x = p[n][e] * scale_log2 - lse_t[ii];
        if constexpr (kGate) x += g_t[ii] - gj[e / 2];
        if (bias_h) x += bias_h[min(max(i - j, 0), T - 1)] * kLog2e;
        p[n][e] = mask && (i < j || i >= T) ? 0.f : exp2f(x);
      }
    // dV += Pᵀ dO  (P rounded to bf16)
    mma_tile<D, BQ, false>(
        dv_acc, [&](uint32_t(&a)[4], int kk) { mma::c_to_a<Bf16>(a, p[2 * kk], p[2 * kk + 1]); }, sdot, LD);
    // dPᵀ = V dOᵀ,  dSᵀ_ji = Pᵀ_ji (dPᵀ_ji − δ_i)  (in place)
    float ds[BQ / 8][4] = {};
    mma_tile<BQ, D, true>(
        ds, [&](uint32_t(&a)[4], int kk) { mma::load_a(a, sv, LD, 16 * warp, 16 * kk); }, sdot, LD);
#pragma unroll
    for (int n = 0; n < BQ / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        ds[n][e] = p[n][e] * (ds[n][e] - delta_t[8 * n + 2 * t + e % 2]);
        if constexpr (kGate) cs[e / 2] += ds[n][e];
      }
    // sdb[(i − q0) − (j − k0) + kBK − 1] += dS_ij (0 where masked)
    if (dbias_h)
#pragma unroll
      for (int n = 0; n < BQ / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (ds[n][e] != 0.f)
            atomicAdd(sdb + 8 * n + 2 * t + e % 2 - 16 * warp - g - 8 * (e / 2) + kBK - 1, ds[n][e]);
    // row_i += Σ_j dS_ij over the warp's keys: rows g, g + 8 (x[2n + c]: query 8n + 2t + c), then
    // the 8 lanes of a column (mma::column_sum8: lane 4g + t then holds flat indices (BQ/32)·g + k)
    if constexpr (kGate) {
      float x[BQ / 4];
#pragma unroll
      for (int n = 0; n < BQ / 8; ++n)
#pragma unroll
        for (int c = 0; c < 2; ++c) x[2 * n + c] = ds[n][c] + ds[n][c + 2];
      mma::column_sum8(x);
#pragma unroll
      for (int k = 0; k < BQ / 32; ++k) {
        const int f = BQ / 32 * g + k, i = q0 + 8 * (f / 2) + 2 * t + f % 2;
        if (i < T) atomicAdd(row + at.scalar0 + int64_t(i) * H, x[k]);
      }
    }
    // dK += dSᵀ Q  (dS rounded to bf16; scaled at the end)
    mma_tile<D, BQ, false>(
        dk_acc, [&](uint32_t(&a)[4], int kk) { mma::c_to_a<Bf16>(a, ds[2 * kk], ds[2 * kk + 1]); }, sqt, LD);
    // sds[j][i] = dSᵀ_ji (bf16)
#pragma unroll
    for (int n = 0; n < BQ / 8; ++n)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        *reinterpret_cast<uint32_t*>(sds + (16 * warp + g + 8 * r) * LS + 8 * n + 2 * t) =
            mma::pack2<Bf16>(ds[n][2 * r], ds[n][2 * r + 1]);
    __syncthreads();
    // db_h(r) += sdb[slot] for 0 ≤ r = q0 − k0 − (kBK − 1) + slot < T
    for (int slot = threadIdx.x; dbias_h && slot < NR; slot += kThreads)
      if (const int r = q0 - k0 - (kBK - 1) + slot; r >= 0 && r < T) atomicAdd(dbias_h + r, sdb[slot]);

    // dq_acc_i += Σ_j dS_ij k_j: warp w takes query rows 16·(w % RG) … +15 (RG = BQ / 16 row groups)
    // and the columns c0 … c0 + NC − 1 of its share, 64 (or fewer) at a time
    constexpr int RG = BQ / 16, NC = D * RG / kWarps, CH = NC < 64 ? NC : 64;
    const int rg = warp % RG;
#pragma unroll
    for (int ch = 0; ch < NC / CH; ++ch) {
      const int c0 = warp / RG * NC + ch * CH;
      float dq[CH / 8][4] = {};
      mma_tile<CH, kBK, false>(
          dq, [&](uint32_t(&a)[4], int kk) { mma::load_a_t(a, sds, LS, 16 * rg, 16 * kk); }, sk + c0, LD);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = q0 + 16 * rg + g + 8 * r;
        if (i >= T) continue;
        float* dst = dq_acc + at.head0 + i * at.stride + c0;
#pragma unroll
        for (int n = 0; n < CH / 8; ++n)
          atomicAdd(reinterpret_cast<float2*>(dst + 8 * n + 2 * t),
                    make_float2(dq[n][2 * r], dq[n][2 * r + 1]));
      }
    }
    __syncthreads();  // stage st and sds are read before they are refilled
  }

  // dk_j = scale·dk_acc_j, dv_j, col_j for keys j < T
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = mma::quad_sum(cs[r]);
    const int j = j0 + g + 8 * r;
    if (j >= T) continue;
    const int64_t e0 = at.head0 + j * at.stride + 2 * t;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dk + e0 + 8 * n) =
          mma::pack2<Bf16>(scale * dk_acc[n][2 * r], scale * dk_acc[n][2 * r + 1]);
      *reinterpret_cast<uint32_t*>(dv + e0 + 8 * n) = mma::pack2<Bf16>(dv_acc[n][2 * r], dv_acc[n][2 * r + 1]);
    }
    if constexpr (kGate)
      if (t == 0) col[at.scalar0 + int64_t(j) * H] = sum;
  }
}

// ---------------------------------------------------------------------------------------------
// Small kernels

// δ_r = Σ_d o_rd dout_rd over n rows of D (bf16 in, fp32 sum): one warp per row.
__global__ void flash_delta_bf16_kernel(float* __restrict__ delta,             // (n)
                             const __nv_bfloat162* __restrict__ o,  // (n, D / 2)
                             const __nv_bfloat162* __restrict__ dout,
                             int64_t n, int D) {
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= n) return;  // whole warps leave together
  const int lane = threadIdx.x % 32, D2 = D / 2;
  float acc = 0.f;
  for (int d = lane; d < D2; d += 32) {
    const float2 a = __bfloat1622float2(o[r * D2 + d]), b = __bfloat1622float2(dout[r * D2 + d]);
    acc = fmaf(a.x, b.x, fmaf(a.y, b.y, acc));
  }
  acc = warp_sum(acc);
  if (lane == 0) delta[r] = acc;
}

// dq = scale·dq_acc in bf16, n elements.
__global__ void flash_dq_bf16_kernel(__nv_bfloat16* __restrict__ dq, const float* __restrict__ dq_acc, int64_t n,
                          float scale) {
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += step)
    dq[e] = __float2bfloat16_rn(scale * dq_acc[e]);
}

template <class Kernel>
void set_smem(Kernel kernel, int bytes) {
  PB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <int D>
constexpr int forward_smem() {  // sq, sk, sv, sg
  return (kBQ + 4 * kBK) * (D + 8) * 2 + 2 * kBK * 4;
}
template <int D>
constexpr int backward_smem() {  // sk, sv, sq, sdo, sds, slse, sdelta, sg, sdb
  constexpr int BQ = kBwdBQ<D>;
  return (2 * kBK + 4 * BQ) * (D + 8) * 2 + kBK * (BQ + 8) * 2 + 3 * 2 * BQ * 4 + (BQ + kBK) * 4;
}

template <int D, bool kGate>
void forward(bf16_bits* o, float* lse, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v,
             const double* G, const float* bias, const SoftmaxAttentionArgs& args) {
  const AttnShape& s = args.shape;
  constexpr int bytes = forward_smem<D>();
  set_smem(flash_fwd_bf16_kernel<D, kGate>, bytes);
  const dim3 grid(s.B * s.H, ceil_div(s.T, kBQ));
  flash_fwd_bf16_kernel<D, kGate><<<grid, kThreads, bytes, stream()>>>(o, lse, q, k, v, G, bias, s.T, s.H,
                                                                float(args.scale * kLog2eD));
  PB_LAUNCH_CHECK();
}

template <int D, bool kGate>
void backward(bf16_bits* dk, bf16_bits* dv, float* dq_acc, float* row, float* col,
              const bf16_bits* dout, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v,
              const float* lse, const float* delta, const double* G, const float* bias, float* dbias,
              const SoftmaxAttentionArgs& args) {
  const AttnShape& s = args.shape;
  constexpr int bytes = backward_smem<D>();
  set_smem(flash_bwd_bf16_kernel<D, kGate>, bytes);
  const dim3 grid(s.B * s.H, ceil_div(s.T, kBK));
  flash_bwd_bf16_kernel<D, kGate><<<grid, kThreads, bytes, stream()>>>(
      dk, dv, dq_acc, row, col, dout, q, k, v, lse, delta, G, bias, dbias, s.T, s.H,
      float(args.scale * kLog2eD), float(args.scale));
  PB_LAUNCH_CHECK();
}

// Head dims 32, 64, 128; bf16 tensors 16-byte aligned (cp.async, paired stores). pb::Error is
// thrown directly: pb_cuda does not link fmt, which pb::fail needs.
void check_args(const AttnShape& s, std::initializer_list<const void*> tensors) {
  if (s.D != 32 && s.D != 64 && s.D != 128)
    throw Error("flash_attention_bf16: head dim " + std::to_string(s.D) +
                " not supported (32, 64 or 128)");
  for (const void* p : tensors)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
      throw Error("flash_attention_bf16: bf16 tensors must be 16-byte aligned");
}

}  // namespace

void flash_attention_bf16_forward(bf16_bits* o, float* lse, const bf16_bits* q, const bf16_bits* k,
                                  const bf16_bits* v, const float* log_f,
                                  const SoftmaxAttentionArgs& args, const float* bias) {
  const AttnShape& s = args.shape;
  check_args(s, {o, q, k, v});
  if (int64_t(s.B) * s.H * s.T == 0) return;
  double* G = nullptr;  // (B, T, H)
  if (log_f) {
    G = static_cast<double*>(scratch(sizeof(double) * size_t(s.B) * s.T * s.H));
    gate_prefix(G, log_f, s);
  }
  const auto run = [&](auto d) {
    constexpr int D = decltype(d)::value;
    (G ? forward<D, true> : forward<D, false>)(o, lse, q, k, v, G, bias, args);
  };
  switch (s.D) {
    case 32: run(std::integral_constant<int, 32>()); break;
    case 64: run(std::integral_constant<int, 64>()); break;
    default: run(std::integral_constant<int, 128>()); break;
  }
}

void flash_attention_bf16_backward(bf16_bits* dq, bf16_bits* dk, bf16_bits* dv, float* dlog_f,
                                   const bf16_bits* dout, const bf16_bits* o, const float* lse,
                                   const bf16_bits* q, const bf16_bits* k, const bf16_bits* v,
                                   const float* log_f, const SoftmaxAttentionArgs& args, float* dbias,
                                   const float* bias) {
  const AttnShape& s = args.shape;
  check_args(s, {dq, dk, dv, dout, o, q, k, v});
  if (int64_t(s.B) * s.H * s.T == 0) return;
  const size_t n = size_t(s.B) * s.T * s.H, nd = n * s.D;
  // scratch: [G (n) double | dq_acc (n·D) | row (n) | col (n) | δ (n)], G, row, col only with a gate
  const size_t n_sums = nd + (log_f ? n : 0);  // dq_acc and row: zeroed, then summed into
  char* base = static_cast<char*>(scratch((log_f ? n * sizeof(double) : 0) +
                                          (n_sums + (log_f ? n : 0) + n) * sizeof(float)));
  double* G = log_f ? reinterpret_cast<double*>(base) : nullptr;                      // (B, T, H)
  float* dq_acc = reinterpret_cast<float*>(base + (log_f ? n * sizeof(double) : 0));  // (B, T, H, D)
  float* row = log_f ? dq_acc + nd : nullptr;  // (B, T, H) Σ_j dS_tj
  float* col = log_f ? row + n : nullptr;      // (B, T, H) Σ_i dS_it
  float* delta = dq_acc + n_sums + (log_f ? n : 0);  // (B, T, H)

  PB_CUDA_CHECK(cudaMemsetAsync(dq_acc, 0, n_sums * sizeof(float), stream()));
  if (bias) PB_CUDA_CHECK(cudaMemsetAsync(dbias, 0, sizeof(float) * size_t(s.H) * s.T, stream()));
  // δ_i = dout_i·o_i
  constexpr int kRowsPerBlock = 8;
  flash_delta_bf16_kernel<<<ceil_div(int64_t(n), kRowsPerBlock), 32 * kRowsPerBlock, 0, stream()>>>(
      delta, reinterpret_cast<const __nv_bfloat162*>(o), reinterpret_cast<const __nv_bfloat162*>(dout),
      int64_t(n), s.D);
  PB_LAUNCH_CHECK();
  if (log_f) gate_prefix(G, log_f, s);
  const auto run = [&](auto d) {
    constexpr int D = decltype(d)::value;
    (G ? backward<D, true> : backward<D, false>)(dk, dv, dq_acc, row, col, dout, q, k, v, lse, delta, G,
                                                 bias, dbias, args);
  };
  switch (s.D) {
    case 32: run(std::integral_constant<int, 32>()); break;
    case 64: run(std::integral_constant<int, 64>()); break;
    default: run(std::integral_constant<int, 128>()); break;
  }
  flash_dq_bf16_kernel<<<std::min(ceil_div(int64_t(nd), 256), 4096), 256, 0, stream()>>>(
      reinterpret_cast<__nv_bfloat16*>(dq), dq_acc, int64_t(nd), float(args.scale));
  PB_LAUNCH_CHECK();
  if (!log_f) return;
  gate_backward(dlog_f, row, col, s);
}

}  // namespace pb::cuda
