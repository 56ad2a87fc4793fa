// PaTH forward scan on bf16 tensor cores (stage map in path_bf16.cuh). path_fwd_scan_bf16: per
// (128 query rows, b·h), 8 warps of 16 rows, heaviest first. Per warp, query block I: the online
// softmax starts on S_loc (diagonal block); then for key blocks J = I−1 … 0, with R the queries moved
// to J's right edge (R = Q̃ at the start):
//   z = R K̃_Jᵀ                      mma bf16 (fla: the input dtype)
//   s = scale·z + G_i − G_j, online softmax in base 2, acc += P V_J (mma bf16)
//   R ← R − R C_J                   C form: mma f16, R kept in fp32 registers (J > 0)
//   R ← R − (R W_Jᵀ) U_J            D = 128: two mma f16 (fla: f16, finer than bf16 for |·| ≤ 1 values)
// K̃_J, V_J and C_J (or W_J, U_J) are staged in shared memory by cp.async, double-buffered.
// o = acc / l (bf16), lse = ln Σ_j e^{s_ij} (fp32).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

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

// Shared memory of the scan, per stage: K̃_J (bf16), V_J (bf16), then C_J (f16, D × D) in the
// C form, else W_J and U_J (f16, S × D each), with row stride LD = D + 8 halves (16-byte rows,
// ldmatrix without bank conflicts), then G of the key block (S doubles). The diagonal block's V
// (kRows rows) aliases stage 1.
template <int S, int D>
struct Layout {
  static constexpr int kRows = 16 * kFwdWarps;
  static constexpr int LD = D + 8;
  static constexpr int kTile = S * LD;                        // halves of an (S, D) tile
  static constexpr int kMove = kC<S, D> ? D * LD : 2 * kTile;  // C_J, or W_J and U_J
  static constexpr int kStage = (2 * kTile + kMove) * 2 + S * 8;  // bytes
  static constexpr int kBytes = 2 * kStage;
  static_assert(kRows * LD <= 2 * kTile + kMove, "the diagonal V fits in a stage");
};

struct ScanArgs {
  int B, T, H, n_blocks, Tp, n_tiles;
  float scale_log2;  // scale · log2 e
  const double* g;   // (B·H, Tp)
  const float* q_hat;                 // (B·H, Tp, D)
  const float* s_loc;                 // (B·H, n_blocks, S, S)
  const __nv_bfloat16* k_hat;         // (B·H, Tp, D)
  const __half *w, *u;                // (B·H, Tp, D), not in the C form
  const __half* c;                    // (B·H, n_blocks, D, D), the C form only
  const __nv_bfloat16* v;             // (B, T, H, D)
  __nv_bfloat16* o;                   // (B, T, H, D)
  float* lse;                         // (B, T, H)
  bool gated;
};

