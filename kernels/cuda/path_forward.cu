// PaTH forward scan, fp32 (stage map in path_common.cuh). path_fwd_scan_f32: per (b·h, query
// block I), heaviest blocks first, from prep's Q̃, K̃, U, S_loc and G:
//   diagonal block   s_ij = scale·S_loc_ij + G_i − G_j (j ≤ i), online softmax, acc = P V_I
//   J = I−1 … 0      [Z, X] = R [K̃_J; W_J]ᵀ, s = scale·z + G_i − G_j, online-softmax update,
//                    acc += P V_J, R ← R − X U_J (= R P_J)           (R = Q̃_I at the start)
//   end              o_i = acc_i / l_i, lse_i = m_i + log l_i
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/path_common.cuh"
#include "kernels/cuda/path_tiles.cuh"
#include "core/cuda/runtime.h"

namespace pb::cuda::path {
namespace {

// [K̃_J; W_J] is dead once [Z, X] is in registers, so P and X take its place: (S, DP) = 64 × 64
// fits in 84 KB and two CTAs share an SM.
template <int S, int DP>
constexpr int forward_smem_floats() {
  constexpr int kw = 2 * S * (DP + 1), px = 2 * S * (S + 1);
  return 4 * S + 3 * S * (DP + 1) + (kw > px ? kw : px);
}

template <int S, int DP>
__global__ void __launch_bounds__(kThreads, 2) path_fwd_scan_f32(Dims d, Inputs in, Scratch sc, float* o,
                                                              float* lse) {
  constexpr int LB = DP + 1, LS = S + 1, TM = S / 16, TS = S / 16, TD = DP / 16;
  extern __shared__ __align__(16) float smem[];
  double* gq = reinterpret_cast<double*>(smem);  // (S): G of the query rows
  double* gk = gq + S;                           // (S): G of the key block
  float* r_s = smem + 4 * S;                     // (S, DP): R, the queries moved left
  float* u = r_s + S * LB;                       // (S, DP): U_J
  float* v = u + S * LB;                         // (S, DP): V_J
  float* kw = v + S * LB;                        // (2S, DP): [K̃_J; W_J], then P and X:
  float* p_s = kw;                               // (S, S): probabilities
  float* x_s = p_s + S * LS;                     // (S, S): X = R W_Jᵀ

  const int bh = blockIdx.x, b = bh / d.H, h = bh % d.H;
  const int I = d.n_blocks - 1 - blockIdx.y, a0 = I * S, nv = min(S, d.T - a0);
  const int tid = threadIdx.x, ty = tile_ty(), tx = tile_tx();
  const int64_t head = int64_t(bh) * d.Tp, stride = int64_t(d.H) * d.D;

  load_rows<S, DP>(r_s, LB, sc.q_hat + (head + a0) * DP, DP, S, DP);  // R = Q̃_I
  load_rows<S, DP>(v, LB, in.v + d.in_row(b, a0, h) * d.D, stride, nv, d.D);
  if (tid < S) gq[tid] = sc.g[head + a0 + tid];
  __syncthreads();

  // Diagonal block: s_ij = scale·S_loc_ij + G_i − G_j (j ≤ i), m_i = max_j s_ij, l_i = Σ_j e^{s_ij − m_i}.
  float m_row[TM], l_row[TM];
  {
    const float* sl = sc.s_loc + (int64_t(bh) * d.n_blocks + I) * S * S;  // (S, S)
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int r = ty + 16 * i;
      float s[TS], mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < TS; ++j) {
        const int c = tx + 16 * j;
        s[j] = c <= r ? d.scale * sl[r * S + c] + float(gq[r] - gq[c]) : -INFINITY;
        mx = fmaxf(mx, s[j]);
      }
      mx = half_warp_max(mx);  // finite: the diagonal is always there
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < TS; ++j) {
        const int c = tx + 16 * j;
        const float p = c <= r ? expf(s[j] - mx) : 0.f;
        p_s[r * LS + c] = p;
        sum += p;
      }
      m_row[i] = mx;
      l_row[i] = half_warp_sum(sum);
    }
  }
  __syncthreads();
  Tile<S, DP> acc;  // Σ_j e^{s_ij − m_i} v_j
  acc.zero();
  mma(acc, S, 1.f, p_s, LS, 1, v, LB, 1);

  for (int J = I - 1; J >= 0; --J) {
    const int j0 = J * S;
    __syncthreads();  // the previous step's products are done with kw, u, v, p_s, x_s; R is updated
    load_rows<S, DP>(kw, LB, sc.k_hat + (head + j0) * DP, DP, S, DP);
    load_rows<S, DP>(kw + S * LB, LB, in.w + d.in_row(b, j0, h) * d.D, stride, S, d.D);
    load_rows<S, DP>(u, LB, sc.u + (head + j0) * DP, DP, S, DP);
    load_rows<S, DP>(v, LB, in.v + d.in_row(b, j0, h) * d.D, stride, S, d.D);
    if (tid < S) gk[tid] = sc.g[head + j0 + tid];
    __syncthreads();
    Tile<S, 2 * S> zx;  // [Z, X] = R [K̃_J; W_J]ᵀ
    zx.zero();
    mma(zx, DP, 1.f, r_s, LB, 1, kw, 1, LB);
    __syncthreads();  // every thread is done with [K̃_J; W_J]: P and X overwrite it
    // Online softmax: s = scale·z + G_i − G_j, m' = max(m, max_j s), acc ← e^{m − m'} acc, l likewise.
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int r = ty + 16 * i;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < TS; ++j) {
        zx.v[i][j] = d.scale * zx.v[i][j] + float(gq[r] - gk[tx + 16 * j]);
        mx = fmaxf(mx, zx.v[i][j]);
      }
      const float m_new = fmaxf(m_row[i], half_warp_max(mx));
      const float alpha = expf(m_row[i] - m_new);
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < TS; ++j) {
        const float p = expf(zx.v[i][j] - m_new);
        p_s[r * LS + tx + 16 * j] = p;
        sum += p;
      }
