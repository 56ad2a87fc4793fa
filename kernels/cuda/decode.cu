// Decoding ops (kernels/ops.h, "Decoding"): one token per sequence against the KV cache
// (B, H, Tmax, D). decode_attention splits the T cached keys into S contiguous slices of L keys
// (flash-decoding; S = 1 for short T): a block per (b, h, slice) computes a warp per key's logit
// (lanes over D, warp_sum) into shared memory, the slice's max m_s, sum l_s = Σ exp(s_j − m_s) and
// acc_s = Σ exp(s_j − m_s) v_j (each warp sums its keys into a shared row, the rows added in a
// fixed order), and writes (m_s, l_s, acc_s) to scratch; a block per (b, h) then combines the S
// partials in slice order (deterministic, no atomics). decode_stick_breaking is a suffix scan and
// is not split: one block per (b, h) walks all T keys in the same three phases, the weights from
// per-thread chunks of the softplus suffix sum. The key update runs a warp per cached key; the
// rest is elementwise.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/cuda/runtime.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dense.cuh"
#include "kernels/cuda/ops.h"

namespace pb::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;  // block of the attention kernels and of the key update

// kc[bh, T − 1] = k[bh], vc likewise, over the B·H·D entries of k
__global__ void kv_append_kernel(float* kc, float* vc, const float* k, const float* v, int64_t n, int D,
                                 int Tmax, int T) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bh = i / D, at = (bh * Tmax + T - 1) * D + i % D;
    kc[at] = k[i];
    vc[at] = v[i];
  }
}

// G_sum[bh] += log f[bh] (double),  G[bh, T − 1] = G_sum[bh]
__global__ void decode_gate_kernel(float* G, double* G_sum, const float* log_f, int BH, int Tmax, int T) {
  for (int bh = blockIdx.x * blockDim.x + threadIdx.x; bh < BH; bh += gridDim.x * blockDim.x) {
    const double g = G_sum[bh] + double(log_f[bh]);
    G_sum[bh] = g;
    G[int64_t(bh) * Tmax + T - 1] = float(g);
  }
}

// q·k_j of head bh's query and key j, by one warp (every lane gets the sum).
__device__ __forceinline__ float warp_dot(const float* q, const float* k, int D) {
  float s = 0.f;
  for (int d = threadIdx.x & 31; d < D; d += 32) s += q[d] * k[d];
  return warp_sum(s);
}

// o[d] = inv · Σ_{j<T} w_j v_j[d]: warp w sums keys j ≡ w (mod kWarps) into acc row w (D), then
// thread d adds the rows in order. acc is shared (kWarps, D).
__device__ void weighted_sum(float* o, const float* w, const float* V, int T, int D, float inv, float* acc) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* row = acc + warp * D;  // (D)
  for (int d = lane; d < D; d += 32) row[d] = 0.f;
  for (int j = warp; j < T; j += kWarps) {
    const float wj = w[j];
    const float* v = V + int64_t(j) * D;  // (D)
    for (int d = lane; d < D; d += 32) row[d] += wj * v[d];
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += kThreads) {
    float sum = 0.f;
    for (int r = 0; r < kWarps; ++r) sum += acc[r * D + d];
    o[d] = sum * inv;
  }
}