// Two CTAs per SM at D ≤ 64 (128 registers with 168 bytes of spills); at D = 128 (226 registers) the
// same bound spills 1.2 KB, so one CTA.
template <int S, int D>
__global__ void __launch_bounds__(kFwdWarps * 32, D <= 64 ? 2 : 1) path_fwd_scan_bf16(ScanArgs a) {
  using L = Layout<S, D>;
  constexpr int LD = L::LD, NS = S / 8, ND = D / 8;  // n-tiles of 8 over keys / over d
  constexpr int kRows = L::kRows, NT = kFwdWarps * 32;
  extern __shared__ __align__(16) unsigned char smem[];
  const int bh = blockIdx.x, b = bh / a.H, h = bh % a.H;
  const int a0 = (a.n_tiles - 1 - int(blockIdx.y)) * kRows;  // heaviest tiles first
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
  const int w0 = a0 + 16 * warp;                   // the warp's first row
  const int I = w0 / S;                             // its query block
  const bool active = I < a.n_blocks;               // the last CTA may reach past the blocks
  const int top = min((a0 + kRows - 1) / S, a.n_blocks - 1);  // the CTA's highest query block
  const int64_t head = int64_t(bh) * a.Tp;          // scratch row of position 0
  const int64_t vstride = int64_t(a.H) * D;         // (B, T, H, D) rows of one head
  const __nv_bfloat16* v_head = a.v + (int64_t(b) * a.T * a.H + h) * D;

  auto stage = [&](int s) { return smem + s * L::kStage; };
  auto k_s = [&](int s) { return reinterpret_cast<uint16_t*>(stage(s)); };
  auto v_s = [&](int s) { return k_s(s) + L::kTile; };
  auto w_s = [&](int s) { return k_s(s) + 2 * L::kTile; };  // C_J in the C form
  auto u_s = [&](int s) { return k_s(s) + 3 * L::kTile; };
  auto g_s = [&](int s) { return reinterpret_cast<double*>(stage(s) + (2 * L::kTile + L::kMove) * 2); };
  auto load_block = [&](int s, int J) {
    const int64_t r0 = head + int64_t(J) * S;
    stage_rows<S, D, LD, NT>(k_s(s), a.k_hat + r0 * D, D, S);
    stage_rows<S, D, LD, NT>(v_s(s), v_head + int64_t(J) * S * vstride, vstride, S);
    if constexpr (kC<S, D>) {
      stage_rows<D, D, LD, NT>(w_s(s), a.c + (int64_t(bh) * a.n_blocks + J) * D * D, D, D);
    } else {
      stage_rows<S, D, LD, NT>(w_s(s), a.w + r0 * D, D, S);
      stage_rows<S, D, LD, NT>(u_s(s), a.u + r0 * D, D, S);
    }
    for (int e = threadIdx.x; e < S / 2; e += NT) cp_async16(g_s(s) + 2 * e, a.g + r0 + 2 * e);
  };

  // The diagonal block's V (the CTA's own rows) into stage 1, the first key block into stage 0.
  uint16_t* v_diag = k_s(1);
  stage_rows<kRows, D, LD, NT>(v_diag, v_head + int64_t(a0) * vstride, vstride, min(kRows, a.T - a0));
  if (top >= 1) load_block(0, top - 1);
  cp_async_commit();

  // Per thread: rows g and g + 8 of the warp (ρ = 0, 1); C-fragment element e is row g + 8·(e / 2),
  // column 8j + 2·t4 + e % 2 of n-tile j.
  float r[ND][4];    // R (16 × D), fp32
  float acc[ND][4];  // Σ_j e^{s_ij − m_i} v_j
  float m[2], l[2];  // running max (base 2) and this thread's part of the row sum
  double gq[2];      // G of the rows
  if (active) {
#pragma unroll
    for (int j = 0; j < ND; ++j)
#pragma unroll
      for (int rho = 0; rho < 2; ++rho) {
        const float2 x = *reinterpret_cast<const float2*>(a.q_hat + (head + w0 + g + 8 * rho) * D + 8 * j + 2 * t4);
        r[j][2 * rho] = x.x, r[j][2 * rho + 1] = x.y;
      }
    for (int rho = 0; rho < 2; ++rho) gq[rho] = a.gated ? a.g[head + w0 + g + 8 * rho] : 0.0;
  }
  cp_async_wait<0>();
  __syncthreads();

  // Diagonal block: s_ij = scale·S_loc_ij + G_i − G_j for j ≤ i inside block I.
  if (active) {
    const int rl = w0 - I * S;  // the warp's first row within its block
    const float* sl = a.s_loc + (int64_t(bh) * a.n_blocks + I) * S * S;
    float p[NS][4];
#pragma unroll
    for (int rho = 0; rho < 2; ++rho) {
      const int row = rl + g + 8 * rho;
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < NS; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = 8 * j + 2 * t4 + e;
          float s = -INFINITY;
          if (col <= row) {
            s = sl[row * S + col] * a.scale_log2;
            if (a.gated) s += float(gq[rho] - a.g[head + I * S + col]) * kLog2e;
          }
          p[j][2 * rho + e] = s;
          mx = fmaxf(mx, s);
        }
      m[rho] = quad_max(mx);  // finite: the diagonal is there
      l[rho] = 0.f;
#pragma unroll
      for (int j = 0; j < NS; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = p[j][2 * rho + e];
          x = exp2f(x - m[rho]);  // exp2(−inf) = 0 above the diagonal
          l[rho] += x;
        }
    }
#pragma unroll
    for (int j = 0; j < ND; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    const int vr = I * S - a0;  // the block's first row in v_diag
#pragma unroll
    for (int kk = 0; kk < S / 16; ++kk) {
      if (16 * kk > rl + 15) break;  // keys past the warp's last row have p = 0
      uint32_t pa[4];
      c_to_a<Bf16>(pa, p[2 * kk], p[2 * kk + 1]);
#pragma unroll
      for (int nd = 0; nd < D / 16; ++nd) {
        uint32_t bv[4];
        load_b_kn(bv, v_diag, LD, vr + 16 * kk, 16 * nd);
        mma_16816<Bf16>(acc[2 * nd], pa, bv[0], bv[1]);
        mma_16816<Bf16>(acc[2 * nd + 1], pa, bv[2], bv[3]);
      }
    }
  }

  for (int J = top - 1; J >= 0; --J) {
    const int s = (top - 1 - J) & 1;
    __syncthreads();  // every warp is done with stage s ^ 1 (the previous block, or v_diag)
    if (J > 0) load_block(s ^ 1, J - 1);
    cp_async_commit();
    cp_async_wait<1>();  // block J's copies (committed one step earlier) have landed
    __syncthreads();
    if (!active || J >= I) continue;  // warp-uniform: this warp's rows start after block J

    // z = R K̃_Jᵀ (bf16), 16 × S; then in the C form R ← R − R C_J (f16) at once, off the softmax's
    // path; otherwise x = R W_Jᵀ (f16, 16 × S) here and R ← R − x U_J after the softmax.
    float z[NS][4], x[kC<S, D> ? 1 : NS][4];
    uint32_t rh[kC<S, D> ? D / 16 : 1][4];  // the C form: −R as f16 A fragments
#pragma unroll
    for (int j = 0; j < NS; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) z[j][e] = 0.f;
    if constexpr (!kC<S, D>)
#pragma unroll
      for (int j = 0; j < NS; ++j) x[j][0] = x[j][1] = x[j][2] = x[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ra[4], rf[4];
      c_to_a<Bf16>(ra, r[2 * kk], r[2 * kk + 1]);
      if constexpr (kC<S, D>)
        c_to_a<F16>(rh[kk], r[2 * kk], r[2 * kk + 1], -1.f);
      else
        c_to_a<F16>(rf, r[2 * kk], r[2 * kk + 1]);
#pragma unroll
      for (int nn = 0; nn < S / 16; ++nn) {
        uint32_t bk[4];
        load_b_nk(bk, k_s(s), LD, 16 * nn, 16 * kk);
        mma_16816<Bf16>(z[2 * nn], ra, bk[0], bk[1]);
        mma_16816<Bf16>(z[2 * nn + 1], ra, bk[2], bk[3]);
        if constexpr (!kC<S, D>) {
          uint32_t bw[4];
          load_b_nk(bw, w_s(s), LD, 16 * nn, 16 * kk);
          mma_16816<F16>(x[2 * nn], rf, bw[0], bw[1]);
          mma_16816<F16>(x[2 * nn + 1], rf, bw[2], bw[3]);
        }
      }
    }
    if constexpr (kC<S, D>)
      if (J > 0) move_c<D, LD>(r, rh, w_s(s));

    // Online softmax (base 2): s = (scale·z + G_i − G_j)·log2 e, m' = max(m, max_j s),
    // acc ← 2^{m − m'} acc, l likewise, p = 2^{s − m'}.
    const double* gk = g_s(s);
#pragma unroll
    for (int rho = 0; rho < 2; ++rho) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < NS; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& v = z[j][2 * rho + e];
          v *= a.scale_log2;
          if (a.gated) v += float(gq[rho] - gk[8 * j + 2 * t4 + e]) * kLog2e;
          mx = fmaxf(mx, v);
        }
      const float m_new = fmaxf(m[rho], quad_max(mx));
      const float alpha = exp2f(m[rho] - m_new);
      m[rho] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < NS; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& v = z[j][2 * rho + e];
          v = exp2f(v - m_new);
          sum += v;
        }
      l[rho] = l[rho] * alpha + sum;
