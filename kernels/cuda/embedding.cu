// Token embedding: x[n] = table[tokens[n]]; the backward scatter-adds dx into the table.
// Both grid-stride over the N·C entries (float4 when C % 4 == 0 and the buffers are 16-byte
// aligned). The backward uses float atomicAdd: rows with the same token add in an unspecified
// order, so dtable is not bit-reproducible (accepted: it is the only gradient that is not).
// Stacked runs (Runs, kernels/ops.h): row n reads and scatters into its run's table,
// table + (n / rows)·stride with rows = N / R.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dense.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runs.cuh"

namespace pb::cuda {
namespace {

// x (N, C): x[n, c] = table_r[tokens[n], c],  table_r = table + (n / rows)·stride (V, C)
template <int kVec>
__global__ void embedding_forward_kernel(float* x, const int32_t* tokens, const float* table,
                                         int64_t n_packs, int C, int rows, int64_t stride) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_packs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = i * kVec, n = e / C, c = e % C;
    const float* table_r = table + n / rows * stride;
    *reinterpret_cast<Pack<kVec>*>(x + e) =
        *reinterpret_cast<const Pack<kVec>*>(table_r + int64_t(tokens[n]) * C + c);
  }
}

// dtable_r (V, C): dtable_r[tokens[n], c] += dx[n, c]  (atomic),
// dtable_r = dtable + (n / rows)·stride
__global__ void embedding_backward_kernel(float* dtable, const float* dx, const int32_t* tokens,
                                          int64_t n_elems, int C, int rows, int64_t stride) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n_elems;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = e / C, c = e % C;
    atomicAdd(dtable + n / rows * stride + int64_t(tokens[n]) * C + c, dx[e]);
  }
}

}  // namespace

void embedding_forward(float* x, const int32_t* tokens, const float* table, int N, int C,
                       Runs runs) {
  const int rows = rows_per_run("embedding_forward", N, runs);
  const int64_t n = int64_t(N) * C, s = run_stride(runs);
  if (n == 0) return;
  if (C % 4 == 0 && s % 4 == 0 && aligned16(x) && aligned16(table))
    embedding_forward_kernel<4><<<blocks_for(n / 4), kElementThreads, 0, stream()>>>(
        x, tokens, table, n / 4, C, rows, s);
  else
    embedding_forward_kernel<1><<<blocks_for(n), kElementThreads, 0, stream()>>>(
        x, tokens, table, n, C, rows, s);
  PB_LAUNCH_CHECK();
}

void embedding_backward(float* dtable, const float* dx, const int32_t* tokens, int N, int C,
                        Runs runs) {
  const int rows = rows_per_run("embedding_backward", N, runs);
  const int64_t n = int64_t(N) * C;
  if (n == 0) return;
  embedding_backward_kernel<<<blocks_for(n), kElementThreads, 0, stream()>>>(
      dtable, dx, tokens, n, C, rows, run_stride(runs));
  PB_LAUNCH_CHECK();
}

}  // namespace pb::cuda
