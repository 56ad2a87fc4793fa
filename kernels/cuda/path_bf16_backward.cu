// PaTH backward scan on bf16 tensor cores (stage map in path_bf16.cuh). path_bwd_scan_bf16: the
// fp32 scan (path_backward.cu) on tensor cores, filling the same accumulators (path::Accumulators)
// for the UT backward. Persistent CTAs (as many as are resident) take the items (b·h, 128 query
// rows) from an atomic counter, in groups of heads, heaviest first inside a group; per item and
// warp (16 rows of query block I):
//   pre-scan   J = top−1 … 0: R_J (the queries at key block J's right edge; R = Q̃_I at J = I−1) is
//              stored as bf16 A fragments in the CTA's own slice of scratch (linear in T), then
//              R ← R − R C_J (C form) or R ← R − (R W_Jᵀ) U_J (f16, exactly as the forward).
//   reverse    J = 0 … top−1, γ = dR_{J−1} in fp32 registers (0 at J = 0), all products bf16:
//              z = R_J K̃_Jᵀ, dP = dout V_Jᵀ (and X = R_J W_Jᵀ outside the C form)
//              P = exp(scale·z + G_i − G_j − lse_i), dS = P ⊙ (dP − δ), dZ = scale·dS
//              C form: γ ← γ − γ C_Jᵀ + dZ K̃_J;  else Y = γ U_Jᵀ, γ ← γ + dZ K̃_J − Y W_J
//              and, for the whole CTA (keys × rows products from shared memory, float atomics):
//              dV_J += Pᵀ dout, dK̃_J += dZᵀ R_J, and dC_J −= R_Jᵀ γ_old (C form, D × D) or
//              dU_J −= Xᵀ γ_old, dW_J −= Yᵀ R_J
//   end        dQ̃ = γ; with a gate dG_i += Σ_j dS_ij (rows), dG_j −= Σ_i dS_ij (every step, columns).
// Warps whose block I ≤ J sit a step out with zero rows in the shared products.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/attention_bf16.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/path_attention.cuh"
#include "kernels/cuda/path_bf16.cuh"
#include "core/cuda/runtime.h"

