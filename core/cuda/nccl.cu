// The NCCL wrapper of nccl.h, and the two small kernels of reduce_loss.
#include <nccl.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "core/cuda/check.cuh"
#include "core/cuda/nccl.h"

namespace pb::cuda {
namespace {

#define PB_NCCL_CHECK(call)                                                                 \
  do {                                                                                      \
    const ncclResult_t pb_r_ = (call);                                                      \
    if (pb_r_ != ncclSuccess)                                                               \
      ::pb::cuda::throw_cuda_error(#call, ncclGetErrorString(pb_r_), __FILE__, __LINE__);   \
  } while (0)

constexpr int kThreads = 1024;

// stats = {mean·count, count} of this shard, count = #{targets ≥ 0} (one block).
__global__ void __launch_bounds__(kThreads)
    shard_stats_kernel(double* stats, const float* mean, const int32_t* targets, int64_t n) {
  __shared__ long long wcount[32];
  long long count = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) count += targets[i] >= 0;
  for (int o = 16; o > 0; o >>= 1) count += __shfl_xor_sync(0xffffffffu, count, o);
  if ((threadIdx.x & 31) == 0) wcount[threadIdx.x >> 5] = count;
  __syncthreads();
  if (threadIdx.x == 0) {
    count = 0;
    for (int w = 0; w < int(blockDim.x >> 5); ++w) count += wcount[w];
    stats[0] = double(mean[0]) * double(count);
    stats[1] = double(count);
  }
}

// The global mean and scale from the summed stats, as loss_mean computes them on one GPU.
__global__ void global_loss_kernel(float* mean, float* scale, const double* stats) {
  const double count = stats[1];
  mean[0] = count > 0 ? float(stats[0] / count) : 0.f;
  scale[0] = count > 0 ? float(1.0 / count) : 0.f;
}

ncclComm_t as_comm(void* c) { return static_cast<ncclComm_t>(c); }

}  // namespace

NcclId nccl_unique_id() {
  static_assert(sizeof(ncclUniqueId) == sizeof(NcclId));
  ncclUniqueId id;
  PB_NCCL_CHECK(ncclGetUniqueId(&id));
  NcclId out;
  std::memcpy(out.data(), &id, sizeof id);
  return out;
}

Comm::Comm(const NcclId& id, int world, int rank) {
  ncclUniqueId nid;
  std::memcpy(&nid, id.data(), sizeof nid);
  ncclComm_t comm = nullptr;
  PB_NCCL_CHECK(ncclCommInitRank(&comm, world, nid, rank));
  comm_ = comm;
  PB_CUDA_CHECK(cudaMalloc(&stats_, 2 * sizeof(double)));
}

Comm::~Comm() {
  if (stats_) cudaFree(stats_);
  if (comm_) ncclCommDestroy(as_comm(comm_));
}

void Comm::all_reduce_sum(float* x, size_t n) {
  PB_NCCL_CHECK(ncclAllReduce(x, x, n, ncclFloat, ncclSum, as_comm(comm_), stream()));
}

void Comm::reduce_loss(float* mean, float* scale, const int32_t* targets, int64_t n) {
  shard_stats_kernel<<<1, kThreads, 0, stream()>>>(stats_, mean, targets, n);
  PB_LAUNCH_CHECK();
  PB_NCCL_CHECK(ncclAllReduce(stats_, stats_, 2, ncclDouble, ncclSum, as_comm(comm_), stream()));
  global_loss_kernel<<<1, 1, 0, stream()>>>(mean, scale, stats_);
  PB_LAUNCH_CHECK();
}

}  // namespace pb::cuda