#pragma unroll
      for (int j = TS; j < 2 * TS; ++j) x_s[r * LS + tx + 16 * j - S] = zx.v[i][j];
      l_row[i] = l_row[i] * alpha + half_warp_sum(sum);
      m_row[i] = m_new;
#pragma unroll
      for (int j = 0; j < TD; ++j) acc.v[i][j] *= alpha;
    }
    __syncthreads();
    mma(acc, S, 1.f, p_s, LS, 1, v, LB, 1);  // acc += P V_J
    if (J > 0) {                              // R ← R − X U_J (= R P_J)
      Tile<S, DP> t;
      t.zero();
      mma(t, S, 1.f, x_s, LS, 1, u, LB, 1);
      t.each([&](int r, int c, float& x) { r_s[r * LB + c] -= x; });
    }
  }

  // o_i = acc_i / l_i, lse_i = m_i + log l_i
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int r = ty + 16 * i;
    if (r >= nv) continue;
    const int64_t row = d.in_row(b, a0 + r, h);
#pragma unroll
    for (int j = 0; j < TD; ++j) {
      const int c = tx + 16 * j;
      if (c < d.D) o[row * d.D + c] = acc.v[i][j] / l_row[i];
    }
    if (tx == 0) lse[row] = m_row[i] + logf(l_row[i]);
  }
}

}  // namespace

template <int S, int DP>
void launch_forward_scan(const Dims& d, const Inputs& in, const Scratch& sc, float* o, float* lse) {
  constexpr int fwd_bytes = forward_smem_floats<S, DP>() * int(sizeof(float));
  static_assert(fwd_bytes <= 232448, "forward shared memory");
  set_smem(path_fwd_scan_f32<S, DP>, fwd_bytes);
  path_fwd_scan_f32<S, DP><<<dim3(d.B * d.H, d.n_blocks), kThreads, fwd_bytes, stream()>>>(d, in, sc, o, lse);
  PB_LAUNCH_CHECK();
}

template void launch_forward_scan<64, 32>(const Dims&, const Inputs&, const Scratch&, float*, float*);
template void launch_forward_scan<64, 64>(const Dims&, const Inputs&, const Scratch&, float*, float*);
template void launch_forward_scan<32, 128>(const Dims&, const Inputs&, const Scratch&, float*, float*);

}  // namespace pb::cuda::path
