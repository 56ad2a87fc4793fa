// Stacked runs (Runs, kernels/ops.h) in the dense ops' .cu files: the rows of one run, the stride
// between the runs' parameter copies, and per-run column sums (dense.cuh's kernel, a grid row per
// run).
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

// Each run's copy of out (W) += the column sums of its partial (n_chunks, W), partial
// (runs.count, n_chunks, W); one run is add_column_sums.
inline void add_run_column_sums(float* out, const Runs& runs, const float* partial, int n_chunks,
                                int W) {
  add_column_sums(out, partial, n_chunks, W, runs.count, run_stride(runs));
}

}  // namespace
}  // namespace pb::cuda