namespace pb::cuda::path {
namespace {

using namespace mma;

template <int S, int D>
struct BwdLayout {
  static constexpr int kRows = 16 * kBwdWarps;
  static constexpr int LD = D + 8, LK = S + 8;  // halves per row: (·, D) and (·, S) tiles
  static constexpr int kTile = S * LD;          // one (S, D) tile
  static constexpr int kMove = kC<S, D> ? D * LD : 2 * kTile;  // C_J, or W_J and U_J (pre-scan: f16)
  static constexpr int kStage = (2 * kTile + kMove) * 2 + S * 8;  // K̃, V, the move tiles, G
  static constexpr int kRowsD = kRows * LD, kRowsK = kRows * LK;
  static constexpr int kRowsS = kC<S, D> ? 2 : 4;  // (kRows, S) tiles: P, dZ (and X, −Y)
  static constexpr int kSet = 2 * kRowsD + kRowsS * kRowsK;  // halves of a row-buffer set (R_J, γ, P, …)
  static constexpr int bytes(int sets) {  // stages, dout, `sets` row-buffer sets, G, lse, δ, column sums
    return 2 * kStage + (kRowsD + sets * kSet) * 2 + kRows * 16 + sets * S * 4;
  }
  static constexpr int NB = bytes(2) <= 232448 - 64 ? 2 : 1;  // two sets where they fit (D ≤ 64)
  static constexpr int kBytes = bytes(NB);
};

struct BwdArgs {
  int B, T, H, n_blocks, Tp, n_tiles;
  float scale, scale_log2;
  const double* g;
  const float* q_hat;                       // (B·H, Tp, D)
  const __nv_bfloat16 *k_hat, *w_b, *u_b;   // (B·H, Tp, D); W, U not in the C form
  const __half *w_h, *u_h;                  // (B·H, Tp, D), not in the C form
  const __half* c_h;                        // (B·H, n_blocks, D, D), the C form: f16 for the pre-scan,
  const __nv_bfloat16* c_b;                 // bf16 for the reverse scan
  const __nv_bfloat16 *v, *o, *dout;        // (B, T, H, D)
  const float* lse;                         // (B, T, H)
  uint4* states;                            // (CTAs, n_blocks, kWarps, D / 16, 32): R_J fragments
  path::Accumulators acc;
  bool gated;
  int* next_item;  // zeroed before the launch: items taken so far
  int group;       // heads per item group (see the kernel)
};


template <int S, int D>
__global__ void __launch_bounds__(kBwdWarps * 32, 1) path_bwd_scan_bf16(BwdArgs a) {
  using L = BwdLayout<S, D>;
  constexpr int LD = L::LD, LK = L::LK, NS = S / 8, ND = D / 8, KD = D / 16;
  constexpr int kWarps = kBwdWarps, kRows = L::kRows, NT = kWarps * 32;
  extern __shared__ __align__(16) unsigned char smem[];
  // Two stages b = 0, 1 of K̃_J, V_J, W_J, U_J (S, D) or, in the C form, K̃_J, V_J, C_J (in w_s),
  // and G_J (S), double-buffered.
  constexpr bool cf = kC<S, D>;
  auto k_s = [&](int b) { return reinterpret_cast<uint16_t*>(smem + b * L::kStage); };
  auto v_s = [&](int b) { return k_s(b) + L::kTile; };
  auto w_s = [&](int b) { return k_s(b) + 2 * L::kTile; };
  auto u_s = [&](int b) { return k_s(b) + 3 * L::kTile; };
  auto g_s = [&](int b) { return reinterpret_cast<double*>(smem + b * L::kStage + (2 * L::kTile + L::kMove) * 2); };
  constexpr int NB = L::NB;
  uint16_t* do_s = reinterpret_cast<uint16_t*>(smem + 2 * L::kStage);  // (kRows, D): dout
  // Row-buffer set n < NB: R_J and γ before the step (kRows, D); P, dZ, and outside the C form
  // X, −Y (kRows, S).
  auto r_s = [&](int n) { return do_s + L::kRowsD + n * L::kSet; };
  auto gam_s = [&](int n) { return r_s(n) + L::kRowsD; };
  auto p_s = [&](int n) { return gam_s(n) + L::kRowsD; };
  auto z_s = [&](int n) { return p_s(n) + L::kRowsK; };
  auto x_s = [&](int n) { return z_s(n) + L::kRowsK; };
  auto y_s = [&](int n) { return x_s(n) + L::kRowsK; };
  double* gq = reinterpret_cast<double*>(do_s + L::kRowsD + NB * L::kSet);  // (kRows)
  float* lse_s = reinterpret_cast<float*>(gq + kRows);                   // (kRows), base 2
  float* delta_s = lse_s + kRows;                                        // (kRows)
  float* col_sum = delta_s + kRows;                                      // (NB, S): dS's column sums
  auto col_s = [&](int n) { return col_sum + n * S; };                   // of set n

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int64_t vstride = int64_t(a.H) * D;
  const path::Accumulators& acc = a.acc;
  uint4* states = a.states + int64_t(blockIdx.x) * a.n_blocks * kWarps * KD * 32;
  const int n_bh = a.B * a.H;

  __shared__ int item_s;
  for (;;) {
    __syncthreads();  // the previous item is done with shared memory (item_s included)
    if (threadIdx.x == 0) item_s = atomicAdd(a.next_item, 1);
    __syncthreads();
    const int item = item_s;
    if (item >= n_bh * a.n_tiles) break;
    // Item order: groups of `group` heads (all of their tiles), and inside a group heaviest tiles
    // first, head by head. The CTAs at work at any time then share few heads, so their K̃, V, C
    // reads and their accumulators' atomics hit L2.
    const int grp = item / (a.group * a.n_tiles), local = item - grp * a.group * a.n_tiles;
    const int gs = min(a.group, n_bh - grp * a.group);  // the last group may be smaller
    const int bh = grp * a.group + local % gs, b = bh / a.H, h = bh % a.H;
    const int a0 = (a.n_tiles - 1 - local / gs) * kRows;
    const int w0 = a0 + 16 * warp, I = w0 / S;
    const bool active = I < a.n_blocks;
    const int top = min((a0 + kRows - 1) / S, a.n_blocks - 1);
    const int64_t head = int64_t(bh) * a.Tp;
    const int64_t in0 = (int64_t(b) * a.T * a.H + h) * D;  // (B, T, H, D) offset of (b, 0, h)
    auto st = [&](int J, int kk) { return states + ((int64_t(J) * kWarps + warp) * KD + kk) * 32 + lane; };

    // dout rows (0 past T), lse (base 2), G; δ_i = dout_i·o_i (also for prep's UT backward).
    stage_rows<kRows, D, LD, NT>(do_s, a.dout + in0 + int64_t(a0) * vstride, vstride, min(kRows, a.T - a0));
    cp_async_commit();
    for (int r = threadIdx.x; r < kRows; r += NT) {
      const int t = a0 + r;
      lse_s[r] = t < a.T ? a.lse[(int64_t(b) * a.T + t) * a.H + h] * kLog2e : 0.f;
      gq[r] = a.gated && t < a.Tp ? a.g[head + t] : 0.0;
    }
    for (int r = 16 * warp; r < 16 * warp + 16; ++r) {
      const int t = a0 + r;
      float s = 0.f;
      if (t < a.T)
        for (int c = lane; c < D; c += 32) {
          const int64_t i = in0 + int64_t(t) * vstride + c;
          s += __bfloat162float(a.dout[i]) * __bfloat162float(a.o[i]);
        }
      s = warp_sum(s);
      if (lane == 0) {
        delta_s[r] = s;
        if (t < a.Tp) acc.delta[head + t] = s;
      }
    }

    // Pre-scan. Warps join at J = I − 1 with R = Q̃_I.
    float r[ND][4];
    auto load_q_hat = [&] {
#pragma unroll
      for (int j = 0; j < ND; ++j)
#pragma unroll
        for (int rho = 0; rho < 2; ++rho) {
          const float2 x = *reinterpret_cast<const float2*>(a.q_hat + (head + w0 + g + 8 * rho) * D + 8 * j + 2 * t4);
          r[j][2 * rho] = x.x, r[j][2 * rho + 1] = x.y;
        }
    };
    const int64_t c_head = int64_t(bh) * a.n_blocks * D * D;  // C_J, dC_J of this head: + J·D·D
    // W_J, U_J (f16), or C_J (f16) in the C form, of the pre-scan step J ≥ 1 into stage b.
    auto load_wu = [&](int b, int J) {
      const int64_t r0 = head + int64_t(J) * S;
      if constexpr (cf) {
        stage_rows<D, D, LD, NT>(w_s(b), a.c_h + c_head + int64_t(J) * D * D, D, D);
      } else {
        stage_rows<S, D, LD, NT>(w_s(b), a.w_h + r0 * D, D, S);
        stage_rows<S, D, LD, NT>(u_s(b), a.u_h + r0 * D, D, S);
      }
    };
    if (top - 1 >= 1) load_wu(0, top - 1);
    cp_async_commit();
    for (int J = top - 1; J >= 0; --J) {
      const bool part = active && J < I;
      const int b = (top - 1 - J) & 1;
      if (part && J == I - 1) load_q_hat();
      if (part)
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
          uint32_t f[4];
          c_to_a<Bf16>(f, r[2 * kk], r[2 * kk + 1]);
          *st(J, kk) = make_uint4(f[0], f[1], f[2], f[3]);
        }
      if (J == 0) break;
      __syncthreads();  // every warp is done with stage b ^ 1 (the previous step)
      if (J - 1 >= 1) load_wu(b ^ 1, J - 1);
      cp_async_commit();
      cp_async_wait<1>();  // step J's W, U (committed one step earlier) have landed
      __syncthreads();
      if (!part) continue;
      if constexpr (cf) {  // R ← R − R C_J, exactly as the forward scan
        uint32_t rh[KD][4];
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) c_to_a<F16>(rh[kk], r[2 * kk], r[2 * kk + 1], -1.f);
        move_c<D, LD>(r, rh, w_s(b));
        continue;
      }
      float x[NS][4] = {};
#pragma unroll
      for (int kk = 0; kk < KD; ++kk) {
        uint32_t rh[4];
        c_to_a<F16>(rh, r[2 * kk], r[2 * kk + 1]);
#pragma unroll
        for (int nn = 0; nn < S / 16; ++nn) {
          uint32_t bw[4];
          load_b_nk(bw, w_s(b), LD, 16 * nn, 16 * kk);
          mma_16816<F16>(x[2 * nn], rh, bw[0], bw[1]);
          mma_16816<F16>(x[2 * nn + 1], rh, bw[2], bw[3]);
        }
      }
#pragma unroll
      for (int kk = 0; kk < S / 16; ++kk) {
        uint32_t xa[4];
        c_to_a<F16>(xa, x[2 * kk], x[2 * kk + 1], -1.f);
#pragma unroll
        for (int nd = 0; nd < D / 16; ++nd) {
          uint32_t bu[4];
          load_b_kn(bu, u_s(b), LD, 16 * kk, 16 * nd);
          mma_16816<F16>(r[2 * nd], xa, bu[0], bu[1]);
          mma_16816<F16>(r[2 * nd + 1], xa, bu[2], bu[3]);
        }
      }
    }

