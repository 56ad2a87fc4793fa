// PaTH prep, the per-block kernels before either scan (fp32 and TF32 tensor cores): the gate's
// prefix sums G and, per block of S rows, the UT transform with the queries and keys moved to the
// block's edges (kernels/README.md, "PaTH attention"; the stage map is in path_common.cuh).
//   path_gate_prefix_f64  per b·h: G_t = Σ_{u≤t} log_f_u (double)
//   path_prep_f32         per (block c, b·h): Q̃ = Q − QW U, K̃ = K − Mᵀ W, U, S_loc (fp32 FFMA)
//   path_prep_tf32        the same on TF32 tensor cores from bf16 q, k, and C_J = W_Jᵀ U_J (C form)
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/path_common.cuh"
#include "kernels/cuda/path_tiles.cuh"
#include "core/cuda/runtime.h"

namespace pb::cuda::path {
namespace {

// G_t = Σ_{u≤t} log_f_u per b·h (double), one CTA each; the padded rows T ≤ t < Tp hold G_{T−1}.
__global__ void __launch_bounds__(kThreads) path_gate_prefix_f64(Dims d, const float* log_f, double* g) {
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

// Tm is not formed, QW takes A's place once the substitution is done, M overwrites E, and S_loc goes
// from registers to scratch: two (S × S) arrays. TF32: 105 KB at <64, 64> (two CTAs per SM; 140 KB
// and one with QW and S_loc arrays of their own), 72 KB at <64, 32>, 77 KB at <32, 128>.
template <int S, int DP, bool TC>
constexpr int prep_smem_floats() {
  return S + 4 * S * (DP + kPad<TC>) + S * (S + 4) + S * (S + kPad<TC>);
}

template <int S, int DP, bool TC>
__device__ __forceinline__ void prep(const Dims& d, const InputsOf<TC>& in, const Scratch& sc) {
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

// The kernels, one per arithmetic.
template <int S, int DP>
__global__ void __launch_bounds__(kThreads, 2) path_prep_f32(Dims d, Inputs in, Scratch sc) {
  prep<S, DP, false>(d, in, sc);
}
template <int S, int DP>
__global__ void __launch_bounds__(kThreads, 2) path_prep_tf32(Dims d, InputsOf<true> in, Scratch sc) {
  prep<S, DP, true>(d, in, sc);
}
template <int S, int DP, bool TC>
constexpr auto prep_kernel() {
  if constexpr (TC) return path_prep_tf32<S, DP>;
  else return path_prep_f32<S, DP>;
}

}  // namespace

template <int S, int DP, bool TC>
void launch_prep(const Dims& d, const InputsOf<TC>& in, const Scratch& sc) {
  constexpr int bytes = prep_smem_floats<S, DP, TC>() * int(sizeof(float));
  static_assert(bytes <= 232448, "prep shared memory");
  if (in.log_f) {
    path_gate_prefix_f64<<<d.B * d.H, kThreads, 0, stream()>>>(d, in.log_f, sc.g);
    PB_LAUNCH_CHECK();
  } else {
    PB_CUDA_CHECK(cudaMemsetAsync(sc.g, 0, sizeof(double) * d.B * d.H * d.Tp, stream()));
  }
  constexpr auto kernel = prep_kernel<S, DP, TC>();
  set_smem(kernel, bytes);
  kernel<<<dim3(d.n_blocks, d.B * d.H), kThreads, bytes, stream()>>>(d, in, sc);
  PB_LAUNCH_CHECK();
}

template void launch_prep<64, 32, false>(const Dims&, const Inputs&, const Scratch&);
template void launch_prep<64, 64, false>(const Dims&, const Inputs&, const Scratch&);
template void launch_prep<32, 128, false>(const Dims&, const Inputs&, const Scratch&);
template void launch_prep<64, 32, true>(const Dims&, const InputsOf<true>&, const Scratch&);
template void launch_prep<64, 64, true>(const Dims&, const InputsOf<true>&, const Scratch&);
template void launch_prep<32, 128, true>(const Dims&, const InputsOf<true>&, const Scratch&);

}  // namespace pb::cuda::path
