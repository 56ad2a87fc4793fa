// PaTH backward scan, fp32 (stage map in path_common.cuh). path_bwd_scan_f32: persistent CTAs,
// each taking the items blockIdx.x, blockIdx.x + gridDim.x, … (heaviest first). An item is (b·h, a
// group of QB consecutive query blocks I_s = base + s, s < QB), stacked as SQ = QB·S query rows: row
// r is position a0 + r, a0 = base·S (QB = 2 for S = 32, so every key-block product and atomic below
// covers 64 query rows; slots with I_s < 0, the bottom group of an odd block count, hold no rows).
// Query block I_s takes part in key block J only while J < I_s, i.e. rows r ≥ r0(J) =
// max(0, (J − base + 1)·S); the rows below r0 are zero in R_J, zero in P, and their γ is frozen (it
// already is their dQ̃).
// Per item, first the forward scan from the top block stores the queries at every key block's
// right edge, R_J = Q̃_I P_{I−1} ⋯ P_{J+1} (J = I_top − 1 … 0, slot s joining with Q̃_{I_s} at
// J = I_s − 1), in the CTA's own slice of sc.r_states (n_blocks · SQ × DP: linear in T, one
// slice per resident CTA). Then for J = 0 … I_top − 1, with X_J = R_J W_Jᵀ and γ = dR_{J−1}:
//   P = exp(scale·z + G_i − G_j − lse_i), dS = P ⊙ (dout V_Jᵀ − δ), dZ = scale·dS
//   dV_J += Pᵀ dout, dK̃_J += dZᵀ R_J, dU_J −= X_Jᵀ γ, Y = γ U_Jᵀ, dW_J −= Yᵀ R_J (J ≥ 1)
//   γ ← γ + dZ K̃_J − Y W_J (rows ≥ r0);   at the end dQ̃ = γ
#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/path_common.cuh"
#include "kernels/cuda/path_tiles.cuh"
#include "core/cuda/runtime.h"