    // Reverse scan. r now holds γ.
    cp_async_wait<0>();
    __syncthreads();  // dout is in shared memory
    uint32_t dof[KD][4];  // dout rows as A fragments
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) load_a(dof[kk], do_s, LD, 16 * warp, 16 * kk);
    float (&gam)[ND][4] = r;
#pragma unroll
    for (int j = 0; j < ND; ++j) gam[j][0] = gam[j][1] = gam[j][2] = gam[j][3] = 0.f;
    float row_sum[2] = {0.f, 0.f};
    // K̃_J, V_J, W_J, U_J (bf16) or K̃_J, V_J, C_J (bf16), and G_J of the reverse step J into stage b.
    auto load_block = [&](int b, int J) {
      const int64_t r0 = head + int64_t(J) * S;
      stage_rows<S, D, LD, NT>(k_s(b), a.k_hat + r0 * D, D, S);
      stage_rows<S, D, LD, NT>(v_s(b), a.v + in0 + int64_t(J) * S * vstride, vstride, S);
      if constexpr (cf) {
        stage_rows<D, D, LD, NT>(w_s(b), a.c_b + c_head + int64_t(J) * D * D, D, D);
      } else {
        stage_rows<S, D, LD, NT>(w_s(b), a.w_b + r0 * D, D, S);
        stage_rows<S, D, LD, NT>(u_s(b), a.u_b + r0 * D, D, S);
      }
      for (int e = threadIdx.x; e < S / 2; e += NT) cp_async16(g_s(b) + 2 * e, a.g + r0 + 2 * e);
    };
    // R_J as A fragments, from the pre-scan's states: loaded one step ahead, before the key-side
    // products of step J − 1, so that their latency is hidden.
    uint32_t rf[KD][4];
    auto load_rf = [&](int J) {
      if (active && J < I)
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
          const uint4 f = *st(J, kk);
          rf[kk][0] = f.x, rf[kk][1] = f.y, rf[kk][2] = f.z, rf[kk][3] = f.w;
        }
    };
    // Step J in two phases. query(J), per warp: the products with step J's stage, γ's update, and
    // R_J, γ_old, P, dZ (and X, −Y) into row-buffer set J % NB. key(J), for the whole CTA: the
    // key-side products from that set, the float atomics. With two sets (NB = 2) one barrier per
    // step suffices: warps run key(J) and then query(J + 1) without waiting for each other, and the
    // barrier after them also frees stage J & 1 for step J + 2's loads (issued one step ahead of use).
    auto query = [&](int J) {
      const bool part = active && J < I;
      const int b = J & 1, n = J % NB;
      const int row0 = 16 * warp + g;  // this thread's rows row0, row0 + 8 in the (kRows, ·) tiles
      auto put = [&](uint16_t* m, int ld, int c, float x0, float x1, int rho) {
        *reinterpret_cast<uint32_t*>(m + (row0 + 8 * rho) * ld + c) = pack2<Bf16>(x0, x1);
      };
      if (part) {
        float z[NS][4] = {}, x[cf ? 1 : NS][4] = {}, dp[NS][4] = {};  // no X in the C form
#pragma unroll
        for (int kk = 0; kk < KD; ++kk)
#pragma unroll
          for (int nn = 0; nn < S / 16; ++nn) {
            uint32_t bk[4], bv[4];
            load_b_nk(bk, k_s(b), LD, 16 * nn, 16 * kk);
            load_b_nk(bv, v_s(b), LD, 16 * nn, 16 * kk);
            mma_16816<Bf16>(z[2 * nn], rf[kk], bk[0], bk[1]);
            mma_16816<Bf16>(z[2 * nn + 1], rf[kk], bk[2], bk[3]);
            mma_16816<Bf16>(dp[2 * nn], dof[kk], bv[0], bv[1]);
            mma_16816<Bf16>(dp[2 * nn + 1], dof[kk], bv[2], bv[3]);
            if constexpr (!cf) {
              uint32_t bw[4];
              load_b_nk(bw, w_s(b), LD, 16 * nn, 16 * kk);
              mma_16816<Bf16>(x[2 * nn], rf[kk], bw[0], bw[1]);
              mma_16816<Bf16>(x[2 * nn + 1], rf[kk], bw[2], bw[3]);
            }
          }
        // P, dS, dZ; z becomes dZ. Rows past T have lse 0 and dout 0: P may be nonzero there, so mask.
        // With a gate, dS's row sums (row_sum) and column sums (cs[2j + e]: column 8j + 2·t4 + e).
        float cs[2 * NS] = {};
#pragma unroll
        for (int rho = 0; rho < 2; ++rho) {
          const int rr = row0 + 8 * rho;
          const bool valid = a0 + rr < a.T;
#pragma unroll
          for (int j = 0; j < NS; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int c = 8 * j + 2 * t4 + e;
              float s = z[j][2 * rho + e] * a.scale_log2 - lse_s[rr];
              if (a.gated) s += float(gq[rr] - g_s(b)[c]) * kLog2e;
              const float p = valid ? exp2f(s) : 0.f;
              const float ds = p * (dp[j][2 * rho + e] - delta_s[rr]);
              dp[j][2 * rho + e] = p;
              z[j][2 * rho + e] = a.scale * ds;
              if (a.gated) row_sum[rho] += ds, cs[2 * j + e] += ds;
            }
#pragma unroll
          for (int j = 0; j < NS; ++j) {
            put(p_s(n), LK, 8 * j + 2 * t4, dp[j][2 * rho], dp[j][2 * rho + 1], rho);
            put(z_s(n), LK, 8 * j + 2 * t4, z[j][2 * rho], z[j][2 * rho + 1], rho);
            if constexpr (!cf) put(x_s(n), LK, 8 * j + 2 * t4, x[j][2 * rho], x[j][2 * rho + 1], rho);
          }
        }
        // Column sums over the warp's 16 rows (column_sum8: lane 4g + t4 then holds flat indices
        // (NS/4)·g + i), then over the warps.
        if (a.gated) {
          column_sum8(cs);
#pragma unroll
          for (int i = 0; i < NS / 4; ++i) {
            const int f = NS / 4 * g + i;
            atomicAdd(&col_s(n)[8 * (f / 2) + 2 * t4 + f % 2], cs[i]);
          }
        }
        // R_J and γ (before this step) into shared memory for the key-side products.
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) {
          uint32_t* rr = reinterpret_cast<uint32_t*>(r_s(n));
          const int c = (16 * kk + 2 * t4) / 2, ld2 = LD / 2;
          rr[row0 * ld2 + c] = rf[kk][0], rr[(row0 + 8) * ld2 + c] = rf[kk][1];
          rr[row0 * ld2 + c + 4] = rf[kk][2], rr[(row0 + 8) * ld2 + c + 4] = rf[kk][3];
        }
#pragma unroll
        for (int j = 0; j < ND; ++j)
#pragma unroll
          for (int rho = 0; rho < 2; ++rho) put(gam_s(n), LD, 8 * j + 2 * t4, gam[j][2 * rho], gam[j][2 * rho + 1], rho);
        if constexpr (cf) {
          // γ ← γ − γ C_Jᵀ + dZ K̃_J (J > 0 for the first term: γ = 0 at J = 0)
          if (J > 0) {
            uint32_t ga[KD][4];
#pragma unroll
            for (int kk = 0; kk < KD; ++kk) c_to_a<Bf16>(ga[kk], gam[2 * kk], gam[2 * kk + 1], -1.f);
#pragma unroll
            for (int kk = 0; kk < KD; ++kk)
#pragma unroll
              for (int nd = 0; nd < D / 16; ++nd) {
                uint32_t bc[4];
                load_b_nk(bc, w_s(b), LD, 16 * nd, 16 * kk);  // B[k][n] = C_J[n][k]
                mma_16816<Bf16>(gam[2 * nd], ga[kk], bc[0], bc[1]);
                mma_16816<Bf16>(gam[2 * nd + 1], ga[kk], bc[2], bc[3]);
              }
          }
#pragma unroll
          for (int kk = 0; kk < S / 16; ++kk) {
            uint32_t za[4];
            c_to_a<Bf16>(za, z[2 * kk], z[2 * kk + 1]);
#pragma unroll
            for (int nd = 0; nd < D / 16; ++nd) {
              uint32_t bk[4];
              load_b_kn(bk, k_s(b), LD, 16 * kk, 16 * nd);
              mma_16816<Bf16>(gam[2 * nd], za, bk[0], bk[1]);
              mma_16816<Bf16>(gam[2 * nd + 1], za, bk[2], bk[3]);
            }
          }
        } else {
          // −Y = −γ U_Jᵀ (J > 0: γ = 0 at J = 0)
          float y[NS][4] = {};
          if (J > 0) {
#pragma unroll
            for (int kk = 0; kk < KD; ++kk) {
              uint32_t ga[4];
              c_to_a<Bf16>(ga, gam[2 * kk], gam[2 * kk + 1], -1.f);
#pragma unroll
              for (int nn = 0; nn < S / 16; ++nn) {
                uint32_t bu[4];
                load_b_nk(bu, u_s(b), LD, 16 * nn, 16 * kk);
                mma_16816<Bf16>(y[2 * nn], ga, bu[0], bu[1]);
                mma_16816<Bf16>(y[2 * nn + 1], ga, bu[2], bu[3]);
              }
            }
          }
#pragma unroll
          for (int j = 0; j < NS; ++j)
#pragma unroll
            for (int rho = 0; rho < 2; ++rho) put(y_s(n), LK, 8 * j + 2 * t4, y[j][2 * rho], y[j][2 * rho + 1], rho);
          // γ ← γ + dZ K̃_J + (−Y) W_J
#pragma unroll
          for (int kk = 0; kk < S / 16; ++kk) {
            uint32_t za[4], ya[4];
            c_to_a<Bf16>(za, z[2 * kk], z[2 * kk + 1]);
            c_to_a<Bf16>(ya, y[2 * kk], y[2 * kk + 1]);
#pragma unroll
            for (int nd = 0; nd < D / 16; ++nd) {
              uint32_t bk[4], bw[4];
              load_b_kn(bk, k_s(b), LD, 16 * kk, 16 * nd);
              load_b_kn(bw, w_s(b), LD, 16 * kk, 16 * nd);
              mma_16816<Bf16>(gam[2 * nd], za, bk[0], bk[1]);
              mma_16816<Bf16>(gam[2 * nd + 1], za, bk[2], bk[3]);
              if (J > 0) {
                mma_16816<Bf16>(gam[2 * nd], ya, bw[0], bw[1]);
                mma_16816<Bf16>(gam[2 * nd + 1], ya, bw[2], bw[3]);
              }
            }
          }
        }
      } else {  // zero rows: this warp adds nothing to the key-side products
        for (int e = lane; e < 16 * LD / 2; e += 32) {
          reinterpret_cast<uint32_t*>(r_s(n) + 16 * warp * LD)[e] = 0u;
          reinterpret_cast<uint32_t*>(gam_s(n) + 16 * warp * LD)[e] = 0u;
        }
        for (int e = lane; e < 16 * LK / 2; e += 32) {
          reinterpret_cast<uint32_t*>(p_s(n) + 16 * warp * LK)[e] = 0u;
          reinterpret_cast<uint32_t*>(z_s(n) + 16 * warp * LK)[e] = 0u;
          if constexpr (!cf) {
            reinterpret_cast<uint32_t*>(x_s(n) + 16 * warp * LK)[e] = 0u;
            reinterpret_cast<uint32_t*>(y_s(n) + 16 * warp * LK)[e] = 0u;
          }
        }
      }
    };
    auto key = [&](int J) {
      const int64_t r0 = head + int64_t(J) * S;
      const int n = J % NB;
      // Key-side products in tiles of 16 rows × TW columns spread over the warps, (S, D) each:
      // dV += Pᵀ dout, dK̃ += dZᵀ R, and for J > 0 dU += −Xᵀ γ_old, dW += (−Y)ᵀ R, or in the C form
      // dC_J += −R_Jᵀ γ_old (D, D).
      // TW = 32 at D ≤ 64 spreads the 24 tiles of the C form (D = 64) evenly over the 8 warps.
      constexpr int TW = D <= 64 ? 32 : 64, NTW = TW / 8, per = (S / 16) * (D / TW);
      constexpr int per_m = cf ? (D / 16) * (D / TW) : per;  // tiles of dC, or of dU and of dW
      const int n_tiles = 2 * per + (J > 0 ? (cf ? 1 : 2) * per_m : 0);
      for (int tile = warp; tile < n_tiles; tile += kWarps) {
        const int which = tile < 2 * per ? tile / per : 2 + (tile - 2 * per) / per_m;
        const int local = tile < 2 * per ? tile % per : (tile - 2 * per) % per_m;
        const int k0 = local / (D / TW) * 16, d0 = (local % (D / TW)) * TW;
        const bool dc = cf && which == 2;
        const uint16_t* am = which == 0 ? p_s(n) : which == 1 ? z_s(n) : dc ? r_s(n) : which == 2 ? x_s(n) : y_s(n);
        const uint16_t* bm = which == 0 ? do_s : which == 2 ? gam_s(n) : r_s(n);
        float* out = which == 0 ? acc.dv + r0 * D
                     : which == 1 ? acc.dk_hat + r0 * D
                     : dc ? acc.dc + c_head + int64_t(J) * D * D
                     : which == 2 ? acc.du + r0 * D : acc.dw_scan + r0 * D;
        const float sign = which == 2 ? -1.f : 1.f;
        float t[NTW][4] = {};
#pragma unroll
        for (int kk = 0; kk < kRows / 16; ++kk) {
          uint32_t at[4];
          load_a_t(at, am, dc ? LD : LK, k0, 16 * kk);
#pragma unroll
          for (int nn = 0; nn < TW / 16; ++nn) {
            uint32_t bb[4];
            load_b_kn(bb, bm, LD, 16 * kk, d0 + 16 * nn);
            mma_16816<Bf16>(t[2 * nn], at, bb[0], bb[1]);
            mma_16816<Bf16>(t[2 * nn + 1], at, bb[2], bb[3]);
          }
        }
        // Lanes t4 and t4 ^ 1 swap halves so each holds 4 adjacent columns of one row: even t4 row g,
        // odd t4 row g + 8, columns 8j + 4·(t4 / 2) … + 3; then one float4 atomic each.
        const bool odd = t4 & 1;
        float* dst = out + (k0 + g + (odd ? 8 : 0)) * D + d0 + 4 * (t4 >> 1);
#pragma unroll
        for (int j = 0; j < NTW; ++j) {
          const float s0 = __shfl_xor_sync(0xffffffffu, odd ? t[j][0] : t[j][2], 1);
          const float s1 = __shfl_xor_sync(0xffffffffu, odd ? t[j][1] : t[j][3], 1);
          const float4 v = odd ? make_float4(s0, s1, t[j][2], t[j][3]) : make_float4(t[j][0], t[j][1], s0, s1);
          atomicAdd(reinterpret_cast<float4*>(dst + 8 * j), make_float4(sign * v.x, sign * v.y, sign * v.z, sign * v.w));
        }
      }
      if (a.gated)
        for (int c = threadIdx.x; c < S; c += NT) atomicAdd(&acc.dg[r0 + c], -col_s(n)[c]), col_s(n)[c] = 0.f;
    };
    if (a.gated)
      for (int c = threadIdx.x; c < NB * S; c += NT) col_s(0)[c] = 0.f;
    if (top > 0) load_block(0, 0), load_rf(0);
    cp_async_commit();
    if (top > 1) load_block(1, 1);
    cp_async_commit();
    cp_async_wait<1>();  // stage 0
    __syncthreads();
    if (top > 0) query(0);
    for (int J = 0; J < top; ++J) {
      cp_async_wait<0>();  // stage J + 1
      __syncthreads();     // query(J) and key(J − 1) are done everywhere; stage J + 1 has landed
      if (J + 2 < top) load_block(J & 1, J + 2);
      cp_async_commit();
      if (J + 1 < top) load_rf(J + 1);  // R_{J+1}'s fragments, hidden behind key(J)
      key(J);
      if constexpr (NB == 1) __syncthreads();  // key(J) is done with the one row-buffer set
      if (J + 1 < top) query(J + 1);
    }

    // dQ̃ = γ for the warp's rows (every row of the head's blocks); dG_i += Σ_j dS_ij.
    if (!active) continue;