// Block (bh, s) takes keys j0 ≤ j < j1, j0 = s·L, j1 = min(T, j0 + L) (n = j1 − j0 ≤ kMaxSlice):
//   s_j = scale·q·k_j + (G_t − G_j) + b_h(t − j),  m_s = max_j s_j,  e_j = exp(s_j − m_s),
//   l_s = Σ_j e_j,  acc_s = Σ_j e_j v_j.
// One slice (gridDim.y = 1): o = acc_s / l_s; else part[bh, s] = (m_s, l_s, acc_s), part (B·H, S, D + 2).
// Shared: q (D), acc (kWarps, D), e (L); red[32].
__global__ void decode_attention_split_kernel(float* o, float* part, const float* q, const float* kc,
                                              const float* vc, const float* G, const float* bias,
                                              int bias_stride, int H, int D, int Tmax, int T, int L,
                                              float scale) {
  extern __shared__ float smem[];
  float* qs = smem;             // (D)
  float* acc = smem + D;        // (kWarps, D)
  float* e = acc + kWarps * D;  // (L) the slice's s_j, then e_j
  __shared__ float red[32];
  const int bh = blockIdx.x, h = bh % H, t = T - 1, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int j0 = blockIdx.y * L, n = min(T, j0 + L) - j0;
  const float* K = kc + (int64_t(bh) * Tmax + j0) * D;    // (n, D) the slice's keys
  const float* g = G ? G + int64_t(bh) * Tmax : nullptr;  // (Tmax)
  for (int d = threadIdx.x; d < D; d += kThreads) qs[d] = q[int64_t(bh) * D + d];
  __syncthreads();
  float m = -INFINITY;
  for (int i = warp; i < n; i += kWarps) {
    const int j = j0 + i;
    float sj = scale * warp_dot(qs, K + int64_t(i) * D, D);   // scale·q·k_j
    if (g) sj += g[t] - g[j];                                  // + G_t − G_j
    if (bias) sj += bias[int64_t(h) * bias_stride + (t - j)];  // + b_h(t − j)
    if (lane == 0) e[i] = sj;
    m = fmaxf(m, sj);
  }
  m = block_max(m, red);  // m_s = max_j s_j (also makes e visible to the block)
  float l = 0.f;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float ei = expf(e[i] - m);  // e_j = exp(s_j − m_s)
    e[i] = ei;
    l += ei;
  }
  l = block_sum(l, red);  // l_s = Σ_j e_j
  const float* V = vc + (int64_t(bh) * Tmax + j0) * D;  // (n, D) the slice's values
  if (gridDim.y == 1) {
    weighted_sum(o + int64_t(bh) * D, e, V, n, D, 1.f / l, acc);  // o = acc_s / l_s
    return;
  }
  float* p = part + (int64_t(bh) * gridDim.y + blockIdx.y) * (D + 2);  // (D + 2): m_s, l_s, acc_s
  if (threadIdx.x == 0) {
    p[0] = m;
    p[1] = l;
  }
  weighted_sum(p + 2, e, V, n, D, 1.f, acc);  // acc_s = Σ_j e_j v_j
}

// One block per bh, over the partials part[bh] (S, D + 2) in slice order s = 0 .. S − 1:
//   m = max_s m_s,  l = Σ_s l_s e^{m_s − m},  o[d] = Σ_s acc_s[d] e^{m_s − m} / l.
// Every thread forms m and l itself (the same operations in the same order, so the same bits).
__global__ void decode_attention_combine_kernel(float* o, const float* part, int S, int D) {
  const int bh = blockIdx.x, W = D + 2;
  const float* p = part + int64_t(bh) * S * W;  // (S, D + 2)
  float m = -INFINITY;
  for (int s = 0; s < S; ++s) m = fmaxf(m, p[s * W]);  // m = max_s m_s
  float l = 0.f;
  for (int s = 0; s < S; ++s) l += p[s * W + 1] * expf(p[s * W] - m);  // l = Σ_s l_s e^{m_s − m}
  const float inv = 1.f / l;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float sum = 0.f;
    for (int s = 0; s < S; ++s) sum += p[s * W + 2 + d] * expf(p[s * W] - m);  // Σ_s acc_s[d] e^{m_s−m}
    o[int64_t(bh) * D + d] = sum * inv;
  }
}

// k_j ← k_j − β (w·k_j) w for the rows r = bh·t + j (j < t) of the cache, a warp per row.
__global__ void path_key_update_kernel(float* kc, const float* w, const float* beta, int64_t rows, int t,
                                       int D, int Tmax) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; r < rows;
       r += int64_t(gridDim.x) * blockDim.x / 32) {
    const int64_t bh = r / t, j = r % t;
    float* k = kc + (bh * Tmax + j) * D;  // (D)
    const float* wv = w + bh * D;         // (D)
    const float c = beta[bh] * warp_dot(wv, k, D);  // β (w·k_j)
    for (int d = lane; d < D; d += 32) k[d] -= c * wv[d];
  }
}

