// Softmax cross-entropy per row, stable by subtracting the row max; rows with target < 0 are
// ignored (loss 0, gradient 0) but still get an argmax.
#include <cmath>

#include "kernels/cpu/eigen.h"
#include "kernels/cpu/runs.h"
#include "kernels/ops.h"

namespace pb {

namespace {

// Index of the max (lowest on ties) and logsumexp of one row.
template <class S>
void row_stats(const S* l, int V, int& arg, S& lse) {
  arg = 0;
  for (int i = 1; i < V; ++i)
    if (l[i] > l[arg]) arg = i;
  const S mx = l[arg];
  S sum = 0;
  for (int i = 0; i < V; ++i) sum += std::exp(l[i] - mx);
  lse = mx + std::log(sum);  // lse = max + log Σ exp(l − max)
}

}  // namespace

template <class S>
void cross_entropy_forward(S* loss, int32_t* argmax, const S* logits, const int32_t* targets,
                           int N, int V) {
#pragma omp parallel for schedule(static) if (int64_t(N) * V >= kParallelMin)
  for (int n = 0; n < N; ++n) {
    const S* l = logits + int64_t(n) * V;  // (V)
    int arg;
    S lse;
    row_stats(l, V, arg, lse);
    if (argmax) argmax[n] = arg;
    loss[n] = targets[n] >= 0 ? lse - l[targets[n]] : S(0);  // loss = lse − l[target]
  }
}

template <class S>
void cross_entropy_backward(S* dlogits, const S* logits, const int32_t* targets, int N, int V,
                            const S* scale_buf, Runs runs) {
  if (split_runs("cross_entropy_backward", N, runs, [&](int r, int64_t i, int n) {
        cross_entropy_backward(dlogits + i * V, logits + i * V, targets + i, n, V, scale_buf + r);
      }))
    return;
  const S scale = scale_buf[0];
#pragma omp parallel for schedule(static) if (int64_t(N) * V >= kParallelMin)
  for (int n = 0; n < N; ++n) {
    const S* l = logits + int64_t(n) * V;  // (V)
    S* d = dlogits + int64_t(n) * V;       // (V)
    const int t = targets[n];
    if (t < 0) {
      for (int i = 0; i < V; ++i) d[i] = S(0);
      continue;
    }
    int arg;
    S lse;
    row_stats(l, V, arg, lse);
    for (int i = 0; i < V; ++i) d[i] = std::exp(l[i] - lse) * scale;  // softmax · scale
    d[t] -= scale;                                                       // − onehot · scale
  }
}

template <class S>
void loss_mean(S* mean, S* scale, const S* loss, const int32_t* targets, int N, Runs runs) {
  if (split_runs("loss_mean", N, runs, [&](int r, int64_t i, int n) {
        loss_mean(mean + r, scale + r, loss + i, targets + i, n);
      }))
    return;
  double total = 0;
  int64_t count = 0;
  for (int n = 0; n < N; ++n)
    if (targets[n] >= 0) ++count, total += loss[n];
  mean[0] = count ? S(total / double(count)) : S(0);
  scale[0] = count ? S(1.0 / double(count)) : S(0);
}

template void cross_entropy_forward<float>(float*, int32_t*, const float*, const int32_t*, int, int);
template void cross_entropy_forward<double>(double*, int32_t*, const double*, const int32_t*, int,
                                            int);
template void cross_entropy_backward<float>(float*, const float*, const int32_t*, int, int, const float*,
                                            Runs);
template void cross_entropy_backward<double>(double*, const double*, const int32_t*, int, int,
                                             const double*, Runs);
template void loss_mean<float>(float*, float*, const float*, const int32_t*, int, Runs);
template void loss_mean<double>(double*, double*, const double*, const int32_t*, int, Runs);

}  // namespace pb