#pragma unroll
    for (int rho = 0; rho < 2; ++rho) {
      const int t = w0 + g + 8 * rho;
#pragma unroll
      for (int j = 0; j < ND; ++j)
        *reinterpret_cast<float2*>(acc.dq_hat + (head + t) * D + 8 * j + 2 * t4) =
            make_float2(gam[j][2 * rho], gam[j][2 * rho + 1]);
      if (!a.gated) continue;
      const float rs = quad_sum(row_sum[rho]);
      if (t4 == 0 && I > 0) atomicAdd(&acc.dg[head + t], rs);
    }
  }
}

// The bf16 scan's grid: the CTAs resident on the whole device at once (after the smem opt-in).
template <int S, int D>
int resident_ctas() {
  set_smem(path_bwd_scan_bf16<S, D>, BwdLayout<S, D>::kBytes);
  int device = 0, sms = 0, per_sm = 0;
  PB_CUDA_CHECK(cudaGetDevice(&device));
  PB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  PB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, path_bwd_scan_bf16<S, D>,
                                                              kBwdWarps * 32, BwdLayout<S, D>::kBytes));
  return sms * std::max(per_sm, 1);
}

template <int S, int D>
void backward_impl(bf16_bits* dq, bf16_bits* dk, bf16_bits* dv, float* dw, float* dbeta, float* dlog_f,
                   const bf16_bits* dout, const bf16_bits* o, const float* lse, const bf16_bits* q,
                   const bf16_bits* k, const bf16_bits* v, const float* w, const float* beta,
                   const float* log_f, const PathAttentionArgs& args) {
  const AttnShape& sh = args.shape;
  const int n_blocks = ceil_div(sh.T, S), n_tiles = ceil_div(sh.T, BwdLayout<S, D>::kRows);
  const int ctas = std::min(resident_ctas<S, D>(), sh.B * sh.H * n_tiles);
  const int64_t state_words = int64_t(ctas) * n_blocks * kBwdWarps * (D / 16) * 32;  // uint4 each

  // Arena 2: the packed copies, the scan states and the item counter.
  Carver sizes{nullptr};
  take_packed(sizes, sh, S, true);
  sizes.take<uint4>(state_words);
  sizes.take<int>(1);
  Carver cv{static_cast<char*>(scratch(sizes.used, 2))};
  const Packed pk = take_packed(cv, sh, S, true);
  auto* states = cv.take<uint4>(state_words);
  int* next_item = cv.take<int>(1);
  PB_CUDA_CHECK(cudaMemsetAsync(next_item, 0, sizeof(int), stream()));

  const path::Accumulators acc = path::backward_begin(q, k, w, beta, log_f, args);
  pack_all(pk, acc, w, sh);
  const BwdArgs ba{sh.B, sh.T, sh.H, n_blocks, acc.Tp, n_tiles, float(args.scale), float(args.scale) * kLog2e,
                   acc.g, acc.q_hat, pk.kb, pk.wb, pk.ub, pk.wh, pk.uh, pk.ch, pk.cb, bf(v), bf(o), bf(dout),
                   lse, states, acc, log_f != nullptr, next_item, std::max(1, ctas / n_tiles)};
  path_bwd_scan_bf16<S, D><<<ctas, kBwdWarps * 32, BwdLayout<S, D>::kBytes, stream()>>>(ba);
  PB_LAUNCH_CHECK();
  path::backward_end(acc, dq, dk, dv, dw, dbeta, dlog_f, dout, lse, q, k, v, w, beta, log_f, args);
}

}  // namespace
}  // namespace pb::cuda::path

namespace pb::cuda {

void path_attention_bf16_backward(bf16_bits* dq, bf16_bits* dk, bf16_bits* dv, float* dw, float* dbeta,
                                  float* dlog_f, const bf16_bits* dout, const bf16_bits* o,
                                  const float* lse, const bf16_bits* q, const bf16_bits* k,
                                  const bf16_bits* v, const float* w, const float* beta,
                                  const float* log_f, const PathAttentionArgs& args) {
  const AttnShape& sh = args.shape;
  if (sh.B == 0 || sh.T == 0 || sh.H == 0) return;
  path::check_shape(sh);
  if (sh.D == 32)
    path::backward_impl<64, 32>(dq, dk, dv, dw, dbeta, dlog_f, dout, o, lse, q, k, v, w, beta, log_f, args);
  else if (sh.D == 64)
    path::backward_impl<64, 64>(dq, dk, dv, dw, dbeta, dlog_f, dout, o, lse, q, k, v, w, beta, log_f, args);
  else
    path::backward_impl<32, 128>(dq, dk, dv, dw, dbeta, dlog_f, dout, o, lse, q, k, v, w, beta, log_f, args);
}

}  // namespace pb::cuda