namespace pb::cuda::path {
namespace {

template <int S, int DP>
constexpr int scan_smem_floats() {
  constexpr int SQ = kScanQB<S> * S;
  return 2 * SQ + 2 * S + 2 * SQ + S + 3 * SQ * (DP + 1) + 4 * S * (DP + 1) + 2 * SQ * (S + 1) +
         SQ * (2 * S + 1);
}

template <int S, int DP>
__global__ void __launch_bounds__(kThreads)
    path_bwd_scan_f32(Dims d, Inputs in, Scratch sc, const float* dout, const float* o, const float* lse) {
  constexpr int QB = kScanQB<S>, SQ = QB * S;
  constexpr int LB = DP + 1, LS = S + 1, LW = 2 * S + 1, TM = SQ / 16, TS = S / 16;
  static_assert(SQ <= kThreads, "a thread per query row");
  extern __shared__ __align__(16) float smem[];
  double* gq = reinterpret_cast<double*>(smem);  // (SQ)
  double* gk = gq + SQ;                          // (S)
  float* lse_s = smem + 2 * SQ + 2 * S;          // (SQ)
  float* delta_s = lse_s + SQ;                   // (SQ)
  float* col_sum = delta_s + SQ;                 // (S): Σ_i dS_ij of this step
  float* r_s = col_sum + S;                      // (SQ, DP): R_J
  float* gam = r_s + SQ * LB;                    // (SQ, DP): γ
  float* d_o = gam + SQ * LB;                    // (SQ, DP): dout
  float* kw = d_o + SQ * LB;                     // (2S, DP): [K̃_J; W_J]
  float* u = kw + 2 * S * LB;                    // (S, DP): U_J
  float* v = u + S * LB;                         // (S, DP): V_J
  float* p_s = v + S * LB;                       // (SQ, S): P
  float* x_s = p_s + SQ * LS;                    // (SQ, S): X_J
  float* zy = x_s + SQ * LS;                     // (SQ, 2S): [dZ, −Y]
  float* states = sc.r_states + int64_t(blockIdx.x) * d.Tp * QB * DP;  // (n_blocks, SQ, DP): R_J

  const int tid = threadIdx.x, ty = tile_ty(), tx = tile_tx();
  const int64_t stride = int64_t(d.H) * d.D;
  const int n_bh = d.B * d.H, n_groups = (d.n_blocks + QB - 1) / QB;
  for (int item = blockIdx.x; item < n_bh * n_groups; item += gridDim.x) {
    const int bh = item % n_bh, b = bh / d.H, h = bh % d.H;
    const int base = d.n_blocks - QB * (1 + item / n_bh), I_top = base + QB - 1, a0 = base * S;
    // Rows of real positions: rv ≤ r < SQ; of positions below T: r < nv. With base < 0, a0 and
    // in_off are negative, and the rows below rv are never read.
    const int rv = max(0, -a0), nv = d.T - a0;
    const int64_t head = int64_t(bh) * d.Tp, in_off = d.in_row(b, a0, h) * d.D;

    __syncthreads();  // the previous item is done with shared memory and its states
    for (int e = tid; e < SQ * DP; e += kThreads) {  // R_{I_top−1}: Q̃_{I_top} in the top slot, zero below
      const int r = e / DP, c = e - r * DP;
      r_s[r * LB + c] = r >= (QB - 1) * S ? sc.q_hat[(head + a0 + r) * DP + c] : 0.f;
    }
    for (int e = tid; e < SQ * DP; e += kThreads) {  // dout, and o in gam (for δ); zero past T
      const int r = e / DP, c = e - r * DP;
      const bool ok = r >= rv && r < nv && c < d.D;
      d_o[r * LB + c] = ok ? dout[in_off + r * stride + c] : 0.f;
      gam[r * LB + c] = ok ? o[in_off + r * stride + c] : 0.f;
    }
    if (tid < SQ) {
      gq[tid] = tid >= rv ? sc.g[head + a0 + tid] : 0.0;
      lse_s[tid] = tid >= rv && tid < nv ? lse[d.in_row(b, a0 + tid, h)] : 0.f;
    }
    __syncthreads();
    for (int r = tid >> 5; r < SQ; r += kThreads / 32) {  // δ_i = dout_i·o_i, a warp per row
      float s = 0.f;
      for (int c = tid & 31; c < DP; c += 32) s += d_o[r * LB + c] * gam[r * LB + c];
      s = warp_sum(s);
      if ((tid & 31) == 0) {
        delta_s[r] = s;
        if (r >= rv) sc.delta[head + a0 + r] = s;
      }
    }
    // The forward scan: slot s = J + 1 − base joins with Q̃_{J+1}, states[J] = R_J, then
    // R_{J−1} = R_J − (R_J W_Jᵀ) U_J.
    for (int J = I_top - 1; J >= 0; --J) {
      const int s_join = J + 1 - base;        // uniform over the CTA
      if (s_join >= 0 && s_join < QB - 1) {  // the top slot was loaded above
        load_rows<S, DP>(r_s + s_join * S * LB, LB, sc.q_hat + (head + (J + 1) * S) * DP, DP, S, DP);
        __syncthreads();
      }
      for (int i = tid; i < SQ * DP; i += kThreads) states[int64_t(J) * SQ * DP + i] = r_s[(i / DP) * LB + i % DP];
      if (J == 0) break;
      load_rows<S, DP>(kw + S * LB, LB, in.w + d.in_row(b, J * S, h) * d.D, stride, S, d.D);
      load_rows<S, DP>(u, LB, sc.u + (head + J * S) * DP, DP, S, DP);
      __syncthreads();
      Tile<SQ, S> x;  // X = R W_Jᵀ
      x.zero();
      mma(x, DP, 1.f, r_s, LB, 1, kw + S * LB, 1, LB);
      x.each([&](int r, int c, float& val) { x_s[r * LS + c] = val; });
      __syncthreads();
      Tile<SQ, DP> t;  // R ← R − X U_J
      t.zero();
      mma(t, S, 1.f, x_s, LS, 1, u, LB, 1);
      t.each([&](int r, int c, float& val) { r_s[r * LB + c] -= val; });
      __syncthreads();
    }
    __syncthreads();  // δ is done with o in gam; the states are written
    for (int i = tid; i < SQ * LB; i += kThreads) gam[i] = 0.f;

    float row_sum[TM] = {};  // Σ_j dS_ij over the off-diagonal blocks
    for (int J = 0; J < I_top; ++J) {
      const int j0 = J * S, r0 = max(0, (J - base + 1) * S);  // rows ≥ r0 see key block J
      load_rows<SQ, DP>(r_s, LB, states + int64_t(J) * SQ * DP, DP, SQ, DP);
      load_rows<S, DP>(kw, LB, sc.k_hat + (head + j0) * DP, DP, S, DP);
      load_rows<S, DP>(kw + S * LB, LB, in.w + d.in_row(b, j0, h) * d.D, stride, S, d.D);
      load_rows<S, DP>(u, LB, sc.u + (head + j0) * DP, DP, S, DP);
      load_rows<S, DP>(v, LB, in.v + d.in_row(b, j0, h) * d.D, stride, S, d.D);
      if (tid < S) {
        gk[tid] = sc.g[head + j0 + tid];
        col_sum[tid] = 0.f;
      }
      __syncthreads();
      {
        Tile<SQ, 2 * S> zx;  // [Z, X] = R_J [K̃_J; W_J]ᵀ
        zx.zero();
        mma(zx, DP, 1.f, r_s, LB, 1, kw, 1, LB);
        Tile<SQ, S> dp;  // dP = dout V_Jᵀ
        dp.zero();
        mma(dp, DP, 1.f, d_o, LB, 1, v, 1, LB);
        float cs[TS] = {};
#pragma unroll
        for (int i = 0; i < TM; ++i) {
          const int r = ty + 16 * i;
#pragma unroll
          for (int j = 0; j < TS; ++j) {
            const int c = tx + 16 * j;
            const float p = r >= r0 && r < nv
                                ? expf(d.scale * zx.v[i][j] + float(gq[r] - gk[c]) - lse_s[r])
                                : 0.f;
            const float ds = p * (dp.v[i][j] - delta_s[r]);
            p_s[r * LS + c] = p;
            zy[r * LW + c] = d.scale * ds;
            row_sum[i] += ds;
            cs[j] += ds;
          }
#pragma unroll
          for (int j = TS; j < 2 * TS; ++j) x_s[r * LS + tx + 16 * j - S] = zx.v[i][j];
        }
#pragma unroll
        for (int j = 0; j < TS; ++j) atomicAdd(&col_sum[tx + 16 * j], cs[j]);
      }
      __syncthreads();
      const int64_t key_row = head + j0;  // scratch row of the key block
      {
        Tile<S, DP> t;  // dV_J += Pᵀ dout
        t.zero();
        mma(t, SQ, 1.f, p_s, 1, LS, d_o, LB, 1);
        t.each([&](int r, int c, float& val) { atomicAdd(&sc.dv[(key_row + r) * DP + c], val); });
        t.zero();  // dK̃_J += dZᵀ R_J
        mma(t, SQ, 1.f, zy, 1, LW, r_s, LB, 1);
        t.each([&](int r, int c, float& val) { atomicAdd(&sc.dk_hat[(key_row + r) * DP + c], val); });
        if (J > 0) {
          t.zero();  // dU_J −= X_Jᵀ γ (X_J is zero in the rows < r0)
          mma(t, SQ, -1.f, x_s, 1, LS, gam, LB, 1);
          t.each([&](int r, int c, float& val) { atomicAdd(&sc.du[(key_row + r) * DP + c], val); });
          Tile<SQ, S> y;  // −Y = −γ U_Jᵀ
          y.zero();
          mma(y, DP, -1.f, gam, LB, 1, u, 1, LB);
          y.each([&](int r, int c, float& val) { zy[r * LW + S + c] = val; });
        }
        if (tid < S) atomicAdd(&sc.dg[key_row + tid], -col_sum[tid]);  // dG_j −= Σ_i dS_ij
      }
      __syncthreads();
      {
        if (J > 0) {  // dW_J += (−Y)ᵀ R_J (R_J is zero in the rows < r0)
          Tile<S, DP> t;
          t.zero();
          mma(t, SQ, 1.f, zy + S, 1, LW, r_s, LB, 1);
          t.each([&](int r, int c, float& val) { atomicAdd(&sc.dw_scan[(key_row + r) * DP + c], val); });
        }
        Tile<SQ, DP> t;  // γ ← γ + [dZ, −Y] [K̃_J; W_J] in the rows ≥ r0
        t.zero();
        mma(t, J > 0 ? 2 * S : S, 1.f, zy, LW, 1, kw, LB, 1);
        t.each([&](int r, int c, float& val) {
          if (r >= r0) gam[r * LB + c] += val;
        });
      }
      __syncthreads();
    }

    for (int i = tid; i < SQ * DP; i += kThreads) {
      const int r = i / DP;
      if (r >= rv) sc.dq_hat[(head + a0) * DP + i] = gam[r * LB + i % DP];
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
      const int r = ty + 16 * i;
      const float s = half_warp_sum(row_sum[i]);
      if (tx == 0 && r >= rv && base + r / S > 0) atomicAdd(&sc.dg[head + a0 + r], s);  // dG_i += Σ_j dS_ij
    }
  }
}

}  // namespace

// The persistent scan's grid: the CTAs resident on the whole current device at once, after
// opting its shared memory in.
template <int S, int DP>
int scan_resident_ctas() {
  constexpr int bytes = scan_smem_floats<S, DP>() * int(sizeof(float));
  static_assert(bytes <= 232448, "scan shared memory");
  set_smem(path_bwd_scan_f32<S, DP>, bytes);
  int device = 0, sms = 0, per_sm = 0;
  PB_CUDA_CHECK(cudaGetDevice(&device));
  PB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  PB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, path_bwd_scan_f32<S, DP>, kThreads, bytes));
  return sms * std::max(per_sm, 1);
}

template <int S, int DP>
void launch_backward_scan(const Dims& d, const Inputs& in, const Scratch& sc, const float* dout,
                          const float* o, const float* lse, int ctas) {
  constexpr int scan_bytes = scan_smem_floats<S, DP>() * int(sizeof(float));
  path_bwd_scan_f32<S, DP><<<ctas, kThreads, scan_bytes, stream()>>>(d, in, sc, dout, o, lse);
  PB_LAUNCH_CHECK();
}

template int scan_resident_ctas<64, 32>();
template int scan_resident_ctas<64, 64>();
template int scan_resident_ctas<32, 128>();
template void launch_backward_scan<64, 32>(const Dims&, const Inputs&, const Scratch&, const float*,
                                           const float*, const float*, int);
template void launch_backward_scan<64, 64>(const Dims&, const Inputs&, const Scratch&, const float*,
                                           const float*, const float*, int);
template void launch_backward_scan<32, 128>(const Dims&, const Inputs&, const Scratch&, const float*,
                                            const float*, const float*, int);

}  // namespace pb::cuda::path
