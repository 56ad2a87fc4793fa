// The bf16 PaTH path's packing kernels (stage map in path_bf16.cuh): prep's fp32 K̃, U, W and C
// rounded to the bf16 / f16 copies that the scans stage with 16-byte cp.async.
//   path_pack_kwu_bf16  K̃ → bf16; outside the C form also W, U → f16 (and bf16 for the backward)
//   path_pack_c_bf16    C form: C → f16 (and bf16 for the backward)
#include <algorithm>

#include "kernels/cuda/path_bf16.cuh"
#include "core/cuda/runtime.h"

namespace pb::cuda::path {
namespace {

// K̃ → bf16 from prep's (B·H, Tp, D) rows; unless wh is null (the C form), also U → f16 and
// W → f16 from (B, T, H, D) (0 at t ≥ T), and with wb, ub (the backward) bf16 copies of W and U.
__global__ void path_pack_kwu_bf16(__nv_bfloat16* kb, __half* wh, __half* uh, __nv_bfloat16* wb,
                                   __nv_bfloat16* ub, const float* k_hat, const float* u, const float* w,
                                   int T, int H, int D, int Tp, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    kb[i] = __float2bfloat16_rn(k_hat[i]);
    if (!wh) continue;
    const int64_t row = i / D;  // b·h·Tp + t
    const int c = int(i - row * D), t = int(row % Tp), bh = int(row / Tp), b = bh / H, h = bh % H;
    const float wi = t < T ? w[((int64_t(b) * T + t) * H + h) * D + c] : 0.f;
    uh[i] = __float2half_rn(u[i]);
    wh[i] = __float2half_rn(wi);
    if (wb) wb[i] = __float2bfloat16_rn(wi), ub[i] = __float2bfloat16_rn(u[i]);
  }
}

// The C form: C → f16, and with cb (the backward) also → bf16.
__global__ void path_pack_c_bf16(__half* ch, __nv_bfloat16* cb, const float* c, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    ch[i] = __float2half_rn(c[i]);
    if (cb) cb[i] = __float2bfloat16_rn(c[i]);
  }
}

void pack(__nv_bfloat16* kb, __half* wh, __half* uh, __nv_bfloat16* wb, __nv_bfloat16* ub,
          const Prepared& p, const float* w, const AttnShape& sh) {
  const int64_t n = int64_t(sh.B) * sh.H * p.Tp * sh.D;
  path_pack_kwu_bf16<<<int(std::min<int64_t>((n + 255) / 256, 8192)), 256, 0, stream()>>>(
      kb, wh, uh, wb, ub, p.k_hat, p.u, w, sh.T, sh.H, sh.D, p.Tp, n);
  PB_LAUNCH_CHECK();
}

void pack_c(__half* ch, __nv_bfloat16* cb, const float* c, int64_t n) {
  path_pack_c_bf16<<<int(std::min<int64_t>((n + 255) / 256, 8192)), 256, 0, stream()>>>(ch, cb, c, n);
  PB_LAUNCH_CHECK();
}

}  // namespace

Packed take_packed(Carver& cv, const AttnShape& sh, int S, bool backward) {
  const int n_blocks = ceil_div(sh.T, S);
  const int64_t packed = int64_t(sh.B) * sh.H * n_blocks * S * sh.D;  // (B·H, Tp, D)
  const int64_t c_size = int64_t(sh.B) * sh.H * n_blocks * sh.D * sh.D;
  Packed p;
  p.kb = cv.take<__nv_bfloat16>(packed);
  if (c_form(S, sh.D)) {
    p.ch = cv.take<__half>(c_size);
    if (backward) p.cb = cv.take<__nv_bfloat16>(c_size);
  } else {
    p.wh = cv.take<__half>(packed);
    p.uh = cv.take<__half>(packed);
    if (backward) p.wb = cv.take<__nv_bfloat16>(packed), p.ub = cv.take<__nv_bfloat16>(packed);
  }
  return p;
}
void pack_all(const Packed& pk, const Prepared& p, const float* w, const AttnShape& sh) {
  pack(pk.kb, pk.wh, pk.uh, pk.wb, pk.ub, p, w, sh);
  if (pk.ch) pack_c(pk.ch, pk.cb, p.c, int64_t(sh.B) * sh.H * p.n_blocks * sh.D * sh.D);
}

void check_shape(const AttnShape& sh) {
  if (sh.D != 32 && sh.D != 64 && sh.D != 128)
    throw_cuda_error("path_attention_bf16", "head dim must be 32, 64 or 128", __FILE__, __LINE__);
}

}  // namespace pb::cuda::path
