// Stacked runs (Runs, kernels/ops.h) in the dense ops' .cu files: the rows of one run, the stride
// between the runs' parameter copies, and per-run column sums. Included after dense.cuh; one copy
// of the kernel in each file that includes it.
#pragma once
#include <cstdint>
#include <string>

#include "core/error.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dense.cuh"
#include "kernels/ops.h"

namespace pb::cuda {
namespace {

// N / runs.count, the rows (or sequences) each run owns; a pb::Error when N does not split
// evenly. Thrown directly: pb_cuda does not link fmt, which pb::fail needs.
inline int rows_per_run(const char* op, int N, const Runs& runs) {
  if (runs.count < 1 || N % runs.count)
    throw Error(std::string(op) + ": " + std::to_string(N) + " rows do not split evenly over " +
                std::to_string(runs.count) + " stacked runs");
  return N / runs.count;
}

// Elements between two runs' copies of a parameter; 0 with one run (whatever runs.stride says).
inline int64_t run_stride(const Runs& runs) { return runs.count > 1 ? runs.stride : 0; }

// out + r·stride (W) += Σ_k partial[r, k] for each run r = blockIdx.y, over partial
// (R, n_chunks, W): sum_partials_kernel's fixed order within each run.
__global__ void sum_run_partials_kernel(float* out, int64_t stride, const float* partial,
                                        int n_chunks, int W) {
  __shared__ float part[16][33];
  const int c = blockIdx.x * 32 + threadIdx.x, r = blockIdx.y;
  const float* p = partial + int64_t(r) * n_chunks * W;  // (n_chunks, W) of run r
  float acc = 0.f;
  if (c < W)
    for (int k = threadIdx.y; k < n_chunks; k += 16) acc += p[int64_t(k) * W + c];
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < W) {
    float s = 0.f;
    for (int j = 0; j < 16; ++j) s += part[j][threadIdx.x];
    out[int64_t(r) * stride + c] += s;
  }
}

// Each run's copy of out (W) += the column sums of its partial (n_chunks, W), partial
// (runs.count, n_chunks, W); one run is add_column_sums.
inline void add_run_column_sums(float* out, const Runs& runs, const float* partial, int n_chunks,
                                int W) {
  if (runs.count == 1) return add_column_sums(out, partial, n_chunks, W);
  sum_run_partials_kernel<<<dim3(ceil_div(W, 32), runs.count), dim3(32, 16), 0, stream()>>>(
      out, runs.stride, partial, n_chunks, W);
  PB_LAUNCH_CHECK();
}

}  // namespace
}  // namespace pb::cuda
