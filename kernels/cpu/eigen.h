// Shared by the CPU reference ops: Eigen maps over raw row-major buffers, the serial-work
// threshold, and a deterministic column sum over rows (per-chunk partials added in chunk order,
// so the result does not depend on the thread count).
#pragma once
#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/scalar.h"

namespace pb {

template <class S>
using MatR = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class S>
using MapR = Eigen::Map<MatR<S>>;
template <class S>
using CMapR = Eigen::Map<const MatR<S>>;
template <class S>
using RowV = Eigen::Matrix<S, 1, Eigen::Dynamic>;
template <class S>
using MapV = Eigen::Map<RowV<S>>;
template <class S>
using CMapV = Eigen::Map<const RowV<S>>;

// Work (elements) below which an op runs on one thread: fork/join would cost more.
constexpr int64_t kParallelMin = int64_t(1) << 15;

// out (W) += Σ_n row_fn(n), where row_fn(n, acc) adds row n's contribution into acc (W).
// Rows go in fixed chunks of kChunk; chunk partials are summed in chunk order.
template <class S, class F>
void chunked_row_sum(S* out, int n_rows, int W, F&& row_fn) {
  constexpr int kChunk = 64;
  const int n_chunks = (n_rows + kChunk - 1) / kChunk;
  MatR<S> partial = MatR<S>::Zero(n_chunks, W);  // (n_chunks, W)
#pragma omp parallel for schedule(static) if (int64_t(n_rows) * W >= kParallelMin)
  for (int ch = 0; ch < n_chunks; ++ch) {
    S* acc = partial.data() + int64_t(ch) * W;
    for (int n = ch * kChunk; n < std::min(n_rows, (ch + 1) * kChunk); ++n) row_fn(n, acc);
  }
  MapV<S> o(out, W);
  for (int ch = 0; ch < n_chunks; ++ch) o += partial.row(ch);
}

}  // namespace pb
