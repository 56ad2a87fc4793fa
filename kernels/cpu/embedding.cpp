// Token embedding: x[n] = table[tokens[n]]; the backward scatter-adds into the table.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/eigen.h"
#include "kernels/cpu/runs.h"
#include "kernels/ops.h"

namespace pb {

template <class S>
void embedding_forward(S* x, const int32_t* tokens, const S* table, int N, int C, Runs runs) {
  if (split_runs("embedding_forward", N, runs, [&](int r, int64_t i, int n) {
        embedding_forward(x + i * C, tokens + i, table + r * runs.stride, n, C);
      }))
    return;
#pragma omp parallel for schedule(static) if (int64_t(N) * C >= kParallelMin)
  for (int n = 0; n < N; ++n)
    std::memcpy(x + int64_t(n) * C, table + int64_t(tokens[n]) * C, sizeof(S) * C);
}

// dtable[tokens[n]] += dx[n]. Threads own column blocks and walk n in order: no races, and the
// summation order of every entry is fixed.
template <class S>
void embedding_backward(S* dtable, const S* dx, const int32_t* tokens, int N, int C, Runs runs) {
  if (split_runs("embedding_backward", N, runs, [&](int r, int64_t i, int n) {
        embedding_backward(dtable + r * runs.stride, dx + i * C, tokens + i, n, C);
      }))
    return;
  constexpr int kCols = 16;
#pragma omp parallel for schedule(static) if (int64_t(N) * C >= kParallelMin)
  for (int c0 = 0; c0 < C; c0 += kCols) {
    const int c1 = std::min(C, c0 + kCols);
    for (int n = 0; n < N; ++n) {
      S* row = dtable + int64_t(tokens[n]) * C;  // (C)
      const S* d = dx + int64_t(n) * C;          // (C)
      for (int c = c0; c < c1; ++c) row[c] += d[c];
    }
  }
}

template void embedding_forward<float>(float*, const int32_t*, const float*, int, int, Runs);
template void embedding_forward<double>(double*, const int32_t*, const double*, int, int, Runs);
template void embedding_backward<float>(float*, const float*, const int32_t*, int, int, Runs);
template void embedding_backward<double>(double*, const double*, const int32_t*, int, int, Runs);

}  // namespace pb
