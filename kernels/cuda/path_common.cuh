// The parts shared by the fp32 PaTH kernels (path_prep.cu, path_forward.cu, path_backward.cu,
// path_ut_backward.cu) and their host side (path_launch.cu): the problem's sizes, the scratch
// layout, row loads into shared memory, the gate's prefix sums, the UT transform of one block, and
// the stage launchers. The math, the names (Tm, U, M, E, QW, S_loc, Q̃, K̃, the scan
// R ← R − (R W_Jᵀ) U_J) and the derivation of the backward are in kernels/README.md, "PaTH
// attention"; kernels/cpu/path_attention.cpp is the reference these kernels port. Per (b, h) the
// sequence is cut into blocks of S rows (S = 64, 32 for head dims above 64; the last block is
// partial and its rows past T are zero, so β = 0, w = 0 there). DP is the head dim padded to 32, 64
// or 128 (padded columns are zero).
//
// Forward (the gate kernel or a memset, then two launches):
//   gate     path_gate_prefix_f64, per b·h (with a gate): G_t = Σ_{u≤t} log_f_u (double), else G = 0
//            by a memset.
//   prep     path_prep_f32, per (block c, b·h): the UT transform, Q̃, K̃, U and the intra-block
//            logits S_loc, into scratch.
//   forward  path_fwd_scan_f32, per (b·h, query block I): online softmax over S_loc, then key blocks
//            J = I−1 … 0: z = R K̃_Jᵀ, online-softmax update, acc += p V_J, R ← R − (R W_Jᵀ) U_J
//            (P and X reuse [K̃_J; W_J]'s shared memory: two CTAs per SM).
// Backward (prep again, a memset of the accumulators, then three launches):
//   scan     path_bwd_scan_f32, persistent CTAs (as many as are resident at once) over the items
//            (b·h, QB query blocks stacked as QB·S rows; QB = 2 for S = 32, else 1): the forward scan
//            from Q̃_I stores R_J (the queries at key block J's right edge, J = I−1 … 0) in the CTA's
//            own (QB·Tp, DP) slice of scratch, I − 1 scan steps; then the reverse scan, J = 0 … I−1,
//            γ = dR carried left to right. Memory: resident CTAs × QB·Tp × DP floats, linear in T
//            (≈ 17 MB at 132 CTAs, T = 512, D = 64; ≈ 100 MB at T = 768, D = 128). dV, dK̃, dW,
//            dU of block J are summed over the items with float atomics; dQ̃ = γ at the end is
//            written by its owner.
//   ut_bwd   path_bwd_ut_f32, per (block c, b·h): the diagonal block's softmax backward and the UT
//            transform in reverse (README), writing dq, dk, dv, dw, dβ and dG.
//   gate     path_gate_suffix_f64, per b·h: dlog_f_t = Σ_{i≥t} dG_i (double).
// Products run on shared-memory tiles (path_tiles.cuh): 256 threads as a 16 × 16 grid, each thread
// holding the elements (ty + 16 i, tx + 16 j) of an M × N result in registers, fp32 FFMA; shared
// arrays have odd row strides (cols + 1), so rows and columns are both read without bank
// conflicts. prep and ut_bwd also come with TC = true (path_prep_tf32, path_bwd_ut_tf32, and
// path_bwd_dc_tf32 in the C form): the same code on TF32 tensor-core tiles (strides cols + 4),
// reading bf16 q, k, v, dout and writing bf16 dq, dk, dv, which the bf16 path (path_attention.cuh)
// uses. Internal to kernels/cuda/.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/path_attention.cuh"
#include "kernels/cuda/path_tiles.cuh"

