// PaTH attention with the optional FoX gate, CUDA fp32, by the blockwise UT transform. The math,
// the names (Tm, U, M, E, QW, S_loc, Q̃, K̃, the scan R ← R − (R W_Jᵀ) U_J) and the derivation of the
// backward are in kernels/README.md, "PaTH attention"; kernels/cpu/path_attention.cpp is the
// reference this file ports. Per (b, h) the sequence is cut into blocks of S rows (S = 64, 32 for
// head dims above 64; the last block is partial and its rows past T are zero, so β = 0, w = 0
// there). DP is the head dim padded to 32, 64 or 128 (padded columns are zero).
//
// Forward (the gate kernel or a memset, then two launches):
//   gate     per b·h (with a gate): G_t = Σ_{u≤t} log_f_u (double), else G = 0 by a memset.
//   prep     per (block c, b·h): the UT transform, Q̃, K̃, U and the intra-block logits S_loc,
//            into scratch.
//   forward  per (b·h, query block I): online softmax over S_loc, then key blocks J = I−1 … 0:
//            z = R K̃_Jᵀ, online-softmax update, acc += p V_J, R ← R − (R W_Jᵀ) U_J
//            (P and X reuse [K̃_J; W_J]'s shared memory: two CTAs per SM).
// Backward (prep again, a memset of the accumulators, then three launches):
//   scan     persistent CTAs (as many as are resident at once) over the items (b·h, QB query
//            blocks stacked as QB·S rows; QB = 2 for S = 32, else 1): the forward scan from Q̃_I
//            stores R_J (the queries at key block J's right edge, J = I−1 … 0) in the CTA's own
//            (QB·Tp, DP) slice of scratch, I − 1 scan steps; then the reverse scan, J = 0 … I−1,
//            γ = dR carried left to right. Memory: resident CTAs × QB·Tp × DP floats, linear in T
//            (≈ 17 MB at 132 CTAs, T = 512, D = 64; ≈ 100 MB at T = 768, D = 128). dV, dK̃, dW,
//            dU of block J are summed over the items with float atomics; dQ̃ = γ at the end is
//            written by its owner.
//   ut_bwd   per (block c, b·h): the diagonal block's softmax backward and the UT transform in
//            reverse (README), writing dq, dk, dv, dw, dβ and dG.
//   gate     per b·h: dlog_f_t = Σ_{i≥t} dG_i (double).
// Products run on shared-memory tiles (path_tiles.cuh): 256 threads as a 16 × 16 grid, each thread
// holding the elements (ty + 16 i, tx + 16 j) of an M × N result in registers, fp32 FFMA; shared
// arrays have odd row strides (cols + 1), so rows and columns are both read without bank
// conflicts. prep and ut_bwd also come with TC = true: the same code on TF32 tensor-core tiles
// (strides cols + 4), reading bf16 q, k, v, dout and writing bf16 dq, dk, dv, which the bf16 path
// (path_attention.cuh) uses.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/path_attention.cuh"
#include "kernels/cuda/path_tiles.cuh"
#include "kernels/cuda/runtime.h"