// One block per bh, query at t = T − 1. z_j = scale·q·k_j + bias (j < t) into scratch w (T); thread i
// takes the contiguous keys [i·n, (i + 1)·n) and sums their softplus (double); the sums of the
// later threads give each its starting tail; walking its keys right to left,
//   A_j = exp(log σ(z_j) − tail),  tail += softplus(z_j);
// w_t = rem = exp(−Σ_{j<t} softplus(z_j)), then o = Σ_{j≤t} w_j v_j.
__global__ void decode_stick_breaking_kernel(float* o, const float* q, const float* kc, const float* vc,
                                             float* w_all, int D, int Tmax, int T, float scale,
                                             float bias) {
  extern __shared__ float smem[];
  float* qs = smem;       // (D)
  float* acc = smem + D;  // (kWarps, D)
  __shared__ double part[kThreads], after[kThreads];  // per thread: Σ softplus of its keys, of the later ones
  const int bh = blockIdx.x, t = T - 1, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, i = threadIdx.x;
  const float* K = kc + int64_t(bh) * Tmax * D;  // (Tmax, D)
  float* w = w_all + int64_t(bh) * T;            // (T)
  for (int d = threadIdx.x; d < D; d += kThreads) qs[d] = q[int64_t(bh) * D + d];
  __syncthreads();
  for (int j = warp; j < t; j += kWarps) {
    const float z = scale * warp_dot(qs, K + int64_t(j) * D, D) + bias;  // z_j
    if (lane == 0) w[j] = z;
  }
  __syncthreads();
  // softplus(z) = max(z, 0) + log(1 + exp(−|z|)),  log σ(z) = min(z, 0) − log(1 + exp(−|z|))
  const int n = (t + kThreads - 1) / kThreads, j0 = min(t, i * n), j1 = min(t, j0 + n);
  double sum = 0;
  for (int j = j0; j < j1; ++j) sum += fmaxf(w[j], 0.f) + log1pf(expf(-fabsf(w[j])));
  part[i] = sum;
  __syncthreads();
  if (i == 0) {
    double later = 0;  // Σ part[i'] for i' > i
    for (int r = kThreads - 1; r >= 0; --r) {
      after[r] = later;
      later += part[r];
    }
  }
  __syncthreads();
  double tail = after[i];
  for (int j = j1 - 1; j >= j0; --j) {
    const float z = w[j], l = log1pf(expf(-fabsf(z)));
    w[j] = expf(fminf(z, 0.f) - l - float(tail));  // A_j = exp(log σ(z_j) − tail)
    tail += fmaxf(z, 0.f) + l;
  }
  if (i == 0) w[t] = float(exp(-(after[0] + part[0])));  // rem
  __syncthreads();
  weighted_sum(o + int64_t(bh) * D, w, vc + int64_t(bh) * Tmax * D, T, D, 1.f, acc);
}

// z = a[0] u + a[1] u_{t−1} + a[2] u_{t−2} (short_conv_forward's order),  y = z σ(z),
// state (u_{t−1}, u_{t−2}) ← (u, u_{t−1}); over the B·C entries.
__global__ void short_conv_step_kernel(float* y, float* state, const float* u, const float* a, int64_t n,
                                       int C) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = i / C;
    const int c = int(i % C);
    float* u_1 = state + b * 2 * C + c;  // u_{t−1}
    float* u_2 = u_1 + C;                // u_{t−2}
    float z = 0.f;
    z += a[c] * u[i];
    z += a[C + c] * *u_1;
    z += a[2 * C + c] * *u_2;
    y[i] = z * sigmoidf_(z);
    *u_2 = *u_1;
    *u_1 = u[i];
  }
}

// Dynamic shared memory of the attention kernels: q (D), acc (kWarps, D) and `extra` floats.
template <class Kernel>
int attention_smem(Kernel kernel, int D, int extra = 0) {
  const int bytes = int(sizeof(float)) * (D * (1 + kWarps) + extra);
  if (bytes > 48 * 1024) set_smem(kernel, bytes);
  return bytes;
}

