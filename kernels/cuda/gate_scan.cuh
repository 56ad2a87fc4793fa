// The FoX gate's prefix and suffix sums, shared by the softmax attention kernels (fp32
// softmax_attention.cu and bf16 flash_attention_bf16.cu). Included after common.cuh; internal
// linkage, one copy per .cu file.
#pragma once
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/ops.h"

namespace pb::cuda {
namespace {

constexpr int kScanThreads = 256;

// Per (b, h) = blockIdx.x, in double: out_t = Σ_{u≤t} x_u (prefix) or Σ_{u≥t} x_u (kSuffix), with
// x_t = a_t − c_t (c may be null). Chunks of 256 steps: warp scans, then the warps before.
template <bool kSuffix, class Out>
__global__ void __launch_bounds__(kScanThreads)
    fox_gate_scan_kernel(Out* __restrict__ out,        // (B, T, H)
                         const float* __restrict__ a,  // (B, T, H)
                         const float* __restrict__ c,  // (B, T, H) or null
                         int T, int H) {
  constexpr int kWarps = kScanThreads / 32;
  __shared__ double warp_total[kWarps];
  const int64_t base = int64_t(blockIdx.x / H) * T * H + blockIdx.x % H;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  double carry = 0;  // Σ x over the previous chunks
  for (int s0 = 0; s0 < T; s0 += kScanThreads) {
    const int step = s0 + threadIdx.x;
    const int64_t idx = base + int64_t(kSuffix ? T - 1 - step : step) * H;
    double x = 0;
    if (step < T) x = double(a[idx]) - (c ? double(c[idx]) : 0.0);
    // inclusive scan over the warp's steps
    for (int o = 1; o < 32; o <<= 1) {
      const double y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += y;
    }
    if (lane == 31) warp_total[warp] = x;
    __syncthreads();
    double before = carry, chunk = carry;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) before += warp_total[w];
      chunk += warp_total[w];
    }
    if (step < T) out[idx] = Out(before + x);
    carry = chunk;
    __syncthreads();  // warp_total is rewritten by the next chunk
  }
}

// G_t = Σ_{u≤t} log_f_u per (b, h), in double.
void gate_prefix(double* G, const float* log_f, const AttnShape& s) {
  fox_gate_scan_kernel<false, double><<<s.B * s.H, kScanThreads, 0, stream()>>>(G, log_f, nullptr, s.T, s.H);
  PB_LAUNCH_CHECK();
}

// dlog_f_u = Σ_{t≥u} dG_t with dG_t = row_t − col_t (Σ_j dS_tj − Σ_i dS_it), per (b, h).
void gate_backward(float* dlog_f, const float* row, const float* col, const AttnShape& s) {
  fox_gate_scan_kernel<true, float><<<s.B * s.H, kScanThreads, 0, stream()>>>(dlog_f, row, col, s.T, s.H);
  PB_LAUNCH_CHECK();
}

}  // namespace
}  // namespace pb::cuda