#pragma unroll
      for (int j = 0; j < ND; ++j) acc[j][2 * rho] *= alpha, acc[j][2 * rho + 1] *= alpha;
    }

    // acc += P V_J; then (not in the C form) R ← R − x U_J (not needed after the last block).
#pragma unroll
    for (int kk = 0; kk < S / 16; ++kk) {
      uint32_t pa[4], xa[4];
      c_to_a<Bf16>(pa, z[2 * kk], z[2 * kk + 1]);
      if constexpr (!kC<S, D>) c_to_a<F16>(xa, x[2 * kk], x[2 * kk + 1], -1.f);
#pragma unroll
      for (int nd = 0; nd < D / 16; ++nd) {
        uint32_t bv[4];
        load_b_kn(bv, v_s(s), LD, 16 * kk, 16 * nd);
        mma_16816<Bf16>(acc[2 * nd], pa, bv[0], bv[1]);
        mma_16816<Bf16>(acc[2 * nd + 1], pa, bv[2], bv[3]);
        if constexpr (!kC<S, D>)
          if (J > 0) {
            uint32_t bu[4];
            load_b_kn(bu, u_s(s), LD, 16 * kk, 16 * nd);
            mma_16816<F16>(r[2 * nd], xa, bu[0], bu[1]);
            mma_16816<F16>(r[2 * nd + 1], xa, bu[2], bu[3]);
          }
      }
    }
  }

  // o_i = acc_i / l_i (bf16), lse_i = (m_i + log2 l_i)·ln 2.
  if (!active) return;
