// Helpers of the dense ops' .cu files: float4 packs, grid sizes of the grid-stride loops, the
// threads sharing one row (a warp or a block), and deterministic column sums. Included after
// common.cuh; everything here has internal linkage, one copy per .cu file.
#pragma once
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace pb::cuda {
namespace {

constexpr int kElementThreads = 256;   // block size of the grid-stride elementwise kernels
constexpr int kMaxElementBlocks = 4096;

// kVec consecutive floats, loaded and stored as one access (float4 when kVec = 4).
template <int kVec>
struct alignas(4 * kVec) Pack {
  float v[kVec];
};
template <int kVec>
__device__ __forceinline__ Pack<kVec> load(const float* p) {
  return *reinterpret_cast<const Pack<kVec>*>(p);
}
template <int kVec>
__device__ __forceinline__ void store(float* p, const Pack<kVec>& x) {
  *reinterpret_cast<Pack<kVec>*>(p) = x;
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Blocks of kElementThreads for a grid-stride loop over n items.
inline int blocks_for(int64_t n) {
  return int(std::min<int64_t>(ceil_div(n, kElementThreads), kMaxElementBlocks));
}

// The threads sharing one row: a warp (kBlock false, kBlockThreads / 32 rows per block) or the
// whole block (kBlock true, one row per block).
template <bool kBlock, int kBlockThreads>
struct RowGroup {
  int row, rank, size;
  __device__ RowGroup()
      : row(kBlock ? blockIdx.x : blockIdx.x * (kBlockThreads / 32) + threadIdx.x / 32),
        rank(kBlock ? threadIdx.x : threadIdx.x % 32),
        size(kBlock ? kBlockThreads : 32) {}
  __device__ float sum(float x, float* smem) const { return kBlock ? block_sum(x, smem) : warp_sum(x); }
};

// out + r·stride (W) += Σ_k partial[r, k] over partial (R, n_chunks, W), run r = blockIdx.y (one
// run: R = 1), in a fixed order: 32 columns per block, threadIdx.y sums chunks y, y + 16, …, then
// thread y = 0 adds the 16 sums in order.
__global__ void sum_partials_kernel(float* out, int64_t stride, const float* partial, int n_chunks, int W) {
  __shared__ float part[16][33];
  const int c = blockIdx.x * 32 + threadIdx.x, r = blockIdx.y;
  partial += int64_t(r) * n_chunks * W;  // (n_chunks, W) of run r
  float acc = 0.f;
  if (c < W)
    for (int k = threadIdx.y; k < n_chunks; k += 16) acc += partial[int64_t(k) * W + c];
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < W) {
    float s = 0.f;
    for (int j = 0; j < 16; ++j) s += part[j][threadIdx.x];
    out[int64_t(r) * stride + c] += s;
  }
}

// out (W) += column sums of partial (n_chunks, W), deterministic (no atomics); with runs > 1,
// each run's copy out + r·stride of its own partial (runs, n_chunks, W).
inline void add_column_sums(float* out, const float* partial, int n_chunks, int W, int runs = 1,
                            int64_t stride = 0) {
  sum_partials_kernel<<<dim3(ceil_div(W, 32), runs), dim3(32, 16), 0, stream()>>>(out, stride, partial,
                                                                                  n_chunks, W);
  PB_LAUNCH_CHECK();
}

}  // namespace
}  // namespace pb::cuda
