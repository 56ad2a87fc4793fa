// Shared by the .cu files of the CUDA engine (nvcc, C++17): the runtime's error checks, stream and
// cuBLAS handle (core/cuda/check.cuh), and scratch carving, launch settings and warp / block reductions.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/cuda/check.cuh"

namespace pb::cuda {

inline int ceil_div(int64_t a, int64_t b) { return int((a + b - 1) / b); }

// Carves one scratch() allocation into 256-byte aligned arrays; with a null base it only
// measures (`used` is then the size to ask scratch() for).
struct Carver {
  char* base;
  size_t used = 0;
  template <class T>
  T* take(size_t n) {
    T* p = base ? reinterpret_cast<T*>(base + used) : nullptr;
    used += (n * sizeof(T) + 255) / 256 * 256;
    return p;
  }
};

// Opts a kernel in to more than 48 KB of dynamic shared memory, with the largest shared-memory
// carveout. The setting belongs to the current device, so it is made before every launch (a few
// microseconds of host time, and only in eager steps: graph replays skip it).
template <class Kernel>
void set_smem(Kernel kernel, int bytes) {
  PB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  PB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     int(cudaSharedmemCarveoutMaxShared)));
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
// Sum / max over the 16 threads of a half-warp (a tile row in the attention kernels); every one
// gets the same bits.
__device__ __forceinline__ float half_warp_sum(float x) {
  for (int o = 8; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ __forceinline__ float half_warp_max(float x) {
  for (int o = 8; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
// `scratch` is __shared__ float[32]; the call contains __syncthreads().
__device__ __forceinline__ float block_sum(float x, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  x = warp_sum(x);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < n_warps ? scratch[lane] : 0.f;
  return warp_sum(x);
}
__device__ __forceinline__ float block_max(float x, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < n_warps ? scratch[lane] : -INFINITY;
  return warp_max(x);
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.f / (1.f + __expf(-x)); }

}  // namespace pb::cuda