#pragma unroll
  for (int rho = 0; rho < 2; ++rho) {
    const int t = w0 + g + 8 * rho;
    const float l_row = quad_sum(l[rho]);
    if (t >= a.T) continue;
    const int64_t row = (int64_t(b) * a.T + t) * a.H + h;
#pragma unroll
    for (int j = 0; j < ND; ++j)
      *reinterpret_cast<__nv_bfloat162*>(a.o + row * D + 8 * j + 2 * t4) =
          __floats2bfloat162_rn(acc[j][2 * rho] / l_row, acc[j][2 * rho + 1] / l_row);
    if (t4 == 0) a.lse[row] = (m[rho] + log2f(l_row)) * kLn2;
  }
}

template <int S, int D>
void scan(const ScanArgs& args) {
  using L = Layout<S, D>;
  set_smem(path_fwd_scan_bf16<S, D>, L::kBytes);
  path_fwd_scan_bf16<S, D><<<dim3(args.B * args.H, args.n_tiles), kFwdWarps * 32, L::kBytes, stream()>>>(args);
  PB_LAUNCH_CHECK();
}

}  // namespace
}  // namespace pb::cuda::path

namespace pb::cuda {

void path_attention_bf16_forward(bf16_bits* o, float* lse, const bf16_bits* q, const bf16_bits* k,
                                 const bf16_bits* v, const float* w, const float* beta,
                                 const float* log_f, const PathAttentionArgs& args) {
  const AttnShape& sh = args.shape;
  if (sh.B == 0 || sh.T == 0 || sh.H == 0) return;
  path::check_shape(sh);
  const int S = sh.D > 64 ? 32 : 64;

  // Arena 2: the packed copies.
  Carver measure{nullptr};
  path::take_packed(measure, sh, S, false);
  Carver cv{static_cast<char*>(scratch(measure.used, 2))};
  const path::Packed pk = path::take_packed(cv, sh, S, false);
  const path::Prepared p = path::prepare(q, k, w, beta, log_f, args);
  path::pack_all(pk, p, w, sh);

  const path::ScanArgs sa{sh.B, sh.T, sh.H, p.n_blocks, p.Tp, ceil_div(sh.T, path::Layout<64, 64>::kRows),
                          float(args.scale) * path::kLog2e, p.g, p.q_hat, p.s_loc, pk.kb, pk.wh, pk.uh, pk.ch,
                          bf(v), bf(o), lse, log_f != nullptr};
  if (sh.D == 32)
    path::scan<64, 32>(sa);
  else if (sh.D == 64)
    path::scan<64, 64>(sa);
  else
    path::scan<32, 128>(sa);
}

}  // namespace pb::cuda