namespace pb::cuda::path {

// Sizes of one problem, shared by the kernels.
struct Dims {
  int B, T, H, D;
  int n_blocks, Tp;  // blocks per sequence, T padded to n_blocks · S
  float scale;
  __host__ __device__ int64_t in_row(int b, int t, int h) const { return (int64_t(b) * T + t) * H + h; }  // (B, T, H) index
};

// The C form (path::c_form) of the tensor-core instantiations: prep also writes C, and the bf16
// scan's dC_J is turned into dU_J = W_J dC_J, dW_J = U_J dC_Jᵀ before the UT backward.
template <int S, int DP, bool TC>
constexpr bool kCForm = TC && path::c_form(S, DP);

// The per-(b, h) scratch quantities, rows padded to Tp: (B·H, Tp, DP) and (B·H, Tp).
struct Scratch {
  double* g;       // (B·H, Tp): G_t = Σ_{u≤t} log_f_u, 0 without a gate
  float* q_hat;    // (B·H, Tp, DP): Q̃, queries at their block's left edge
  float* k_hat;    // (B·H, Tp, DP): K̃, keys at their block's right edge
  float* u;        // (B·H, Tp, DP): U = Tm diag(β) W per block
  float* c;        // (B·H, n_blocks, DP, DP): C_J = W_Jᵀ U_J, P_J = I − C_J (kCForm only)
  float* s_loc;    // (B·H, n_blocks, S, S): unscaled intra-block logits (forward only)
  float* delta;    // (B·H, Tp): δ_i = dout_i·o_i (backward)
  float* dq_hat;   // (B·H, Tp, DP): dQ̃ (backward)
  float* dk_hat;   // (B·H, Tp, DP): dK̃, atomically summed over query blocks (backward)
  float* du;       // (B·H, Tp, DP): the scan's dU, atomic (backward)
  float* dw_scan;  // (B·H, Tp, DP): the scan's dW, atomic (backward)
  float* dv;       // (B·H, Tp, DP): dV from the off-diagonal blocks, atomic (backward)
  float* dc;       // (B·H, n_blocks, DP, DP): dC_J from the bf16 scan, atomic (kCForm only)
  float* dg;       // (B·H, Tp): dG_i = Σ_j dS_ij − Σ_i' dS_i'i, atomic, then completed (backward)
  float* r_states; // (scan CTAs, QB·Tp, DP): each scan CTA's R_J of its current item (backward)
};

// The op's inputs; q, k, v have element type T.
template <class T>
struct InputsT {
  const T *q, *k, *v;  // (B, T, H, D)
  const float* w;      // (B, T, H, D)
  const float* beta;   // (B, T, H)
  const float* log_f;  // (B, T, H) or null
};
using Inputs = InputsT<float>;
// The element type of q, k, v, dout, dq, dk, dv: bf16 in the tensor-core instantiations (the bf16
// path), else fp32.
template <bool TC>
using Elem = std::conditional_t<TC, __nv_bfloat16, float>;
template <bool TC>
using InputsOf = InputsT<Elem<TC>>;

// Device helpers, one copy per .cu file (internal linkage).
namespace {

// A block of rows on its way to shared memory: fetch(src, stride, n_rows, n_cols), then
// put(dst, ld): dst (ROWS × COLS fp32, row stride ld) ← src rows (row stride `stride`), zero at
// rows ≥ n_rows or columns ≥ n_cols (src is not read there). NT is the CTA's threads.
// Under TC (the bf16 path: src rows, dst and ld 16-byte aligned, n_cols a multiple of the chunk)
// fetch issues the thread's 16-byte loads into registers, and put stores them widened (bf16: exact,
// TF32 values already) or rounded to TF32 (fp32, tf32_operand). A kernel fetches all its blocks
// before it puts any, so their loads are in flight together: one memory latency, not one per block.
template <int ROWS, int COLS, int NT, bool TC, class T>
struct RowsIn {
  static constexpr int kW = 16 / int(sizeof(T)), kPerRow = COLS / kW, kAll = ROWS * kPerRow;
  static constexpr int kN = (kAll + NT - 1) / NT;  // chunks per thread
  static_assert(COLS % kW == 0, "whole 16-byte chunks");
  uint4 v[kN];

  __device__ __forceinline__ void fetch(const T* src, int64_t stride, int n_rows, int n_cols) {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const int e = threadIdx.x + i * NT, r = e / kPerRow, c = (e - r * kPerRow) * kW;
      v[i] = make_uint4(0u, 0u, 0u, 0u);
      if (e < kAll && r < n_rows && c < n_cols) v[i] = *reinterpret_cast<const uint4*>(src + r * stride + c);
    }
  }
  __device__ __forceinline__ void put(float* dst, int ld) const {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const int e = threadIdx.x + i * NT, r = e / kPerRow, c = (e - r * kPerRow) * kW;
      if (e >= kAll) break;
      float4* out = reinterpret_cast<float4*>(dst + r * ld + c);
      if constexpr (sizeof(T) == 4) {
        const float4 f = *reinterpret_cast<const float4*>(&v[i]);
        out[0] = make_float4(tf32_operand<true>(f.x), tf32_operand<true>(f.y), tf32_operand<true>(f.z),
                             tf32_operand<true>(f.w));
      } else {
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v[i]);
        const float2 f0 = __bfloat1622float2(h[0]), f1 = __bfloat1622float2(h[1]);
        const float2 f2 = __bfloat1622float2(h[2]), f3 = __bfloat1622float2(h[3]);
        out[0] = make_float4(f0.x, f0.y, f1.x, f1.y);
        out[1] = make_float4(f2.x, f2.y, f3.x, f3.y);
      }
    }
  }
};
// Plain fp32 (any D, no alignment): fetch records the source and put copies element by element, as
// the fp32 kernels' registers are spoken for. A constant NT lets the compiler unroll the loop as far
// as registers allow (a forced full unroll spills).
template <int ROWS, int COLS, int NT>
struct RowsIn<ROWS, COLS, NT, false, float> {
  const float* src;
  int64_t stride;
  int n_rows, n_cols;

