// Token embedding: x[n] = table[tokens[n]]; the backward scatter-adds dx into the table.
// Both grid-stride over the N·C entries (float4 when C % 4 == 0 and the buffers are 16-byte
// aligned). The backward uses float atomicAdd: rows with the same token add in an unspecified
// order, so dtable is not bit-reproducible (accepted: it is the only gradient that is not).
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dense.cuh"
#include "kernels/cuda/ops.h"

namespace pb::cuda {
namespace {



// x (N, C): x[n, c] = table[tokens[n], c]
template <int kVec>
__global__ void embedding_forward_kernel(float* x, const int32_t* tokens, const float* table,
                                         int64_t n_packs, int C) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n_packs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = i * kVec, n = e / C, c = e % C;
    *reinterpret_cast<Pack<kVec>*>(x + e) =
        *reinterpret_cast<const Pack<kVec>*>(table + int64_t(tokens[n]) * C + c);
  }
}

// dtable (V, C): dtable[tokens[n], c] += dx[n, c]  (atomic)
__global__ void embedding_backward_kernel(float* dtable, const float* dx, const int32_t* tokens,
                                          int64_t n_elems, int C) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n_elems;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = e / C, c = e % C;
    atomicAdd(dtable + int64_t(tokens[n]) * C + c, dx[e]);
  }
}


}  // namespace

void embedding_forward(float* x, const int32_t* tokens, const float* table, int N, int C) {
  const int64_t n = int64_t(N) * C;
  if (n == 0) return;
  if (C % 4 == 0 && aligned16(x) && aligned16(table))
    embedding_forward_kernel<4><<<blocks_for(n / 4), kElementThreads, 0, stream()>>>(x, tokens, table, n / 4,
                                                                                      C);
  else
    embedding_forward_kernel<1><<<blocks_for(n), kElementThreads, 0, stream()>>>(x, tokens, table, n, C);
  PB_LAUNCH_CHECK();
}

void embedding_backward(float* dtable, const float* dx, const int32_t* tokens, int N, int C) {
  const int64_t n = int64_t(N) * C;
  if (n == 0) return;
  embedding_backward_kernel<<<blocks_for(n), kElementThreads, 0, stream()>>>(dtable, dx, tokens, n, C);
  PB_LAUNCH_CHECK();
}

}  // namespace pb::cuda
