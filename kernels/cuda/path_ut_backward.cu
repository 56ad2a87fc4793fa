// PaTH UT backward, the per-block kernels after the backward scan (fp32 and TF32 tensor cores;
// stage map in path_common.cuh):
//   path_bwd_dc_tf32      C form only, per (block c, b·h): dU = W dC, dW_scan = U dCᵀ
//   path_bwd_ut_f32       per (block c, b·h): the diagonal block's softmax backward, then the UT
//                         transform in reverse, writing dq, dk, dv, dw, dβ and the block's dG
//   path_bwd_ut_tf32      the same on TF32 tensor cores, reading bf16 q, k, v, dout and writing bf16
//                         dq, dk, dv (the bf16 path)
//   path_gate_suffix_f64  per b·h: dlog_f_t = Σ_{i≥t} dG_i (double)
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/path_common.cuh"
#include "kernels/cuda/path_tiles.cuh"
#include "core/cuda/runtime.h"

namespace pb::cuda::path {
namespace {

// fp32 results to global fp32 or bf16 (rounded to nearest).
__device__ __forceinline__ void store(float* p, float x) { *p = x; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

// UT backward: per (block c, b·h). The diagonal block's softmax backward, then the README's
//   dQW = tril_incl(−dS Mᵀ − dQ̃ Uᵀ)          dU_tot = dU − QWᵀ dQ̃
//   dM  = −QWᵀ dS − W dK̃ᵀ                    dE = strictLower(Tmᵀ dM)
//   dTm = dU_tot Wbᵀ + dM Eᵀ                  dA = strictLower(−Tmᵀ dTm Tmᵀ)
//   dWb = Tmᵀ dU_tot + dE K + dA W
//   dq = dQ̃ + dS K + dQW W,  dk = dK̃ + dSᵀ Q + dEᵀ Wb
//   dw = dW_scan + dQWᵀ Q − M dK̃ + dAᵀ Wb + diag(β) dWb,  dβ_r = dWb_r · w_r
// with dS the block's (scaled) diagonal dZ and Wb = diag(β) W (never formed: β scales in place).

template <int S, int DP, bool TC>
constexpr int ut_backward_smem_floats() {
  return 2 * S + 5 * S + 6 * S * (DP + kPad<TC>) + S * (S + 4) + 6 * S * (S + kPad<TC>);
}

template <int S, int DP, bool TC>
__device__ __forceinline__ void ut_backward(const Dims& d, const InputsOf<TC>& in, const Scratch& sc,
                                            const Elem<TC>* dout, const float* lse, Elem<TC>* dq,
                                            Elem<TC>* dk, Elem<TC>* dv, float* dw, float* dbeta) {
  constexpr int LB = DP + kPad<TC>, LS = S + kPad<TC>;
  constexpr int NT = kThreads, NW = NT / 32;
  // k loops unrolled fully at D = 128 and by 2 at D ≤ 64, the faster at each (kernels/dev notes).
  constexpr int KU = DP > 64 ? 16 : 2;
  using TileSS = TileOf<S, S, TC, NW, KU>;
  using TileSD = TileOf<S, DP, TC, NW, KU>;
  extern __shared__ __align__(16) float smem[];
  double* gq = reinterpret_cast<double*>(smem);  // (S)
  float* beta = smem + 2 * S;                    // (S)
  float* lse_s = beta + S;                       // (S)
  float* delta_s = lse_s + S;                    // (S)
  float* row_sum = delta_s + S;                  // (S): Σ_j dS_ij, then dβ
  float* col_sum = row_sum + S;                  // (S): Σ_i dS_ij
  float* q = col_sum + S;                        // (S, DP) each, stride LB
  float* k = q + S * LB;
  float* w = k + S * LB;
  float* u = w + S * LB;    // U, then dU_tot
  float* b1 = u + S * LB;   // V, then dQ̃
  float* b2 = b1 + S * LB;  // dout, then dK̃
  float* s0 = b2 + S * LB;  // (S, S) each, stride LS: A (stride S + 4), then P, then dQW
  float* s1 = s0 + S * (S + 4);  // E, then Tmᵀ dTm
  float* s2 = s1 + S * LS;  // QW, then dE
  float* s3 = s2 + S * LS;  // S_loc, then dS (scaled)
  float* s4 = s3 + S * LS;  // Tm
  float* s5 = s4 + S * LS;  // M
  float* s6 = s5 + S * LS;  // dM, then dTm, then dA
  // Under TC every array here except A and S_loc (and the (S) vectors) holds TF32 operands.

  static_assert((7 * S + 6 * S * LB) % 4 == 0, "A is 16-byte aligned");
  const int c = blockIdx.x, bh = blockIdx.y, b = bh / d.H, h = bh % d.H;
  const int a0 = c * S, nv = min(S, d.T - a0);
  const int tid = threadIdx.x;
  const int64_t head_row = int64_t(bh) * d.Tp + a0, stride = int64_t(d.H) * d.D;
  const int64_t in_off = d.in_row(b, a0, h) * d.D;

  {
    RowsIn<S, DP, NT, TC, Elem<TC>> q_in, k_in, v_in, do_in;
    RowsIn<S, DP, NT, TC, float> w_in;
    q_in.fetch(in.q + in_off, stride, nv, d.D);
    k_in.fetch(in.k + in_off, stride, nv, d.D);
    w_in.fetch(in.w + in_off, stride, nv, d.D);
    v_in.fetch(in.v + in_off, stride, nv, d.D);
    do_in.fetch(dout + in_off, stride, nv, d.D);
    q_in.put(q, LB);
    k_in.put(k, LB);
    w_in.put(w, LB);
    v_in.put(b1, LB);
    do_in.put(b2, LB);
  }
  if (tid < S) {
    const bool ok = tid < nv;
    gq[tid] = sc.g[head_row + tid];
    beta[tid] = ok ? in.beta[d.in_row(b, a0 + tid, h)] : 0.f;
    lse_s[tid] = ok ? lse[d.in_row(b, a0 + tid, h)] : 0.f;
    delta_s[tid] = sc.delta[head_row + tid];
    row_sum[tid] = 0.f;
    col_sum[tid] = 0.f;
  }
  __syncthreads();
  {  // QW = tril_incl(Q Wᵀ), and tril_incl(Q Kᵀ) (fp32, not an operand: P is formed from it)
    TileSS t;
    t.zero();
    mma(t, DP, 1.f, q, LB, 1, w, 1, LB);
    t.each([&](int r, int cc, float& x) { s2[r * LS + cc] = cc <= r ? tf32_operand<TC>(x) : 0.f; });
    t.zero();
    mma(t, DP, 1.f, q, LB, 1, k, 1, LB);
    t.each([&](int r, int cc, float& x) { s3[r * LS + cc] = cc <= r ? x : 0.f; });
  }
  ut_solve<S, DP, TC, true, NT>(k, w, beta, s0, s1, s4, u, s5);  // A, E; Tm, U, M
  // S_loc = tril_incl(Q Kᵀ) − QW M (QW M is strictly lower). Each thread updates, then reads, the
  // elements of its own tile (TileSS has one layout), so no barrier comes between.
  {
    TileSS t;
    t.zero();
    mma(t, S, -1.f, s2, LS, 1, s5, LS, 1);
    t.each([&](int r, int cc, float& x) { s3[r * LS + cc] += x; });
  }
  {  // P = exp(scale·S_loc + G_i − G_j − lse_i) (j ≤ i < T), dS = P ⊙ (dout Vᵀ − δ)
    TileSS dp;
    dp.zero();
    mma(dp, DP, 1.f, b2, LB, 1, b1, 1, LB);
    dp.each([&](int r, int cc, float& x) {
      const float p = (cc <= r && r < nv)
                          ? expf(d.scale * s3[r * LS + cc] + float(gq[r] - gq[cc]) - lse_s[r])
                          : 0.f;
      x = p * (x - delta_s[r]);  // dS
      s0[r * LS + cc] = tf32_operand<TC>(p);
      s3[r * LS + cc] = tf32_operand<TC>(d.scale * x);
    });
    dp.add_row_sums(row_sum);
    dp.add_col_sums(col_sum);
  }
  __syncthreads();
  RowsIn<S, DP, NT, TC, float> dq_in, dk_in;  // dQ̃, dK̃ (into b1, b2 once V and dout are read)
  dq_in.fetch(sc.dq_hat + head_row * DP, DP, S, DP);
  dk_in.fetch(sc.dk_hat + head_row * DP, DP, S, DP);
  {  // dv = dV (off-diagonal, loaded while the product runs) + Pᵀ dout;
     // dG_i += Σ_j dS_ij − Σ_i' dS_i'i (diagonal block)
    TileSD t, dv_off;
    dv_off.each([&](int r, int cc, float& x) { x = sc.dv[(head_row + r) * DP + cc]; });
    t.zero();
    mma(t, S, 1.f, s0, 1, LS, b2, LB, 1);
    t.add(dv_off);
    t.each([&](int r, int cc, float& x) {
      if (r < nv && cc < d.D) store(&dv[(in_off + int64_t(r) * stride) + cc], x);
    });
    if (tid < S) {
      sc.dg[head_row + tid] += row_sum[tid] - col_sum[tid];
      row_sum[tid] = 0.f;  // for dβ
    }
  }
  __syncthreads();
  dq_in.put(b1, LB);
  dk_in.put(b2, LB);
  __syncthreads();
  {
    TileSD du;  // dU_tot = dU − QWᵀ dQ̃ (dU loaded first, while dQW and dM are formed)
    du.each([&](int r, int cc, float& x) { x = sc.du[(head_row + r) * DP + cc]; });
    TileSS t;  // dQW = tril_incl(−dS Mᵀ − dQ̃ Uᵀ)
    t.zero();
    mma(t, S, -1.f, s3, LS, 1, s5, 1, LS);
    mma(t, DP, -1.f, b1, LB, 1, u, 1, LB);
    t.each([&](int r, int cc, float& x) { s0[r * LS + cc] = cc <= r ? tf32_operand<TC>(x) : 0.f; });
    t.zero();  // dM = −QWᵀ dS − W dK̃ᵀ
    mma(t, S, -1.f, s2, 1, LS, s3, LS, 1);
    mma(t, DP, -1.f, w, LB, 1, b2, 1, LB);
    t.each([&](int r, int cc, float& x) { s6[r * LS + cc] = tf32_operand<TC>(x); });
    mma(du, S, -1.f, s2, 1, LS, b1, LB, 1);
    __syncthreads();  // U was read above
    du.each([&](int r, int cc, float& x) { u[r * LB + cc] = tf32_operand<TC>(x); });
  }
  __syncthreads();
  {
    TileSS t;  // dE = strictLower(Tmᵀ dM)
    t.zero();
    mma(t, S, 1.f, s4, 1, LS, s6, LS, 1);
    t.each([&](int r, int cc, float& x) { s2[r * LS + cc] = cc < r ? tf32_operand<TC>(x) : 0.f; });
    t.zero();  // dTm = (dU_tot Wᵀ) diag(β) + dM Eᵀ
    mma(t, DP, 1.f, u, LB, 1, w, 1, LB);
    t.each([&](int, int cc, float& x) { x *= beta[cc]; });
    mma(t, S, 1.f, s6, LS, 1, s1, 1, LS);
    __syncthreads();  // dM and E were read above
    t.each([&](int r, int cc, float& x) { s6[r * LS + cc] = tf32_operand<TC>(x); });
    __syncthreads();
    t.zero();  // Tmᵀ dTm
    mma(t, S, 1.f, s4, 1, LS, s6, LS, 1);
    t.each([&](int r, int cc, float& x) { s1[r * LS + cc] = tf32_operand<TC>(x); });
    __syncthreads();
    t.zero();  // dA = strictLower(−(Tmᵀ dTm) Tmᵀ)
    mma(t, S, -1.f, s1, LS, 1, s4, 1, LS);
    t.each([&](int r, int cc, float& x) { s6[r * LS + cc] = cc < r ? tf32_operand<TC>(x) : 0.f; });
  }
  __syncthreads();
  {
    // Loaded first, while dWb is formed: dW_scan, and dQ̃, dK̃ in fp32 (b1, b2 hold them as TF32
    // operands), the starts of dw, dq, dk.
    TileSD dw_scan, t_dq, t_dk;
    dw_scan.each([&](int r, int cc, float& x) { x = sc.dw_scan[(head_row + r) * DP + cc]; });
    t_dq.each([&](int r, int cc, float& x) { x = sc.dq_hat[(head_row + r) * DP + cc]; });
    t_dk.each([&](int r, int cc, float& x) { x = sc.dk_hat[(head_row + r) * DP + cc]; });
    TileSD dwb;  // dWb = Tmᵀ dU_tot + dE K + dA W
    dwb.zero();
    mma(dwb, S, 1.f, s4, 1, LS, u, LB, 1);
    mma(dwb, S, 1.f, s2, LS, 1, k, LB, 1);
    mma(dwb, S, 1.f, s6, LS, 1, w, LB, 1);
    TileSD t = dwb;  // dβ_r = dWb_r · w_r
    t.each([&](int r, int cc, float& x) { x *= w[r * LB + cc]; });
    t.add_row_sums(row_sum);
    t = dwb;  // dw = dW_scan + dQWᵀ Q − M dK̃ + dAᵀ diag(β) W + diag(β) dWb
    t.each([&](int r, int, float& x) { x *= beta[r]; });
    mma(t, S, 1.f, s0, 1, LS, q, LB, 1);
    mma(t, S, -1.f, s5, LS, 1, b2, LB, 1);
    mma<true>(t, S, 1.f, s6, 1, LS, w, LB, 1, beta);
    t.add(dw_scan);
    t.each([&](int r, int cc, float& x) {
      if (r < nv && cc < d.D) dw[in_off + r * stride + cc] = x;
    });
    mma(t_dq, S, 1.f, s3, LS, 1, k, LB, 1);  // dq = dQ̃ + dS K + dQW W
    mma(t_dq, S, 1.f, s0, LS, 1, w, LB, 1);
    t_dq.each([&](int r, int cc, float& x) {
      if (r < nv && cc < d.D) store(&dq[in_off + r * stride + cc], x);
    });
    mma(t_dk, S, 1.f, s3, 1, LS, q, LB, 1);  // dk = dK̃ + dSᵀ Q + dEᵀ diag(β) W
    mma<true>(t_dk, S, 1.f, s2, 1, LS, w, LB, 1, beta);
    t_dk.each([&](int r, int cc, float& x) {
      if (r < nv && cc < d.D) store(&dk[in_off + r * stride + cc], x);
    });
  }
  __syncthreads();  // dβ's row sums are complete
  if (tid < nv) dbeta[d.in_row(b, a0 + tid, h)] = row_sum[tid];
}

// The kernels, one per arithmetic: 256 threads (8 warps; one CTA per SM by shared memory at <64, 64>).
template <int S, int DP>
__global__ void __launch_bounds__(kThreads)
    path_bwd_ut_f32(Dims d, Inputs in, Scratch sc, const float* dout, const float* lse, float* dq, float* dk,
                    float* dv, float* dw, float* dbeta) {
  ut_backward<S, DP, false>(d, in, sc, dout, lse, dq, dk, dv, dw, dbeta);
}
template <int S, int DP>
__global__ void __launch_bounds__(kThreads)
    path_bwd_ut_tf32(Dims d, InputsOf<true> in, Scratch sc, const __nv_bfloat16* dout, const float* lse,
                     __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, float* dw, float* dbeta) {
  ut_backward<S, DP, true>(d, in, sc, dout, lse, dq, dk, dv, dw, dbeta);
}
template <int S, int DP, bool TC>
constexpr auto ut_backward_kernel() {
  if constexpr (TC) return path_bwd_ut_tf32<S, DP>;
  else return path_bwd_ut_f32<S, DP>;
}

// C form (kCForm): per (block c, b·h), the scan's dC (C = Wᵀ U) as dU = W dC and dW_scan = U dCᵀ,
// written over the (untouched) accumulators du, dw_scan that the UT backward reads.
template <int S, int DP>
constexpr int c_backward_smem_floats() {
  return 2 * S * (DP + kPad<true>) + DP * (DP + kPad<true>);
}

template <int S, int DP>
__global__ void __launch_bounds__(kThreads) path_bwd_dc_tf32(Dims d, InputsOf<true> in, Scratch sc) {
  constexpr int LB = DP + kPad<true>;
  extern __shared__ __align__(16) float smem[];
  float* w = smem;        // (S, DP): W of the block
  float* u = w + S * LB;  // (S, DP): U
  float* dc = u + S * LB; // (DP, DP): dC
  const int c = blockIdx.x, bh = blockIdx.y, b = bh / d.H, h = bh % d.H;
  const int a0 = c * S, nv = min(S, d.T - a0);
  const int64_t head_row = int64_t(bh) * d.Tp + a0;
  RowsIn<S, DP, kThreads, true, float> w_in, u_in;
  RowsIn<DP, DP, kThreads, true, float> dc_in;
  w_in.fetch(in.w + d.in_row(b, a0, h) * d.D, int64_t(d.H) * d.D, nv, d.D);
  u_in.fetch(sc.u + head_row * DP, DP, S, DP);
  dc_in.fetch(sc.dc + (int64_t(bh) * d.n_blocks + c) * DP * DP, DP, DP, DP);
  w_in.put(w, LB);
  u_in.put(u, LB);
  dc_in.put(dc, LB);
  __syncthreads();
  TcTile<S, DP> t;
  t.zero();
  mma(t, DP, 1.f, w, LB, 1, dc, LB, 1);  // dU = W dC
  t.each([&](int r, int col, float& x) { sc.du[(head_row + r) * DP + col] = x; });
  t.zero();
  mma(t, DP, 1.f, u, LB, 1, dc, 1, LB);  // dW = U dCᵀ
  t.each([&](int r, int col, float& x) { sc.dw_scan[(head_row + r) * DP + col] = x; });
}

// dlog_f_t = Σ_{i≥t} dG_i per b·h (double): the prefix sums of dG read from the end, one CTA each.
__global__ void __launch_bounds__(kThreads) path_gate_suffix_f64(Dims d, const float* dg, float* dlog_f) {
  const int bh = blockIdx.x, b = bh / d.H, h = bh % d.H, last = d.T - 1;
  const float* gh = dg + int64_t(bh) * d.Tp;
  cta_prefix_sums(
      d.T, [&](int i) { return double(gh[last - i]); },
      [&](int i, double s) { dlog_f[d.in_row(b, last - i, h)] = float(s); });
}

}  // namespace

template <int S, int DP, bool TC>
void launch_ut_backward(const Dims& d, const InputsOf<TC>& in, const Scratch& sc, Elem<TC>* dq, Elem<TC>* dk,
                        Elem<TC>* dv, float* dw, float* dbeta, float* dlog_f, const Elem<TC>* dout,
                        const float* lse) {
  if constexpr (kCForm<S, DP, TC>) {
    constexpr int c_bytes = c_backward_smem_floats<S, DP>() * int(sizeof(float));
    set_smem(path_bwd_dc_tf32<S, DP>, c_bytes);
    path_bwd_dc_tf32<S, DP><<<dim3(d.n_blocks, d.B * d.H), kThreads, c_bytes, stream()>>>(d, in, sc);
    PB_LAUNCH_CHECK();
  }
  constexpr int ut_bytes = ut_backward_smem_floats<S, DP, TC>() * int(sizeof(float));
  static_assert(ut_bytes <= 232448, "UT backward shared memory");
  constexpr auto kernel = ut_backward_kernel<S, DP, TC>();
  set_smem(kernel, ut_bytes);
  kernel<<<dim3(d.n_blocks, d.B * d.H), kThreads, ut_bytes, stream()>>>(d, in, sc, dout, lse, dq, dk, dv, dw,
                                                                        dbeta);
  PB_LAUNCH_CHECK();

  if (dlog_f) {
    path_gate_suffix_f64<<<d.B * d.H, kThreads, 0, stream()>>>(d, sc.dg, dlog_f);
    PB_LAUNCH_CHECK();
  }
}

template void launch_ut_backward<64, 32, false>(const Dims&, const Inputs&, const Scratch&, float*, float*,
                                                float*, float*, float*, float*, const float*, const float*);
template void launch_ut_backward<64, 64, false>(const Dims&, const Inputs&, const Scratch&, float*, float*,
                                                float*, float*, float*, float*, const float*, const float*);
template void launch_ut_backward<32, 128, false>(const Dims&, const Inputs&, const Scratch&, float*, float*,
                                                 float*, float*, float*, float*, const float*, const float*);
template void launch_ut_backward<64, 32, true>(const Dims&, const InputsOf<true>&, const Scratch&,
                                               __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, float*, float*,
                                               float*, const __nv_bfloat16*, const float*);
template void launch_ut_backward<64, 64, true>(const Dims&, const InputsOf<true>&, const Scratch&,
                                               __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, float*, float*,
                                               float*, const __nv_bfloat16*, const float*);
template void launch_ut_backward<32, 128, true>(const Dims&, const InputsOf<true>&, const Scratch&,
                                                __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, float*, float*,
                                                float*, const __nv_bfloat16*, const float*);

}  // namespace pb::cuda::path