namespace pb::cuda {
namespace {

// A block of rows on its way to shared memory: fetch(src, stride, n_rows, n_cols), then
// put(dst, ld): dst (ROWS × COLS fp32, row stride ld) ← src rows (row stride `stride`), zero at
// rows ≥ n_rows or columns ≥ n_cols (src is not read there). NT is the CTA's threads.
// Under TC (the bf16 path: src rows, dst and ld 16-byte aligned, n_cols a multiple of the chunk)
// fetch issues the thread's 16-byte loads into registers, and put stores them widened (bf16: exact,
// TF32 values already) or rounded to TF32 (fp32, tf32_operand). A kernel fetches all its blocks
// before it puts any, so their loads are in flight together: one memory latency, not one per block
// (v10). Scalar loads rounded one by one kept fewer loads in flight (prep 0.57 → 0.67 ms at D = 128).
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
// as registers allow (a runtime stride cost prep 61% and the UT backward 63% at D = 128; a forced
// full unroll spills).
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

// fp32 results to global fp32 or bf16 (rounded to nearest).
__device__ __forceinline__ void store(float* p, float x) { *p = x; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

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

// ---------------------------------------------------------------------------------------------
// prep: per (block c, b·h). G, then Q̃ = Q − QW U, K̃ = K − Mᵀ W, U and (if s_loc) S_loc.

// Tm is not formed, QW takes A's place once the substitution is done, M overwrites E, and S_loc goes
// from registers to scratch: two (S × S) arrays. TF32: 105 KB at <64, 64> (two CTAs per SM; 140 KB
// and one with QW and S_loc arrays of their own), 72 KB at <64, 32>, 77 KB at <32, 128>.
template <int S, int DP, bool TC>
constexpr int prep_smem_floats() {
  return S + 4 * S * (DP + kPad<TC>) + S * (S + 4) + S * (S + kPad<TC>);
}

template <int S, int DP, bool TC>
__global__ void __launch_bounds__(kThreads, 2) path_prep_kernel(Dims d, InputsOf<TC> in, Scratch sc) {
  constexpr int LB = DP + kPad<TC>, LS = S + kPad<TC>, LA = S + 4, NT = kThreads, NW = NT / 32;
  extern __shared__ __align__(16) float smem[];
  float* beta = smem;   // (S)
  float* q = beta + S;  // (S, DP) each, stride LB
  float* k = q + S * LB;
  float* w = k + S * LB;
  float* u = w + S * LB;
  float* a = u + S * LB;       // (S, S), stride LA: A, then QW
  float* e = a + S * LA;       // (S, S), stride LS: E, then M
  float* qw = a;
  float* m = e;

  static_assert((S + 4 * S * LB) % 4 == 0, "A is 16-byte aligned");
  const int c = blockIdx.x, bh = blockIdx.y, b = bh / d.H, h = bh % d.H;
  const int a0 = c * S, nv = min(S, d.T - a0);
  const int tid = threadIdx.x;
  const int64_t head_row = int64_t(bh) * d.Tp + a0;  // scratch row of the block's first position

  const int64_t stride = int64_t(d.H) * d.D, off = d.in_row(b, a0, h) * d.D;
  RowsIn<S, DP, NT, TC, Elem<TC>> q_in, k_in;
  RowsIn<S, DP, NT, TC, float> w_in;
  q_in.fetch(in.q + off, stride, nv, d.D);
  k_in.fetch(in.k + off, stride, nv, d.D);
  w_in.fetch(in.w + off, stride, nv, d.D);
  if (tid < S) beta[tid] = tid < nv ? in.beta[d.in_row(b, a0 + tid, h)] : 0.f;
  q_in.put(q, LB);
  k_in.put(k, LB);
  w_in.put(w, LB);
  __syncthreads();
  ut_solve<S, DP, TC, false, NT>(k, w, beta, a, e, nullptr, u, m);
  {
    TileOf<S, S, TC, NW> t;  // QW = tril_incl(Q Wᵀ), over A
    t.zero();
    mma(t, DP, 1.f, q, LB, 1, w, 1, LB);
    t.each([&](int r, int col, float& x) { qw[r * LA + col] = col <= r ? tf32_operand<TC>(x) : 0.f; });
  }
  __syncthreads();
  if (sc.s_loc) {  // S_loc = tril_incl(Q Kᵀ) − QW M (QW lower, M strictly lower: QW M strictly lower)
    TileOf<S, S, TC, NW> t;
    t.zero();
    mma(t, DP, 1.f, q, LB, 1, k, 1, LB);
    t.each([&](int r, int col, float& x) { x = col <= r ? x : 0.f; });
    mma(t, S, -1.f, qw, LA, 1, m, LS, 1);
    float* out = sc.s_loc + (int64_t(bh) * d.n_blocks + c) * S * S;  // (S, S)
    t.each([&](int r, int col, float& x) { out[r * S + col] = x; });
  }
  TileOf<S, DP, TC, NW> t;
  t.each([&](int r, int col, float& x) { x = q[r * LB + col]; });
  mma(t, S, -1.f, qw, LA, 1, u, LB, 1);  // Q̃ = Q − QW U
  t.each([&](int r, int col, float& x) { sc.q_hat[(head_row + r) * DP + col] = x; });
  t.each([&](int r, int col, float& x) { x = k[r * LB + col]; });
  mma(t, S, -1.f, m, 1, LS, w, LB, 1);  // K̃ = K − Mᵀ W
  t.each([&](int r, int col, float& x) { sc.k_hat[(head_row + r) * DP + col] = x; });
  for (int i = tid; i < S * DP; i += NT) sc.u[head_row * DP + i] = u[(i / DP) * LB + i % DP];
  if constexpr (kCForm<S, DP, TC>) {  // C = Wᵀ U (rows of W, U past T are zero)
    TileOf<DP, DP, TC, NW> cw;
    cw.zero();
    mma(cw, S, 1.f, w, 1, LB, u, LB, 1);
    float* out = sc.c + (int64_t(bh) * d.n_blocks + c) * DP * DP;  // (DP, DP)
    cw.each([&](int r, int col, float& x) { out[r * DP + col] = x; });
  }
}

// ---------------------------------------------------------------------------------------------
// forward: per (b·h, query block I), heaviest blocks first.

// [K̃_J; W_J] is dead once [Z, X] is in registers, so P and X take its place: (S, DP) = 64 × 64
// fits in 84 KB and two CTAs share an SM.
template <int S, int DP>
constexpr int forward_smem_floats() {
  constexpr int kw = 2 * S * (DP + 1), px = 2 * S * (S + 1);
  return 4 * S + 3 * S * (DP + 1) + (kw > px ? kw : px);
}

template <int S, int DP>
__global__ void __launch_bounds__(kThreads, 2) path_forward_kernel(Dims d, Inputs in, Scratch sc,
                                                                float* o, float* lse) {
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

// ---------------------------------------------------------------------------------------------
// scan backward: persistent CTAs, each taking the items blockIdx.x, blockIdx.x + gridDim.x, …
// (heaviest first). An item is (b·h, a group of QB consecutive query blocks I_s = base + s,
// s < QB), stacked as SQ = QB·S query rows: row r is position a0 + r, a0 = base·S (QB = 2 for
// S = 32, so every key-block product and atomic below covers 64 query rows; slots with I_s < 0,
// the bottom group of an odd block count, hold no rows). Query block I_s takes part in key
// block J only while J < I_s, i.e. rows r ≥ r0(J) = max(0, (J − base + 1)·S); the rows below r0
// are zero in R_J, zero in P, and their γ is frozen (it already is their dQ̃).
// Per item, first the forward scan from the top block stores the queries at every key block's
// right edge, R_J = Q̃_I P_{I−1} ⋯ P_{J+1} (J = I_top − 1 … 0, slot s joining with Q̃_{I_s} at
// J = I_s − 1), in the CTA's own slice of sc.r_states (n_blocks · SQ × DP: linear in T, one
// slice per resident CTA). Then for J = 0 … I_top − 1, with X_J = R_J W_Jᵀ and γ = dR_{J−1}:
//   P = exp(scale·z + G_i − G_j − lse_i), dS = P ⊙ (dout V_Jᵀ − δ), dZ = scale·dS
//   dV_J += Pᵀ dout, dK̃_J += dZᵀ R_J, dU_J −= X_Jᵀ γ, Y = γ U_Jᵀ, dW_J −= Yᵀ R_J (J ≥ 1)
//   γ ← γ + dZ K̃_J − Y W_J (rows ≥ r0);   at the end dQ̃ = γ

template <int S>
constexpr int kScanQB = S == 32 ? 2 : 1;  // query blocks per scan item

template <int S, int DP>
constexpr int scan_smem_floats() {
  constexpr int SQ = kScanQB<S> * S;
  return 2 * SQ + 2 * S + 2 * SQ + S + 3 * SQ * (DP + 1) + 4 * S * (DP + 1) + 2 * SQ * (S + 1) +
         SQ * (2 * S + 1);
}

template <int S, int DP>
__global__ void __launch_bounds__(kThreads) path_scan_backward_kernel(Dims d, Inputs in, Scratch sc,
                                                                      const float* dout,
                                                                      const float* o,
                                                                      const float* lse) {
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

// ---------------------------------------------------------------------------------------------
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

// 256 threads (8 warps; one CTA per SM by shared memory at <64, 64>): 512 were 2.3% slower at
// B = 8, T = 4096, D = 64 once TF32 operands were stored rounded (v9; 512 had been the faster
// before), and in v10 4.5% slower there and 6.8% at D = 128 (B = 4, T = 4096).
template <int S, int DP, bool TC>
__global__ void __launch_bounds__(kThreads)
    path_ut_backward_kernel(Dims d, InputsOf<TC> in, Scratch sc, const Elem<TC>* dout, const float* lse,
                            Elem<TC>* dq, Elem<TC>* dk, Elem<TC>* dv, float* dw, float* dbeta) {
  constexpr int LB = DP + kPad<TC>, LS = S + kPad<TC>;
  constexpr int NT = kThreads, NW = NT / 32;
  // k loops unrolled fully at D = 128 (1.57 → 1.41 ms at B = 4, T = 4096); at D = 64 that costs
  // 2.37 → 2.88 ms at B = 8, T = 4096 (v10), so there it stays 2.
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

// C form (kCForm): per (block c, b·h), the scan's dC (C = Wᵀ U) as dU = W dC and dW_scan = U dCᵀ,
// written over the (untouched) accumulators du, dw_scan that the UT backward reads.
template <int S, int DP>
constexpr int c_backward_smem_floats() {
  return 2 * S * (DP + kPad<true>) + DP * (DP + kPad<true>);
}

template <int S, int DP>
__global__ void __launch_bounds__(kThreads) path_c_backward_kernel(Dims d, InputsOf<true> in, Scratch sc) {
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

// G_t = Σ_{u≤t} log_f_u per b·h (double), one CTA each; the padded rows T ≤ t < Tp hold G_{T−1}.
// (v10: prep summed, per block, all of log_f before it, O(T²/S) reads, and a serial prefix.)
__global__ void __launch_bounds__(kThreads) path_gate_forward_kernel(Dims d, const float* log_f, double* g) {
  const int bh = blockIdx.x, b = bh / d.H, h = bh % d.H;
  double* gh = g + int64_t(bh) * d.Tp;
  cta_prefix_sums(
      d.T, [&](int t) { return double(log_f[d.in_row(b, t, h)]); },
      [&](int t, double s) {
        gh[t] = s;
        if (t == d.T - 1)
          for (int p = d.T; p < d.Tp; ++p) gh[p] = s;
      });
}

// dlog_f_t = Σ_{i≥t} dG_i per b·h (double): the prefix sums of dG read from the end, one CTA each.
// (v10: one warp per b·h, 32 positions at a time, T / 32 dependent steps.)
__global__ void __launch_bounds__(kThreads) path_gate_backward_kernel(Dims d, const float* dg, float* dlog_f) {
  const int bh = blockIdx.x, b = bh / d.H, h = bh % d.H, last = d.T - 1;
  const float* gh = dg + int64_t(bh) * d.Tp;
  cta_prefix_sums(
      d.T, [&](int i) { return double(gh[last - i]); },
      [&](int i, double s) { dlog_f[d.in_row(b, last - i, h)] = float(s); });
}

// ---------------------------------------------------------------------------------------------
// Host side

template <int S, int DP, bool TC>
Scratch carve(char* base, const Dims& d, bool backward, int scan_ctas, size_t* bytes) {
  const size_t bh = size_t(d.B) * d.H, rows = bh * d.Tp, c_size = bh * d.n_blocks * DP * DP;
  constexpr bool cf = kCForm<S, DP, TC>;
  Carver cv{base};
  Scratch sc{};
  sc.g = cv.take<double>(rows);
  sc.q_hat = cv.take<float>(rows * DP);
  sc.k_hat = cv.take<float>(rows * DP);
  sc.u = cv.take<float>(rows * DP);
  if (cf) sc.c = cv.take<float>(c_size);
  if (!backward) {
    sc.s_loc = cv.take<float>(rows * S);
  } else {
    sc.delta = cv.take<float>(rows);
    sc.dq_hat = cv.take<float>(rows * DP);
    sc.dk_hat = cv.take<float>(rows * DP);  // the atomic accumulators, zeroed together: dk_hat … dg
    sc.du = cv.take<float>(rows * DP);
    sc.dw_scan = cv.take<float>(rows * DP);
    sc.dv = cv.take<float>(rows * DP);
    if (cf) sc.dc = cv.take<float>(c_size);
    sc.dg = cv.take<float>(rows);
    sc.r_states = cv.take<float>(size_t(scan_ctas) * kScanQB<S> * d.Tp * DP);
  }
  *bytes = cv.used;
  return sc;
}

Dims make_dims(const PathAttentionArgs& args, int S) {
  const AttnShape& sh = args.shape;
  const int n = ceil_div(sh.T, S);
  return {sh.B, sh.T, sh.H, sh.D, n, n * S, float(args.scale)};
}

// TC: the products on TF32 tensor cores (the bf16 path), else plain fp32.
template <int S, int DP, bool TC>
void launch_prep(const Dims& d, const InputsOf<TC>& in, const Scratch& sc) {
  constexpr int bytes = prep_smem_floats<S, DP, TC>() * int(sizeof(float));
  static_assert(bytes <= 232448, "prep shared memory");
  if (in.log_f) {
    path_gate_forward_kernel<<<d.B * d.H, kThreads, 0, stream()>>>(d, in.log_f, sc.g);
    PB_LAUNCH_CHECK();
  } else {
    PB_CUDA_CHECK(cudaMemsetAsync(sc.g, 0, sizeof(double) * d.B * d.H * d.Tp, stream()));
  }
  set_smem(path_prep_kernel<S, DP, TC>, bytes);
  path_prep_kernel<S, DP, TC><<<dim3(d.n_blocks, d.B * d.H), kThreads, bytes, stream()>>>(d, in, sc);
  PB_LAUNCH_CHECK();
}

template <int S, int DP>
void forward_impl(float* o, float* lse, const Inputs& in, const PathAttentionArgs& args) {
  const Dims d = make_dims(args, S);
  size_t bytes = 0;
  carve<S, DP, false>(nullptr, d, false, 0, &bytes);
  const Scratch sc = carve<S, DP, false>(static_cast<char*>(scratch(bytes)), d, false, 0, &bytes);
  launch_prep<S, DP, false>(d, in, sc);
  constexpr int fwd_bytes = forward_smem_floats<S, DP>() * int(sizeof(float));
  static_assert(fwd_bytes <= 232448, "forward shared memory");
  set_smem(path_forward_kernel<S, DP>, fwd_bytes);
  path_forward_kernel<S, DP><<<dim3(d.B * d.H, d.n_blocks), kThreads, fwd_bytes, stream()>>>(d, in, sc, o, lse);
  PB_LAUNCH_CHECK();
}

// The persistent scan's grid: the CTAs resident on the whole current device at once, after
// opting its shared memory in.
template <int S, int DP>
int scan_resident_ctas() {
  constexpr int bytes = scan_smem_floats<S, DP>() * int(sizeof(float));
  static_assert(bytes <= 232448, "scan shared memory");
  set_smem(path_scan_backward_kernel<S, DP>, bytes);
  int device = 0, sms = 0, per_sm = 0;
  PB_CUDA_CHECK(cudaGetDevice(&device));
  PB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  PB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, path_scan_backward_kernel<S, DP>,
                                                              kThreads, bytes));
  return sms * std::max(per_sm, 1);
}

// Prep and zeroed accumulators for the backward, in scratch; `scan_ctas` slices of scan states.
template <int S, int DP, bool TC>
Scratch backward_begin(const Dims& d, const InputsOf<TC>& in, int scan_ctas) {
  size_t bytes = 0;
  carve<S, DP, TC>(nullptr, d, true, scan_ctas, &bytes);
  const Scratch sc = carve<S, DP, TC>(static_cast<char*>(scratch(bytes)), d, true, scan_ctas, &bytes);
  launch_prep<S, DP, TC>(d, in, sc);
  const size_t acc_bytes = size_t(reinterpret_cast<char*>(sc.dg) - reinterpret_cast<char*>(sc.dk_hat)) +
                           size_t(d.B) * d.H * d.Tp * sizeof(float);
  PB_CUDA_CHECK(cudaMemsetAsync(sc.dk_hat, 0, acc_bytes, stream()));
  return sc;
}

// After the scan: the UT backward writes dq, dk, dv, dw, dβ; the gate kernel dlog_f.
template <int S, int DP, bool TC>
void backward_end(const Dims& d, const InputsOf<TC>& in, const Scratch& sc, Elem<TC>* dq, Elem<TC>* dk,
                  Elem<TC>* dv, float* dw, float* dbeta, float* dlog_f, const Elem<TC>* dout,
                  const float* lse) {
  if constexpr (kCForm<S, DP, TC>) {
    constexpr int c_bytes = c_backward_smem_floats<S, DP>() * int(sizeof(float));
    set_smem(path_c_backward_kernel<S, DP>, c_bytes);
    path_c_backward_kernel<S, DP><<<dim3(d.n_blocks, d.B * d.H), kThreads, c_bytes, stream()>>>(d, in, sc);
    PB_LAUNCH_CHECK();
  }
  constexpr int ut_bytes = ut_backward_smem_floats<S, DP, TC>() * int(sizeof(float));
  static_assert(ut_bytes <= 232448, "UT backward shared memory");
  set_smem(path_ut_backward_kernel<S, DP, TC>, ut_bytes);
  path_ut_backward_kernel<S, DP, TC><<<dim3(d.n_blocks, d.B * d.H), kThreads, ut_bytes, stream()>>>(
      d, in, sc, dout, lse, dq, dk, dv, dw, dbeta);
  PB_LAUNCH_CHECK();

  if (dlog_f) {
    path_gate_backward_kernel<<<d.B * d.H, kThreads, 0, stream()>>>(d, sc.dg, dlog_f);
    PB_LAUNCH_CHECK();
  }
}

template <int S, int DP>
void backward_impl(float* dq, float* dk, float* dv, float* dw, float* dbeta, float* dlog_f,
                   const float* dout, const float* o, const float* lse, const Inputs& in,
                   const PathAttentionArgs& args) {
  const Dims d = make_dims(args, S);
  constexpr int QB = kScanQB<S>;
  const int scan_ctas = std::min(scan_resident_ctas<S, DP>(), d.B * d.H * ((d.n_blocks + QB - 1) / QB));
  const Scratch sc = backward_begin<S, DP, false>(d, in, scan_ctas);
  constexpr int scan_bytes = scan_smem_floats<S, DP>() * int(sizeof(float));
  path_scan_backward_kernel<S, DP><<<scan_ctas, kThreads, scan_bytes, stream()>>>(d, in, sc, dout, o, lse);
  PB_LAUNCH_CHECK();
  backward_end<S, DP, false>(d, in, sc, dq, dk, dv, dw, dbeta, dlog_f, dout, lse);
}

template <int S, int DP>
path::Accumulators begin_impl(const InputsOf<true>& in, const PathAttentionArgs& args) {
  const Dims d = make_dims(args, S);
  const Scratch sc = backward_begin<S, DP, true>(d, in, 0);
  return {{S, DP, d.n_blocks, d.Tp, sc.g, sc.q_hat, sc.k_hat, sc.u, sc.c, nullptr},
          sc.delta, sc.dq_hat, sc.dk_hat, sc.du, sc.dw_scan, sc.dv, sc.dc, sc.dg};
}

template <int S, int DP>
void end_impl(const path::Accumulators& a, const InputsOf<true>& in, const PathAttentionArgs& args,
              __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, float* dw, float* dbeta,
              float* dlog_f, const __nv_bfloat16* dout, const float* lse) {
  Scratch sc{};  // the Scratch of begin_impl (the scan states are not needed here)
  sc.g = const_cast<double*>(a.g);
  sc.q_hat = const_cast<float*>(a.q_hat);
  sc.k_hat = const_cast<float*>(a.k_hat);
  sc.u = const_cast<float*>(a.u);
  sc.delta = a.delta, sc.dq_hat = a.dq_hat, sc.dk_hat = a.dk_hat, sc.du = a.du;
  sc.dw_scan = a.dw_scan, sc.dv = a.dv, sc.dc = a.dc, sc.dg = a.dg;
  backward_end<S, DP, true>(make_dims(args, S), in, sc, dq, dk, dv, dw, dbeta, dlog_f, dout, lse);
}

void check_head_dim(int D) {
  if (D < 1 || D > 128)
    throw_cuda_error("path_attention", "head dim must be in [1, 128]", __FILE__, __LINE__);
}

template <int S, int DP>
path::Prepared prepare_impl(const InputsOf<true>& in, const PathAttentionArgs& args) {
  const Dims d = make_dims(args, S);
  size_t bytes = 0;
  carve<S, DP, true>(nullptr, d, false, 0, &bytes);
  const Scratch sc = carve<S, DP, true>(static_cast<char*>(scratch(bytes)), d, false, 0, &bytes);
  launch_prep<S, DP, true>(d, in, sc);
  return {S, DP, d.n_blocks, d.Tp, sc.g, sc.q_hat, sc.k_hat, sc.u, sc.c, sc.s_loc};
}

}  // namespace

namespace path {

Prepared prepare(const bf16_bits* q, const bf16_bits* k, const float* w, const float* beta,
                 const float* log_f, const PathAttentionArgs& args) {
  check_head_dim(args.shape.D);
  const InputsOf<true> in{bf(q), bf(k), nullptr, w, beta, log_f};
  const int D = args.shape.D;
  return D <= 32 ? prepare_impl<64, 32>(in, args) : D <= 64 ? prepare_impl<64, 64>(in, args)
                                                            : prepare_impl<32, 128>(in, args);
}

Accumulators backward_begin(const bf16_bits* q, const bf16_bits* k, const float* w, const float* beta,
                            const float* log_f, const PathAttentionArgs& args) {
  check_head_dim(args.shape.D);
  const InputsOf<true> in{bf(q), bf(k), nullptr, w, beta, log_f};
  const int D = args.shape.D;
  return D <= 32 ? begin_impl<64, 32>(in, args) : D <= 64 ? begin_impl<64, 64>(in, args)
                                                          : begin_impl<32, 128>(in, args);
}

void backward_end(const Accumulators& acc, bf16_bits* dq, bf16_bits* dk, bf16_bits* dv, float* dw,
                  float* dbeta, float* dlog_f, const bf16_bits* dout, const float* lse,
                  const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const float* w,
                  const float* beta, const float* log_f, const PathAttentionArgs& args) {
  const InputsOf<true> in{bf(q), bf(k), bf(v), w, beta, log_f};
  const int D = args.shape.D;
  if (D <= 32)
    end_impl<64, 32>(acc, in, args, bf(dq), bf(dk), bf(dv), dw, dbeta, dlog_f, bf(dout), lse);
  else if (D <= 64)
    end_impl<64, 64>(acc, in, args, bf(dq), bf(dk), bf(dv), dw, dbeta, dlog_f, bf(dout), lse);
  else
    end_impl<32, 128>(acc, in, args, bf(dq), bf(dk), bf(dv), dw, dbeta, dlog_f, bf(dout), lse);
}

}  // namespace path

// Precision::BF16 (runtime.h): the same ops through the bf16 kernels (attention_mixed.cu).
void path_attention_forward_mixed(float* o, float* lse, const float* q, const float* k,
                                  const float* v, const float* w, const float* beta,
                                  const float* log_f, const PathAttentionArgs& args);
void path_attention_backward_mixed(float* dq, float* dk, float* dv, float* dw, float* dbeta,
                                   float* dlog_f, const float* dout, const float* o,
                                   const float* lse, const float* q, const float* k,
                                   const float* v, const float* w, const float* beta,
                                   const float* log_f, const PathAttentionArgs& args);

void path_attention_forward(float* o, float* lse, const float* q, const float* k, const float* v,
                            const float* w, const float* beta, const float* log_f,
                            const PathAttentionArgs& args) {
  if (precision() == Precision::BF16)
    return path_attention_forward_mixed(o, lse, q, k, v, w, beta, log_f, args);
  const AttnShape& sh = args.shape;
  if (sh.B == 0 || sh.T == 0 || sh.H == 0) return;
  check_head_dim(sh.D);
  const Inputs in{q, k, v, w, beta, log_f};
  if (sh.D <= 32)
    forward_impl<64, 32>(o, lse, in, args);
  else if (sh.D <= 64)
    forward_impl<64, 64>(o, lse, in, args);
  else
    forward_impl<32, 128>(o, lse, in, args);
}

void path_attention_backward(float* dq, float* dk, float* dv, float* dw, float* dbeta, float* dlog_f,
                             const float* dout, const float* o, const float* lse, const float* q,
                             const float* k, const float* v, const float* w, const float* beta,
                             const float* log_f, const PathAttentionArgs& args) {
  if (precision() == Precision::BF16)
    return path_attention_backward_mixed(dq, dk, dv, dw, dbeta, dlog_f, dout, o, lse, q, k, v, w,
                                         beta, log_f, args);
  const AttnShape& sh = args.shape;
  if (sh.B == 0 || sh.T == 0 || sh.H == 0) return;
  check_head_dim(sh.D);
  const Inputs in{q, k, v, w, beta, log_f};
  if (sh.D <= 32)
    backward_impl<64, 32>(dq, dk, dv, dw, dbeta, dlog_f, dout, o, lse, in, args);
  else if (sh.D <= 64)
    backward_impl<64, 64>(dq, dk, dv, dw, dbeta, dlog_f, dout, o, lse, in, args);
  else
    backward_impl<32, 128>(dq, dk, dv, dw, dbeta, dlog_f, dout, o, lse, in, args);
}

}  // namespace pb::cuda