  __device__ __forceinline__ void fetch(const float* s, int64_t st, int nr, int nc) {
    src = s, stride = st, n_rows = nr, n_cols = nc;
  }
  __device__ __forceinline__ void put(float* dst, int ld) const {
    for (int e = threadIdx.x; e < ROWS * COLS; e += NT) {
      const int r = e / COLS, c = e - r * COLS;
      dst[r * ld + c] = (r < n_rows && c < n_cols) ? src[r * stride + c] : 0.f;
    }
  }
};
// One block: fetch, then put.
template <int ROWS, int COLS, int NT = kThreads, bool TC = false, class T>
__device__ __forceinline__ void load_rows(float* dst, int ld, const T* src, int64_t stride, int n_rows,
                                          int n_cols) {
  RowsIn<ROWS, COLS, NT, TC, T> in;
  in.fetch(src, stride, n_rows, n_cols);
  in.put(dst, ld);
}

// Inclusive prefix sums in double of x(0) … x(n − 1) by one CTA of kThreads threads:
// put(i, Σ_{j≤i} x(j)) for every i. Thread τ owns the chunk [τc, τc + c), c = ⌈n / kThreads⌉: it
// sums its chunk, the CTA scans the chunk sums (shuffles within warps, then the warp totals), and
// the thread walks its chunk again from its exclusive prefix. x is read twice.
template <class X, class Put>
__device__ void cta_prefix_sums(int n, X x, Put put) {
  __shared__ double warp_total[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int c = (n + kThreads - 1) / kThreads, i0 = min(n, int(threadIdx.x) * c), i1 = min(n, i0 + c);
  double sum = 0;
  for (int i = i0; i < i1; ++i) sum += x(i);
  double incl = sum;  // Σ of the chunk sums of lanes ≤ this one
  for (int o = 1; o < 32; o <<= 1) {
    const double y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  double run = incl - sum;
  for (int v = 0; v < warp; ++v) run += warp_total[v];
  for (int i = i0; i < i1; ++i) put(i, run += x(i));
}

// The UT transform of one block (README), from K, W (S × DP, stride DP + kPad<TC>) and β (S) in
// shared memory, its products on (S × S) tiles:
//   A = strictLower(diag(β) W Wᵀ), E = strictLower(diag(β) W Kᵀ)
//   (I + A) [Tm | U | M] = [I | diag(β) W | E]   (unit lower forward substitution, a column per thread)
// A has stride S + 4 and must be 16-byte aligned (its rows are read as float4 broadcasts); it stays
// fp32, as does the substitution. E, Tm and M have stride S + kPad<TC>, U stride DP + kPad<TC>, and
// are stored as TF32 operands under TC. Without WithTm, Tm is not formed (tm is unused) and m may
// alias e (each thread reads its column of E before writing that column of M). The callers' own
// products before the call share its first barrier; it ends with __syncthreads().
template <int S, int DP, bool TC, bool WithTm, int NT>
__device__ void ut_solve(const float* k, const float* w, const float* beta, float* a, float* e,
                         float* tm, float* u, float* m) {
  constexpr int LB = DP + kPad<TC>, LS = S + kPad<TC>, LA = S + 4, NW = NT / 32;
  {
    TileOf<S, S, TC, NW> t;
    t.zero();
    mma(t, DP, 1.f, w, LB, 1, w, 1, LB);  // W Wᵀ
    t.each([&](int r, int c, float& x) { a[r * LA + c] = c < r ? beta[r] * x : 0.f; });
    t.zero();
    mma(t, DP, 1.f, w, LB, 1, k, 1, LB);  // W Kᵀ
    t.each([&](int r, int c, float& x) { e[r * LS + c] = c < r ? tf32_operand<TC>(beta[r] * x) : 0.f; });
  }
  __syncthreads();
  static_assert(2 * S + DP <= NT, "one thread per column of [Tm | U | M]");
  static_assert(S % 4 == 0, "A rows are read four at a time");
  const int col = int(threadIdx.x) + (WithTm ? 0 : S);  // without Tm, threads start at U's columns
  if (col < 2 * S + DP) {  // warp-uniform branches: S and DP are multiples of 32
    float x[S];            // this thread's column, in registers (every index below is constant)
    float* dst;
    int ld;
    if (col < S) {
      dst = tm + col, ld = LS;
#pragma unroll
      for (int i = 0; i < S; ++i) x[i] = i == col ? 1.f : 0.f;
    } else if (col < S + DP) {
      dst = u + (col - S), ld = LB;
#pragma unroll
      for (int i = 0; i < S; ++i) x[i] = beta[i] * w[i * LB + col - S];
    } else {
      dst = m + (col - S - DP), ld = LS;
#pragma unroll
      for (int i = 0; i < S; ++i) x[i] = e[i * LS + col - S - DP];
    }
    // x_i = rhs_i − Σ_{k<i} A_ik x_k, in four partial sums; A_i,k..k+3 is one broadcast float4.
#pragma unroll
    for (int i = 1; i < S; ++i) {
      float s0 = x[i], s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma unroll
      for (int k4 = 0; k4 < S; k4 += 4) {
        if (k4 < i) {
          const float4 av = *reinterpret_cast<const float4*>(a + i * LA + k4);
          s0 = fmaf(-av.x, x[k4], s0);
          if (k4 + 1 < i) s1 = fmaf(-av.y, x[k4 + 1], s1);
          if (k4 + 2 < i) s2 = fmaf(-av.z, x[k4 + 2], s2);
          if (k4 + 3 < i) s3 = fmaf(-av.w, x[k4 + 3], s3);
        }
      }
      x[i] = (s0 + s1) + (s2 + s3);
    }
#pragma unroll
    for (int i = 0; i < S; ++i) dst[i * ld] = tf32_operand<TC>(x[i]);
  }
  __syncthreads();
}

}  // namespace

// Query blocks per item of the fp32 backward scan (path_bwd_scan_f32), and so per slice of its
// saved states.
template <int S>
constexpr int kScanQB = S == 32 ? 2 : 1;

// The stage launchers, for (S, DP) = (64, 32), (64, 64), (32, 128); TC: the products on TF32 tensor
// cores (the bf16 path), else plain fp32. Each enqueues its kernels on the thread's stream.

// path_prep.cu: G (path_gate_prefix_f64, or a memset without a gate), then prep (path_prep_f32 /
// path_prep_tf32): Q̃, K̃, U, C (C form) and, where sc.s_loc is set, S_loc.
template <int S, int DP, bool TC>
void launch_prep(const Dims& d, const InputsOf<TC>& in, const Scratch& sc);

// path_forward.cu: the forward scan (path_fwd_scan_f32), writing o (B, T, H, D) and lse (B, T, H).
template <int S, int DP>
void launch_forward_scan(const Dims& d, const Inputs& in, const Scratch& sc, float* o, float* lse);

// path_backward.cu: the persistent backward scan (path_bwd_scan_f32) on `ctas` CTAs, filling δ,
// dQ̃ and the accumulators dV, dK̃, dU, dW_scan, dG; scan_resident_ctas is the most CTAs resident
// on the current device at once.
template <int S, int DP>
int scan_resident_ctas();
template <int S, int DP>
void launch_backward_scan(const Dims& d, const Inputs& in, const Scratch& sc, const float* dout,
                          const float* o, const float* lse, int ctas);

// path_ut_backward.cu: after the scan, dC → dU, dW (path_bwd_dc_tf32, C form), the UT backward
// (path_bwd_ut_f32 / path_bwd_ut_tf32) writing dq, dk, dv, dw, dβ, and the gate's suffix sums
// (path_gate_suffix_f64) writing dlog_f (if not null).
template <int S, int DP, bool TC>
void launch_ut_backward(const Dims& d, const InputsOf<TC>& in, const Scratch& sc, Elem<TC>* dq, Elem<TC>* dk,
                        Elem<TC>* dv, float* dw, float* dbeta, float* dlog_f, const Elem<TC>* dout,
                        const float* lse);

}  // namespace pb::cuda::path
