// RoPE, rotate-half pairing (channel m with m + D/2), angle (offset + t)·base^(−2m/D); kernels/README.md.
// Like the CPU, each call first builds the (T, D/2) cos/sin table from double-precision angles
// (into scratch), then rotates every pair with one thread per kVec consecutive pairs (float4 when
// D/2 % 4 == 0 and the buffers are 16-byte aligned). out may alias in: each thread reads its
// pairs before writing them. The backward is the rotation by −angle.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dense.cuh"
#include "kernels/cuda/ops.h"
#include "core/cuda/runtime.h"

namespace pb::cuda {
namespace {


template <int kVec>
struct alignas(8 * kVec) CosSin {  // kVec (cos, sin) entries of the table
  float2 v[kVec];
};

// table (T, D/2) of (cos, sin)((offset + t)·θ_m), θ_m = base^(−2m/D), computed in double
__global__ void table_kernel(float2* table, int T, int half, int D, double base, int offset) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < int64_t(T) * half;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int t = int(i / half), m = int(i % half);
    const double theta = pow(base, -2.0 * m / D);
    double s, c;
    sincos((offset + t) * theta, &s, &c);
    table[i] = make_float2(float(c), float(s));
  }
}

// out_m = x_m cos − x_{m+D/2} sin,  out_{m+D/2} = x_{m+D/2} cos + x_m sin,  sin → sign·sin
// over rows (B·T·H) of D = 2·half, row = (b·T + t)·H + h
template <int kVec>
__global__ void rotate_kernel(float* out, const float* in, const float2* table, int64_t n_packs,
                              int T, int H, int half, float sign) {
  const int packs_per_row = half / kVec;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_packs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / packs_per_row;
    const int m = int(i % packs_per_row) * kVec, t = int(row / H % T);
    const int64_t lo = row * 2 * half + m, hi = lo + half;  // x_m, x_{m+D/2}
    const CosSin<kVec> cs = *reinterpret_cast<const CosSin<kVec>*>(table + int64_t(t) * half + m);
    const Pack<kVec> x1 = *reinterpret_cast<const Pack<kVec>*>(in + lo);
    const Pack<kVec> x2 = *reinterpret_cast<const Pack<kVec>*>(in + hi);
    Pack<kVec> y1, y2;
    for (int j = 0; j < kVec; ++j) {
      const float c = cs.v[j].x, sn = sign * cs.v[j].y;
      y1.v[j] = x1.v[j] * c - x2.v[j] * sn;
      y2.v[j] = x2.v[j] * c + x1.v[j] * sn;
    }
    *reinterpret_cast<Pack<kVec>*>(out + lo) = y1;
    *reinterpret_cast<Pack<kVec>*>(out + hi) = y2;
  }
}


void rotate(float* out, const float* in, const RopeArgs& args, float sign) {
  const int B = args.shape.B, T = args.shape.T, H = args.shape.H, half = args.shape.D / 2;
  const int64_t n_pairs = int64_t(B) * T * H * half;
  if (n_pairs == 0) return;
  float2* table = static_cast<float2*>(scratch(sizeof(float2) * size_t(T) * half));  // (T, D/2)
  table_kernel<<<blocks_for(int64_t(T) * half), kElementThreads, 0, stream()>>>(
      table, T, half, args.shape.D, args.base, args.offset);
  PB_LAUNCH_CHECK();
  if (half % 4 == 0 && aligned16(out) && aligned16(in))
    rotate_kernel<4><<<blocks_for(n_pairs / 4), kElementThreads, 0, stream()>>>(
        out, in, table, n_pairs / 4, T, H, half, sign);
  else
    rotate_kernel<1>
        <<<blocks_for(n_pairs), kElementThreads, 0, stream()>>>(out, in, table, n_pairs, T, H, half, sign);
  PB_LAUNCH_CHECK();
}

}  // namespace

void rope_forward(float* out, const float* in, const RopeArgs& args) { rotate(out, in, args, 1.f); }

// The rotation is orthogonal, so its transpose (the backward) is the rotation by −angle.
void rope_backward(float* din, const float* dout, const RopeArgs& args) {
  rotate(din, dout, args, -1.f);
}

}  // namespace pb::cuda
