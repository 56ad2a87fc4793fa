// fp32 ↔ bf16 conversion (attention_bf16.h), round to nearest even, on the calling thread's stream.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/attention_bf16.h"
#include "kernels/cuda/common.cuh"

namespace pb::cuda {
namespace {

__global__ void to_bf16_kernel(__nv_bfloat16* y, const float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(x[i]);
}
__global__ void from_bf16_kernel(float* y, const __nv_bfloat16* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __bfloat162float(x[i]);
}
int grid_for(int64_t n) { return int(std::min<int64_t>((n + 255) / 256, 4096)); }

}  // namespace

void to_bf16(bf16_bits* y, const float* x, int64_t n) {
  if (n <= 0) return;
  to_bf16_kernel<<<grid_for(n), 256, 0, stream()>>>(reinterpret_cast<__nv_bfloat16*>(y), x, n);
  PB_LAUNCH_CHECK();
}
void from_bf16(float* y, const bf16_bits* x, int64_t n) {
  if (n <= 0) return;
  from_bf16_kernel<<<grid_for(n), 256, 0, stream()>>>(y, reinterpret_cast<const __nv_bfloat16*>(x), n);
  PB_LAUNCH_CHECK();
}

}  // namespace pb::cuda
