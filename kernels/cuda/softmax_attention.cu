// Causal softmax attention with the optional FoX gate and bias table on the GPU: FlashAttention-2
// in fp32 (FFMA), O(T·D) memory. Formulas and the backward derivation: kernels/README.md, "Softmax
// attention and the FoX gate" and "The bias table"; the reference is kernels/cpu/softmax_attention.cpp.
//
// Tiles, inner products and launches: attention_tiles.cuh.
//
// Kernels (one launch each for all B·H heads; grid (B·H, tiles), the longest tiles first):
//   forward:    per query tile, key tiles left to right, online softmax → o, lse
//   backward:   δ_i = dout_i·o_i; [gate: G by a prefix scan]; per key tile dk, dv (query tiles
//               below the diagonal); per query tile dq [bias: and the diagonal sums of dS per
//               (query tile, key tile)]; [gate: dlog_f by a suffix scan]; [bias: db by a fixed-
//               order sum of those partials].
// Every output element is written by one thread in a fixed order: results are deterministic.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gate_scan.cuh"
#include "kernels/cuda/ops.h"
#include "core/cuda/runtime.h"

namespace pb::cuda {
namespace {

// ---------------------------------------------------------------------------------------------
// The bias table

// The table row b_h (T) of this block's head (blockIdx.x = b·H + h), or null.
__device__ __forceinline__ const float* head_bias(const float* __restrict__ bias, int T, int H) {
  return bias ? bias + int64_t(blockIdx.x % H) * T : nullptr;
}

// b_h(r) at a distance r clamped to 0 .. T − 1 (the masked entries i < j and rows i ≥ T read
// some entry and are then discarded).
__device__ __forceinline__ float bias_at(const float* __restrict__ bias_h, int r, int T) {
  return bias_h[min(max(r, 0), T - 1)];
}

// Index of the BT partial sums of diagonal chunk c ≤ qt met by query tile qt of head bh: the
// (qt, c) pairs packed as a triangle, n_tri = n_tiles (n_tiles + 1) / 2 per head.
__device__ __forceinline__ int64_t chunk_index(int bh, int qt, int c, int n_tri) {
  return int64_t(bh) * n_tri + qt * (qt + 1) / 2 + c;
}

// ---------------------------------------------------------------------------------------------
// Forward

// Per query tile (blockIdx.y counted from the last), key tiles 0 .. diagonal:
//   s_ij = scale·q_i·k_j + (G_i − G_j)  (j ≤ i),  m_i ← max(m_i, max_j s_ij),
//   l_i ← l_i·e^{m_old − m_i} + Σ_j e^{s_ij − m_i},  acc_i ← acc_i·e^{m_old − m_i} + Σ_j e^{s_ij − m_i} v_j
// then o_i = acc_i / l_i, lse_i = m_i + log l_i.
template <int DP>
__global__ void __launch_bounds__(kThreads, DP <= 64 ? 2 : 1)
    softmax_fwd_f32_kernel(float* __restrict__ o,          // (B, T, H, D)
                   float* __restrict__ lse,        // (B, T, H)
                   const float* __restrict__ q,    // (B, T, H, D)
                   const float* __restrict__ k,    // (B, T, H, D)
                   const float* __restrict__ v,    // (B, T, H, D)
                   const double* __restrict__ G,   // (B, T, H) or null
                   const float* __restrict__ bias, // (H, T) or null
                   int T, int H, int D, float scale) {
  using L = Tile<DP>;
  extern __shared__ float4 smem4[];
  float* sq = reinterpret_cast<float*>(smem4);  // (BT, LD) queries of this tile
  float* sk = sq + L::BT * L::LD;               // (BT, LD) keys
  float* sv = sk + L::BT * L::LD;               // (BT, LD) values
  float* sp = sv + L::BT * L::LD;               // (BT, LP) e^{s − m}
  const HeadIndex at(blockIdx.x, T, H, D);
  const float* bias_h = head_bias(bias, T, H);  // (T) or null
  const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * L::BT;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

  load_tile<DP>(sq, q + at.head, q0, T, at.stride, D);
  float m[L::RM], l[L::RM], acc[L::RM][L::NV] = {};
  double gi[L::RM];  // G_i
#pragma unroll
  for (int a = 0; a < L::RM; ++a) {
    m[a] = -INFINITY;
    l[a] = 0.f;  // this thread's columns only; summed over the row at the end
    gi[a] = G ? G[at.scalar + int64_t(min(q0 + ty * L::RM + a, T - 1)) * H] : 0.0;
  }
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * L::BT;
    __syncthreads();  // the previous tile's sk, sv, sp are read
    load_tile<DP>(sk, k + at.head, k0, T, at.stride, D);
    load_tile<DP>(sv, v + at.head, k0, T, at.stride, D);
    __syncthreads();
    float s[L::RM][L::RN] = {};
    mm_abt<DP>(s, sq, sk, ty, tx);
    double gj[L::RN];  // G_j
#pragma unroll
    for (int b = 0; b < L::RN; ++b)
      gj[b] = G ? G[at.scalar + int64_t(min(k0 + tx + 16 * b, T - 1)) * H] : 0.0;
#pragma unroll
    for (int a = 0; a < L::RM; ++a) {
      const int i = q0 + ty * L::RM + a;
      // s_ij = scale·q_i·k_j + (G_i − G_j) (+ b_h(i − j)) for j ≤ i, −∞ above the diagonal (every
      // row keeps at least j = i or a whole tile left of it, so the row max is finite)
      float tile_max = -INFINITY;
#pragma unroll
      for (int b = 0; b < L::RN; ++b) {
        const int j = k0 + tx + 16 * b;
        s[a][b] = j <= i ? fmaf(scale, s[a][b], float(gi[a] - gj[b])) : -INFINITY;
        if (bias_h && j <= i) s[a][b] += bias_at(bias_h, i - j, T);
        tile_max = fmaxf(tile_max, s[a][b]);
      }
      // m_new = max(m, max_j s_ij); l, acc rescaled by e^{m − m_new} (0 on the first tile)
      const float m_new = fmaxf(m[a], half_warp_max(tile_max));
      const float alpha = expf(m[a] - m_new);
      l[a] *= alpha;
#pragma unroll
      for (int j = 0; j < L::NV; ++j) acc[a][j] *= alpha;
      // p_ij = e^{s_ij − m_new}
#pragma unroll
      for (int b = 0; b < L::RN; ++b) {
        const float p = expf(s[a][b] - m_new);
        l[a] += p;
        sp[(ty * L::RM + a) * L::LP + tx + 16 * b] = p;
      }
      m[a] = m_new;
    }
    __syncthreads();
    // acc_i += Σ_j p_ij v_j
    mm_ab<DP>(acc, sp, sv, ty, tx);
  }
#pragma unroll
  for (int a = 0; a < L::RM; ++a) {
    const int i = q0 + ty * L::RM + a;
    const float sum = half_warp_sum(l[a]);
    if (i >= T) continue;
    // lse_i = m_i + log l_i,  o_i = acc_i / l_i
    if (tx == 0) lse[at.scalar + int64_t(i) * H] = m[a] + logf(sum);
    const float inv = 1.f / sum;
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
__global__ void softmax_row_dot_f32_kernel(float* __restrict__ delta,   // (n)
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

// db_h(r) = Σ_b Σ_{qt ≥ c} part[b·H + h, (qt, c), x] for r = c·BT + x: one thread per (h, r),
// the sum in double in a fixed order.
__global__ void softmax_bias_reduce_kernel(float* __restrict__ dbias,       // (H, T)
                                   const float* __restrict__ part,  // (B·H, n_tri, BT)
                                   int B, int H, int T, int BT) {
  const int n_tiles = (T + BT - 1) / BT, n_tri = n_tiles * (n_tiles + 1) / 2;
  const int64_t n = int64_t(H) * T;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += step) {
    const int h = int(e / T), r = int(e % T), c = r / BT, x = r % BT;
    double acc = 0;
    for (int b = 0; b < B; ++b)
      for (int qt = c; qt < n_tiles; ++qt) acc += part[chunk_index(b * H + h, qt, c, n_tri) * BT + x];
    dbias[e] = float(acc);
  }
}

// ---------------------------------------------------------------------------------------------
// Backward

// Per key tile (blockIdx.y; the first ones have the most work), query tiles diagonal .. last,
// with s, A transposed: thread rows are keys j, columns queries i.
//   A_ij = e^{s_ij − lse_i} (s_ij with gate and bias),  dS_ij = A_ij (dout_i·v_j − δ_i)   (i ≥ j)
//   dv_j = Σ_i A_ij dout_i,  dk_j = scale Σ_i dS_ij q_i,  col_j = Σ_i dS_ij (gate only)
template <int DP>
__global__ void __launch_bounds__(kThreads, DP <= 64 ? 2 : 1)
    softmax_dkdv_f32_kernel(float* __restrict__ dk,            // (B, T, H, D)
                float* __restrict__ dv,            // (B, T, H, D)
                float* __restrict__ col,           // (B, T, H) or null
                const float* __restrict__ dout,    // (B, T, H, D)
                const float* __restrict__ q,       // (B, T, H, D)
                const float* __restrict__ k,       // (B, T, H, D)
                const float* __restrict__ v,       // (B, T, H, D)
                const float* __restrict__ lse,     // (B, T, H)
                const float* __restrict__ delta,   // (B, T, H)
                const double* __restrict__ G,      // (B, T, H) or null
                const float* __restrict__ bias,    // (H, T) or null
                int T, int H, int D, float scale) {
  using L = Tile<DP>;
  extern __shared__ float4 smem4[];
  float* sk = reinterpret_cast<float*>(smem4);  // (BT, LD) keys of this tile
  float* sv = sk + L::BT * L::LD;               // (BT, LD) values
  float* sq = sv + L::BT * L::LD;               // (BT, LD) queries
  float* sdo = sq + L::BT * L::LD;              // (BT, LD) dout
  float* sa = sdo + L::BT * L::LD;              // (BT, LP) A transposed: [j][i]
  float* sds = sa + L::BT * L::LP;              // (BT, LP) dS transposed: [j][i]
  const HeadIndex at(blockIdx.x, T, H, D);
  const float* bias_h = head_bias(bias, T, H);  // (T) or null
  const int kt = blockIdx.y, k0 = kt * L::BT, n_tiles = gridDim.y;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;

  load_tile<DP>(sk, k + at.head, k0, T, at.stride, D);
  load_tile<DP>(sv, v + at.head, k0, T, at.stride, D);
  float acc_k[L::RM][L::NV] = {}, acc_v[L::RM][L::NV] = {}, col_sum[L::RM] = {};
  double gj[L::RM];  // G_j
#pragma unroll
  for (int a = 0; a < L::RM; ++a)
    gj[a] = G ? G[at.scalar + int64_t(min(k0 + ty * L::RM + a, T - 1)) * H] : 0.0;
  for (int qt = kt; qt < n_tiles; ++qt) {
    const int q0 = qt * L::BT;
    __syncthreads();  // the previous tile's sq, sdo, sa, sds are read
    load_tile<DP>(sq, q + at.head, q0, T, at.stride, D);
    load_tile<DP>(sdo, dout + at.head, q0, T, at.stride, D);
    __syncthreads();
    // s_ji = k_j·q_i,  dp_ji = v_j·dout_i
    float s[L::RM][L::RN] = {}, dp[L::RM][L::RN] = {};
    mm_abt<DP>(s, sk, sq, ty, tx);
    mm_abt<DP>(dp, sv, sdo, ty, tx);
#pragma unroll
    for (int b = 0; b < L::RN; ++b) {
      const int i = q0 + tx + 16 * b;
      const int64_t si = at.scalar + int64_t(min(i, T - 1)) * H;
      const float lse_i = lse[si], delta_i = delta[si];
      const double gi = G ? G[si] : 0.0;
#pragma unroll
      for (int a = 0; a < L::RM; ++a) {
        const int j = k0 + ty * L::RM + a;
        // A_ij = e^{scale·q_i·k_j + G_i − G_j (+ b_h(i − j)) − lse_i},  dS_ij = A_ij (dout_i·v_j − δ_i)
        float x = fmaf(scale, s[a][b], float(gi - gj[a]));
        if (bias_h) x += bias_at(bias_h, i - j, T);
        const float p = (j <= i && i < T) ? expf(x - lse_i) : 0.f;
        const float ds = p * (dp[a][b] - delta_i);
        col_sum[a] += ds;
        sa[(ty * L::RM + a) * L::LP + tx + 16 * b] = p;
        sds[(ty * L::RM + a) * L::LP + tx + 16 * b] = ds;
      }
    }
    __syncthreads();
    // dv_j += Σ_i A_ij dout_i,  dk_j += Σ_i dS_ij q_i
    mm_ab<DP>(acc_v, sa, sdo, ty, tx);
    mm_ab<DP>(acc_k, sds, sq, ty, tx);
  }
#pragma unroll
  for (int a = 0; a < L::RM; ++a) {
    const int j = k0 + ty * L::RM + a;
    const float cs = half_warp_sum(col_sum[a]);
    if (j >= T) continue;
    if (col && tx == 0) col[at.scalar + int64_t(j) * H] = cs;
#pragma unroll
    for (int jj = 0; jj < L::NV; ++jj) {
      const int n = L::col(jj, tx);
      if (n >= D) continue;
      const int64_t e = at.head + int64_t(j) * at.stride + n;
      dk[e] = scale * acc_k[a][jj];
      dv[e] = acc_v[a][jj];
    }
  }
}

// Per query tile (blockIdx.y counted from the last), key tiles 0 .. diagonal:
//   dS_ij as above,  dq_i = scale Σ_j dS_ij k_j,  row_i = Σ_j dS_ij (gate only)
// With the bias, the sums of dS along the diagonals i − j = r (rows i < T), in chunks of BT
// distances: chunk c = ⌊r / BT⌋ of this query tile gets the lower triangle (i − j ≥ q0 − k0) of key
// tile qt − c and the strict upper triangle of key tile qt − c − 1. Thread x < BT owns offset
// x = r − c·BT: per key tile it sums the lower diagonal x (BT − x entries) and the upper diagonal
// j − i = BT − x (x entries), carries the upper sum to the next key tile and writes
//   part[bh, qt, c, x] = lower_x(kt = qt − c) + upper_x(kt = qt − c − 1).
template <int DP>
__global__ void __launch_bounds__(kThreads, DP <= 64 ? 2 : 1)
    softmax_dq_f32_kernel(float* __restrict__ dq,             // (B, T, H, D)
              float* __restrict__ row,            // (B, T, H) or null
              const float* __restrict__ dout,     // (B, T, H, D)
              const float* __restrict__ q,        // (B, T, H, D)
              const float* __restrict__ k,        // (B, T, H, D)
              const float* __restrict__ v,        // (B, T, H, D)
              const float* __restrict__ lse,      // (B, T, H)
              const float* __restrict__ delta,    // (B, T, H)
              const double* __restrict__ G,       // (B, T, H) or null
              const float* __restrict__ bias,     // (H, T) or null
              float* __restrict__ part,           // (B·H, n_tri, BT) diagonal partials, with bias
              int T, int H, int D, float scale) {
  using L = Tile<DP>;
  extern __shared__ float4 smem4[];
  float* sq = reinterpret_cast<float*>(smem4);  // (BT, LD) queries of this tile
  float* sdo = sq + L::BT * L::LD;              // (BT, LD) dout
  float* sk = sdo + L::BT * L::LD;              // (BT, LD) keys
  float* sv = sk + L::BT * L::LD;               // (BT, LD) values
  float* sds = sv + L::BT * L::LD;              // (BT, LP) dS
  const HeadIndex at(blockIdx.x, T, H, D);
  const float* bias_h = head_bias(bias, T, H);  // (T) or null
  const int qt = gridDim.y - 1 - blockIdx.y, q0 = qt * L::BT;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int n_tri = gridDim.y * (gridDim.y + 1) / 2;

  load_tile<DP>(sq, q + at.head, q0, T, at.stride, D);
  load_tile<DP>(sdo, dout + at.head, q0, T, at.stride, D);
  float acc[L::RM][L::NV] = {}, row_part[L::RM] = {}, lse_i[L::RM], delta_i[L::RM];
  float carry = 0.f;  // bias: the upper diagonal sum of the previous key tile (thread x < BT)
  double gi[L::RM];  // G_i
#pragma unroll
  for (int a = 0; a < L::RM; ++a) {
    const int64_t si = at.scalar + int64_t(min(q0 + ty * L::RM + a, T - 1)) * H;
    lse_i[a] = lse[si];
    delta_i[a] = delta[si];
    gi[a] = G ? G[si] : 0.0;
  }
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * L::BT;
    __syncthreads();  // the previous tile's sk, sv, sds are read
    load_tile<DP>(sk, k + at.head, k0, T, at.stride, D);
    load_tile<DP>(sv, v + at.head, k0, T, at.stride, D);
    __syncthreads();
    // s_ij = q_i·k_j,  dp_ij = dout_i·v_j
    float s[L::RM][L::RN] = {}, dp[L::RM][L::RN] = {};
    mm_abt<DP>(s, sq, sk, ty, tx);
    mm_abt<DP>(dp, sdo, sv, ty, tx);
    double gj[L::RN];  // G_j
#pragma unroll
    for (int b = 0; b < L::RN; ++b)
      gj[b] = G ? G[at.scalar + int64_t(min(k0 + tx + 16 * b, T - 1)) * H] : 0.0;
#pragma unroll
    for (int a = 0; a < L::RM; ++a) {
      const int i = q0 + ty * L::RM + a;
#pragma unroll
      for (int b = 0; b < L::RN; ++b) {
        const int j = k0 + tx + 16 * b;
        // A_ij = e^{scale·q_i·k_j + G_i − G_j (+ b_h(i − j)) − lse_i},  dS_ij = A_ij (dout_i·v_j − δ_i)
        float x = fmaf(scale, s[a][b], float(gi[a] - gj[b]));
        if (bias_h) x += bias_at(bias_h, i - j, T);
        const float p = j <= i ? expf(x - lse_i[a]) : 0.f;
        const float ds = p * (dp[a][b] - delta_i[a]);
        row_part[a] += ds;
        sds[(ty * L::RM + a) * L::LP + tx + 16 * b] = ds;
      }
    }
    __syncthreads();
    if (part && threadIdx.x < L::BT) {
      // lower_x = Σ dS over i − j = x + q0 − k0, upper_x over j − i = BT − x − (q0 − k0); rows i < T
      const int x = threadIdx.x;
      float lower = carry, upper = 0.f;
      for (int jj = 0; jj + x < L::BT; ++jj)
        if (q0 + jj + x < T) lower += sds[(jj + x) * L::LP + jj];
      for (int ii = 0; ii < x; ++ii)
        if (q0 + ii < T) upper += sds[ii * L::LP + ii + L::BT - x];
      part[chunk_index(blockIdx.x, qt, qt - kt, n_tri) * L::BT + x] = lower;
      carry = upper;
    }
    // dq_i += Σ_j dS_ij k_j
    mm_ab<DP>(acc, sds, sk, ty, tx);
  }
#pragma unroll
  for (int a = 0; a < L::RM; ++a) {
    const int i = q0 + ty * L::RM + a;
    const float rs = half_warp_sum(row_part[a]);
    if (i >= T) continue;
    if (row && tx == 0) row[at.scalar + int64_t(i) * H] = rs;
#pragma unroll
    for (int j = 0; j < L::NV; ++j) {
      const int n = L::col(j, tx);
      if (n < D) dq[at.head + int64_t(i) * at.stride + n] = scale * acc[a][j];
    }
  }
}

template <int DP>
void forward(float* o, float* lse, const float* q, const float* k, const float* v, const double* G,
             const float* bias, const SoftmaxAttentionArgs& args) {
  const AttnShape& s = args.shape;
  launch<DP>(softmax_fwd_f32_kernel<DP>, smem_bytes<DP>(3, 1), s, o, lse, q, k, v, G, bias, s.T, s.H, s.D,
             float(args.scale));
}

template <int DP>
void backward(float* dq, float* dk, float* dv, float* row, float* col, float* part, const float* dout,
              const float* q, const float* k, const float* v, const float* lse, const float* delta,
              const double* G, const float* bias, const SoftmaxAttentionArgs& args) {
  const AttnShape& s = args.shape;
  const float scale = float(args.scale);
  launch<DP>(softmax_dkdv_f32_kernel<DP>, smem_bytes<DP>(4, 2), s, dk, dv, col, dout, q, k, v, lse, delta, G,
             bias, s.T, s.H, s.D, scale);
  launch<DP>(softmax_dq_f32_kernel<DP>, smem_bytes<DP>(4, 1), s, dq, row, dout, q, k, v, lse, delta, G, bias,
             part, s.T, s.H, s.D, scale);
}

}  // namespace

// Precision::BF16 (runtime.h): the same ops through the bf16 kernels (attention_mixed.cu).
void softmax_attention_forward_mixed(float* o, float* lse, const float* q, const float* k,
                                     const float* v, const float* log_f,
                                     const SoftmaxAttentionArgs& args, const float* bias);
void softmax_attention_backward_mixed(float* dq, float* dk, float* dv, float* dlog_f,
                                      const float* dout, const float* o, const float* lse,
                                      const float* q, const float* k, const float* v,
                                      const float* log_f, const SoftmaxAttentionArgs& args,
                                      float* dbias, const float* bias);

void softmax_attention_forward(float* o, float* lse, const float* q, const float* k, const float* v,
                               const float* log_f, const SoftmaxAttentionArgs& args, const float* bias) {
  if (precision() == Precision::BF16)
    return softmax_attention_forward_mixed(o, lse, q, k, v, log_f, args, bias);
  const AttnShape& s = args.shape;
  if (int64_t(s.B) * s.H * s.T == 0) return;
  const int DP = padded_head_dim(s.D, "softmax attention");
  double* G = nullptr;  // (B, T, H)
  if (log_f) {
    G = static_cast<double*>(scratch(sizeof(double) * size_t(s.B) * s.T * s.H));
    gate_prefix(G, log_f, s);
  }
  switch (DP) {
    case 32: forward<32>(o, lse, q, k, v, G, bias, args); break;
    case 64: forward<64>(o, lse, q, k, v, G, bias, args); break;
    case 128: forward<128>(o, lse, q, k, v, G, bias, args); break;
    default: forward<256>(o, lse, q, k, v, G, bias, args); break;
  }
}

void softmax_attention_backward(float* dq, float* dk, float* dv, float* dlog_f, const float* dout,
                                const float* o, const float* lse, const float* q, const float* k,
                                const float* v, const float* log_f,
                                const SoftmaxAttentionArgs& args, float* dbias, const float* bias) {
  if (precision() == Precision::BF16)
    return softmax_attention_backward_mixed(dq, dk, dv, dlog_f, dout, o, lse, q, k, v, log_f, args, dbias,
                                            bias);
  const AttnShape& s = args.shape;
  if (int64_t(s.B) * s.H * s.T == 0) return;
  const int DP = padded_head_dim(s.D, "softmax attention");
  const size_t n = size_t(s.B) * s.T * s.H;
  const int BT = tile_rows(DP), n_tiles = ceil_div(s.T, BT);
  const size_t n_part = bias ? size_t(s.B) * s.H * (size_t(n_tiles) * (n_tiles + 1) / 2) * BT : 0;
  // scratch: [G (n) double | δ (n) | row (n) | col (n) | part (n_part)], the gate's parts only with
  // a gate, part only with a bias
  const size_t n_floats = (log_f ? 3 * n : n) + n_part;
  char* base = static_cast<char*>(scratch((log_f ? n * sizeof(double) : 0) + n_floats * sizeof(float)));
  double* G = log_f ? reinterpret_cast<double*>(base) : nullptr;  // (B, T, H)
  float* delta = reinterpret_cast<float*>(base + (log_f ? n * sizeof(double) : 0));  // (B, T, H)
  float* row = log_f ? delta + n : nullptr;  // (B, T, H) Σ_j dS_tj
  float* col = log_f ? row + n : nullptr;    // (B, T, H) Σ_i dS_it
  float* part = bias ? delta + (log_f ? 3 * n : n) : nullptr;  // (B·H, n_tri, BT) diagonal sums of dS

  // δ_i = dout_i·o_i
  constexpr int kRowsPerBlock = kThreads / 32;
  softmax_row_dot_f32_kernel<<<ceil_div(int64_t(n), kRowsPerBlock), kThreads, 0, stream()>>>(delta, dout, o,
                                                                                  int64_t(n), s.D);
  PB_LAUNCH_CHECK();
  if (log_f) gate_prefix(G, log_f, s);
  switch (DP) {
    case 32: backward<32>(dq, dk, dv, row, col, part, dout, q, k, v, lse, delta, G, bias, args); break;
    case 64: backward<64>(dq, dk, dv, row, col, part, dout, q, k, v, lse, delta, G, bias, args); break;
    case 128: backward<128>(dq, dk, dv, row, col, part, dout, q, k, v, lse, delta, G, bias, args); break;
    default: backward<256>(dq, dk, dv, row, col, part, dout, q, k, v, lse, delta, G, bias, args); break;
  }
  if (bias) {  // db_h(r) = Σ_b Σ_qt part
    const int64_t n_bias = int64_t(s.H) * s.T;
    softmax_bias_reduce_kernel<<<ceil_div(n_bias, int64_t(256)), 256, 0, stream()>>>(dbias, part, s.B, s.H, s.T, BT);
    PB_LAUNCH_CHECK();
  }
  if (!log_f) return;
  gate_backward(dlog_f, row, col, s);
}

}  // namespace pb::cuda
