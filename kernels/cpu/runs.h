// Stacked runs on the CPU (Runs, kernels/ops.h): an op over R runs is the one-run op called once
// per run on that run's rows and parameters. This is the definition of stacking, which the CUDA
// kernels' single launches are tested against, and it keeps a stacked CPU model bit-identical to
// R separate ones.
#pragma once
#include <cstdint>

#include "core/error.h"
#include "kernels/ops.h"

namespace pb {

// With more than one run: calls f(r, first, n) for each run r, which owns the n = N / R items
// (rows or sequences) from `first` on, and returns true; with one run returns false and the
// caller computes as usual. A pb::Error when N does not split evenly.
template <class F>
bool split_runs(const char* op, int N, const Runs& runs, F&& f) {
  if (runs.count == 1) return false;
  if (runs.count < 1 || N % runs.count)
    fail("{}: {} rows do not split evenly over {} stacked runs", op, N, runs.count);
  const int n = N / runs.count;
  for (int r = 0; r < runs.count; ++r) f(r, int64_t(r) * n, n);
  return true;
}

}  // namespace pb
