// PaTH attention with the optional FoX gate, CUDA: the host side of the fp32 kernels. It carves
// scratch, picks the block size S and padded head dim DP, and runs the stages in order (stage map
// in path_common.cuh): forward = prep, forward scan; backward = prep, backward scan, UT backward.
// It also serves the bf16 path (path_bf16_forward.cu, path_bf16_backward.cu)
// the TF32 prep and UT backward through path_attention.cuh, and hands the public fp32 entry points
// over to attention_mixed.cu at precision bf16.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstddef>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/path_attention.cuh"
#include "kernels/cuda/path_common.cuh"
#include "core/cuda/runtime.h"

namespace pb::cuda::path {
namespace {

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

template <int S, int DP>
void forward_impl(float* o, float* lse, const Inputs& in, const PathAttentionArgs& args) {
  const Dims d = make_dims(args, S);
  size_t bytes = 0;
  carve<S, DP, false>(nullptr, d, false, 0, &bytes);
  const Scratch sc = carve<S, DP, false>(static_cast<char*>(scratch(bytes)), d, false, 0, &bytes);
  launch_prep<S, DP, false>(d, in, sc);
  launch_forward_scan<S, DP>(d, in, sc, o, lse);
}

// Prep and zeroed accumulators for the backward, in scratch; `scan_ctas` slices of scan states.
template <int S, int DP, bool TC>
Scratch prep_for_backward(const Dims& d, const InputsOf<TC>& in, int scan_ctas) {
  size_t bytes = 0;
  carve<S, DP, TC>(nullptr, d, true, scan_ctas, &bytes);
  const Scratch sc = carve<S, DP, TC>(static_cast<char*>(scratch(bytes)), d, true, scan_ctas, &bytes);
  launch_prep<S, DP, TC>(d, in, sc);
  const size_t acc_bytes = size_t(reinterpret_cast<char*>(sc.dg) - reinterpret_cast<char*>(sc.dk_hat)) +
                           size_t(d.B) * d.H * d.Tp * sizeof(float);
  PB_CUDA_CHECK(cudaMemsetAsync(sc.dk_hat, 0, acc_bytes, stream()));
  return sc;
}

template <int S, int DP>
void backward_impl(float* dq, float* dk, float* dv, float* dw, float* dbeta, float* dlog_f,
                   const float* dout, const float* o, const float* lse, const Inputs& in,
                   const PathAttentionArgs& args) {
  const Dims d = make_dims(args, S);
  constexpr int QB = kScanQB<S>;
  const int scan_ctas = std::min(scan_resident_ctas<S, DP>(), d.B * d.H * ((d.n_blocks + QB - 1) / QB));
  const Scratch sc = prep_for_backward<S, DP, false>(d, in, scan_ctas);
  launch_backward_scan<S, DP>(d, in, sc, dout, o, lse, scan_ctas);
  launch_ut_backward<S, DP, false>(d, in, sc, dq, dk, dv, dw, dbeta, dlog_f, dout, lse);
}

template <int S, int DP>
Accumulators begin_impl(const InputsOf<true>& in, const PathAttentionArgs& args) {
  const Dims d = make_dims(args, S);
  const Scratch sc = prep_for_backward<S, DP, true>(d, in, 0);
  return {{S, DP, d.n_blocks, d.Tp, sc.g, sc.q_hat, sc.k_hat, sc.u, sc.c, nullptr},
          sc.delta, sc.dq_hat, sc.dk_hat, sc.du, sc.dw_scan, sc.dv, sc.dc, sc.dg};
}

template <int S, int DP>
void end_impl(const Accumulators& a, const InputsOf<true>& in, const PathAttentionArgs& args,
              __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv, float* dw, float* dbeta,
              float* dlog_f, const __nv_bfloat16* dout, const float* lse) {
  Scratch sc{};  // the Scratch of begin_impl (the scan states are not needed here)
  sc.g = const_cast<double*>(a.g);
  sc.q_hat = const_cast<float*>(a.q_hat);
  sc.k_hat = const_cast<float*>(a.k_hat);
  sc.u = const_cast<float*>(a.u);
  sc.delta = a.delta, sc.dq_hat = a.dq_hat, sc.dk_hat = a.dk_hat, sc.du = a.du;
  sc.dw_scan = a.dw_scan, sc.dv = a.dv, sc.dc = a.dc, sc.dg = a.dg;
  launch_ut_backward<S, DP, true>(make_dims(args, S), in, sc, dq, dk, dv, dw, dbeta, dlog_f, dout, lse);
}

void check_head_dim(int D) {
  if (D < 1 || D > 128)
    throw_cuda_error("path_attention", "head dim must be in [1, 128]", __FILE__, __LINE__);
}

template <int S, int DP>
Prepared prepare_impl(const InputsOf<true>& in, const PathAttentionArgs& args) {
  const Dims d = make_dims(args, S);
  size_t bytes = 0;
  carve<S, DP, true>(nullptr, d, false, 0, &bytes);
  const Scratch sc = carve<S, DP, true>(static_cast<char*>(scratch(bytes)), d, false, 0, &bytes);
  launch_prep<S, DP, true>(d, in, sc);
  return {S, DP, d.n_blocks, d.Tp, sc.g, sc.q_hat, sc.k_hat, sc.u, sc.c, sc.s_loc};
}

}  // namespace

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

}  // namespace pb::cuda::path

namespace pb::cuda {

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
  path::check_head_dim(sh.D);
  const path::Inputs in{q, k, v, w, beta, log_f};
  if (sh.D <= 32)
    path::forward_impl<64, 32>(o, lse, in, args);
  else if (sh.D <= 64)
    path::forward_impl<64, 64>(o, lse, in, args);
  else
    path::forward_impl<32, 128>(o, lse, in, args);
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
  path::check_head_dim(sh.D);
  const path::Inputs in{q, k, v, w, beta, log_f};
  if (sh.D <= 32)
    path::backward_impl<64, 32>(dq, dk, dv, dw, dbeta, dlog_f, dout, o, lse, in, args);
  else if (sh.D <= 64)
    path::backward_impl<64, 64>(dq, dk, dv, dw, dbeta, dlog_f, dout, o, lse, in, args);
  else
    path::backward_impl<32, 128>(dq, dk, dv, dw, dbeta, dlog_f, dout, o, lse, in, args);
}

}  // namespace pb::cuda