// The key slices of decode_attention: S slices of L keys (the last may be shorter, none empty).
// L0 = B·H·T / kTargetBlocks clamped to [kMinSlice, kMaxSlice], S = ⌈T / L0⌉, L = ⌈T / S⌉: about
// kTargetBlocks blocks (two waves of an H200's 132 SMs) once B·H·T is large, S = 1 for
// T ≤ kMinSlice, and a slice's logits fit in shared memory. A function of the shape alone, not of
// the GPU's SM count.
constexpr int kMinSlice = 256, kMaxSlice = 1024, kTargetBlocks = 264;
struct KeySplit {
  int S, L;
};
KeySplit split_keys(int BH, int T) {
  const int64_t L0 = std::clamp<int64_t>(ceil_div(int64_t(BH) * T, kTargetBlocks), kMinSlice, kMaxSlice);
  const int S = std::max(1, ceil_div(T, L0));
  return {S, ceil_div(T, S)};
}

}  // namespace

void kv_append(float* kc, float* vc, const float* k, const float* v, const DecodeArgs& a) {
  const int64_t n = int64_t(a.B) * a.H * a.D;
  if (n == 0) return;
  kv_append_kernel<<<blocks_for(n), kElementThreads, 0, stream()>>>(kc, vc, k, v, n, a.D, a.Tmax, a.T);
  PB_LAUNCH_CHECK();
}

void decode_gate(float* G, double* G_sum, const float* log_f, const DecodeArgs& a) {
  const int BH = a.B * a.H;
  if (BH == 0) return;
  decode_gate_kernel<<<blocks_for(BH), kElementThreads, 0, stream()>>>(G, G_sum, log_f, BH, a.Tmax, a.T);
  PB_LAUNCH_CHECK();
}

void decode_attention(float* o, const float* q, const float* kc, const float* vc, const float* G,
                      const DecodeArgs& a, const float* bias, int bias_stride) {
  const int BH = a.B * a.H;
  if (BH == 0 || a.D == 0) return;
  const auto [S, L] = split_keys(BH, a.T);
  float* part = S > 1 ? static_cast<float*>(scratch(sizeof(float) * size_t(BH) * S * (a.D + 2)))
                      : nullptr;  // (B·H, S, D + 2)
  const int smem = attention_smem(decode_attention_split_kernel, a.D, L);
  decode_attention_split_kernel<<<dim3(BH, S), kThreads, smem, stream()>>>(
      o, part, q, kc, vc, G, bias, bias_stride, a.H, a.D, a.Tmax, a.T, L, float(a.scale));
  PB_LAUNCH_CHECK();
  if (S == 1) return;
  const int threads = std::min(kThreads, 32 * ceil_div(a.D, 32));
  decode_attention_combine_kernel<<<BH, threads, 0, stream()>>>(o, part, S, a.D);
  PB_LAUNCH_CHECK();
}

void path_key_update(float* kc, const float* w, const float* beta, const DecodeArgs& a) {
  const int t = a.T - 1;
  const int64_t rows = int64_t(a.B) * a.H * t;
  if (rows == 0 || a.D == 0) return;
  const int blocks = int(std::min<int64_t>(ceil_div(rows, kWarps), kMaxElementBlocks));
  path_key_update_kernel<<<blocks, kThreads, 0, stream()>>>(kc, w, beta, rows, t, a.D, a.Tmax);
  PB_LAUNCH_CHECK();
}

void decode_stick_breaking(float* o, const float* q, const float* kc, const float* vc, const DecodeArgs& a) {
  const int BH = a.B * a.H;
  if (BH == 0 || a.D == 0) return;
  float* w = static_cast<float*>(scratch(sizeof(float) * size_t(BH) * a.T));  // (B·H, T)
  const int smem = attention_smem(decode_stick_breaking_kernel, a.D);
  decode_stick_breaking_kernel<<<BH, kThreads, smem, stream()>>>(o, q, kc, vc, w, a.D, a.Tmax, a.T,
                                                                 float(a.scale), float(a.bias));
  PB_LAUNCH_CHECK();
}

void short_conv_step(float* y, float* state, const float* u, const float* a, int B, int C) {
  const int64_t n = int64_t(B) * C;
  if (n == 0) return;
  short_conv_step_kernel<<<blocks_for(n), kElementThreads, 0, stream()>>>(y, state, u, a, n, C);
  PB_LAUNCH_CHECK();
}

}  // namespace pb::cuda
