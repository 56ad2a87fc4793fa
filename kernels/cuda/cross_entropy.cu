// Softmax cross-entropy per row, one block per row; rows with target < 0 are ignored (loss 0,
// gradient 0) but still get an argmax. The forward reads each row once: every thread keeps an
// online max and Σ exp(l − max) over its entries (float4 when V % 4 == 0 and the buffers are
// 16-byte aligned), then the block merges them. The backward recomputes the row statistics (a
// second read of the row, mostly from L2) and writes the gradient. loss_mean is one block per
// stacked run (Runs, kernels/ops.h: run r owns rows r·N/R … (r + 1)·N/R − 1), summing in double in
// a fixed order; the backward scales row n by scale[n / (N / R)].
#include <algorithm>
#include <climits>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dense.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runs.cuh"

namespace pb::cuda {
namespace {

constexpr int kMaxThreads = 256;
constexpr int kMeanThreads = 1024;

// Minimum over the block (blockDim.x a multiple of 32); `scratch` is __shared__ int[32].
__device__ __forceinline__ int block_min(int x, int* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) x = min(x, __shfl_xor_sync(0xffffffffu, x, o));
  __syncthreads();
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < n_warps ? scratch[lane] : INT_MAX;
  for (int o = 16; o > 0; o >>= 1) x = min(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Max, Σ exp(l − max) and argmax (lowest index on ties) of one row of V entries, merged over the
// block; every thread gets them. Threads visit their entries in increasing index order and keep
// the first maximum; the block then takes the lowest index among threads holding the row max.
template <int kVec, bool kArgmax>
__device__ void row_stats(const float* l, int V, float& mx, float& sum, int& arg) {
  __shared__ float fscratch[32];
  __shared__ int iscratch[32];
  float m = -INFINITY, s = 0.f;  // running max, Σ exp(l − m)
  int a = INT_MAX;
  for (int c = threadIdx.x * kVec; c < V; c += blockDim.x * kVec) {
    const Pack<kVec> p = load<kVec>(l + c);
    for (int j = 0; j < kVec; ++j) {
      const float z = p.v[j];
      if (z > m) {  // new max: s ← s·exp(m − z) + 1
        s = s * __expf(m - z) + 1.f;
        m = z;
        a = c + j;
      } else {
        s += __expf(z - m);
      }
    }
  }
  mx = block_max(m, fscratch);
  sum = block_sum(s * __expf(m - mx), fscratch);  // Σ exp(l − max); threads without entries add 0
  if constexpr (kArgmax) arg = block_min(m == mx ? a : INT_MAX, iscratch);
}

// loss (N) = lse − l[target] = (max − l[target]) + log Σ exp(l − max), 0 when target < 0;
// argmax (N) the lowest index of the row max (may be null)
template <int kVec>
__global__ void cross_entropy_forward_kernel(float* loss, int32_t* argmax, const float* logits,
                                             const int32_t* targets, int V) {
  const int n = blockIdx.x, t = targets[n];
  const float* l = logits + int64_t(n) * V;  // (V)
  float mx, sum;
  int arg;
  row_stats<kVec, true>(l, V, mx, sum, arg);
  if (threadIdx.x == 0) {
    loss[n] = t >= 0 ? (mx - l[t]) + logf(sum) : 0.f;
    if (argmax) argmax[n] = arg;
  }
}

// dlogits (N, V) = (softmax(l) − onehot(target)) · scale[n / rows], 0 on rows with target < 0;
// softmax = exp(l − max) / Σ exp(l − max)
template <int kVec>
__global__ void cross_entropy_backward_kernel(float* dlogits, const float* logits, const int32_t* targets,
                                              int V, const float* scale, int rows) {
  const int n = blockIdx.x, t = targets[n];
  const float* l = logits + int64_t(n) * V;  // (V)
  float* d = dlogits + int64_t(n) * V;       // (V)
  if (t < 0) {
    for (int c = threadIdx.x * kVec; c < V; c += blockDim.x * kVec)
      store<kVec>(d + c, Pack<kVec>{});
    return;
  }
  float mx, sum;
  int arg;
  row_stats<kVec, false>(l, V, mx, sum, arg);
  const float sc = scale[n / rows], coef = sc / sum;  // scale of the row's run / Σ exp(l − max)
  for (int c = threadIdx.x * kVec; c < V; c += blockDim.x * kVec) {
    const Pack<kVec> p = load<kVec>(l + c);
    Pack<kVec> g;
    for (int j = 0; j < kVec; ++j) g.v[j] = __expf(p.v[j] - mx) * coef - (c + j == t ? sc : 0.f);
    store<kVec>(d + c, g);
  }
}

// Per run r = blockIdx.x, over its rows r·rows … (r + 1)·rows − 1:
//   mean[r] = Σ_{target ≥ 0} loss / count, scale[r] = 1 / count (0 when count = 0).
// One block per run: thread i sums the run's entries i, i + blockDim, … in double, then warps and
// the block in a fixed order.
__global__ void __launch_bounds__(kMeanThreads)
    loss_mean_kernel(float* mean, float* scale, const float* loss, const int32_t* targets, int rows) {
  __shared__ double wsum[32];
  __shared__ int wcount[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = blockIdx.x;
  loss += int64_t(r) * rows, targets += int64_t(r) * rows;  // (rows) of run r
  double total = 0;
  int count = 0;
  for (int n = threadIdx.x; n < rows; n += blockDim.x)
    if (targets[n] >= 0) total += loss[n], ++count;
  for (int o = 16; o > 0; o >>= 1) {
    total += __shfl_xor_sync(0xffffffffu, total, o);
    count += __shfl_xor_sync(0xffffffffu, count, o);
  }
  if (lane == 0) wsum[warp] = total, wcount[warp] = count;
  __syncthreads();
  if (threadIdx.x == 0) {
    total = 0, count = 0;
    for (int w = 0; w < int(blockDim.x >> 5); ++w) total += wsum[w], count += wcount[w];
    mean[r] = count ? float(total / double(count)) : 0.f;
    scale[r] = count ? float(1.0 / double(count)) : 0.f;
  }
}

// Threads per row: about 8 entries each, 32 to kMaxThreads.
int threads_for(int V) { return std::clamp(32 * ceil_div(V, 32 * 8), 32, kMaxThreads); }

}  // namespace

void cross_entropy_forward(float* loss, int32_t* argmax, const float* logits,
                           const int32_t* targets, int N, int V) {
  if (N == 0) return;
  const int threads = threads_for(V);
  if (V % 4 == 0 && aligned16(logits))
    cross_entropy_forward_kernel<4><<<N, threads, 0, stream()>>>(loss, argmax, logits, targets, V);
  else
    cross_entropy_forward_kernel<1><<<N, threads, 0, stream()>>>(loss, argmax, logits, targets, V);
  PB_LAUNCH_CHECK();
}

void cross_entropy_backward(float* dlogits, const float* logits, const int32_t* targets, int N,
                            int V, const float* scale, Runs runs) {
  const int rows = rows_per_run("cross_entropy_backward", N, runs);
  if (N == 0) return;
  const int threads = threads_for(V);
  if (V % 4 == 0 && aligned16(logits) && aligned16(dlogits))
    cross_entropy_backward_kernel<4><<<N, threads, 0, stream()>>>(dlogits, logits, targets, V, scale,
                                                                   rows);
  else
    cross_entropy_backward_kernel<1><<<N, threads, 0, stream()>>>(dlogits, logits, targets, V, scale,
                                                                   rows);
  PB_LAUNCH_CHECK();
}

// Launched also for N = 0: the outputs are defined (all 0).
void loss_mean(float* mean, float* scale, const float* loss, const int32_t* targets, int N,
               Runs runs) {
  const int rows = rows_per_run("loss_mean", N, runs);
  loss_mean_kernel<<<runs.count, kMeanThreads, 0, stream()>>>(mean, scale, loss, targets, rows);
  PB_LAUNCH_CHECK();
}

}  // namespace pb::cuda
