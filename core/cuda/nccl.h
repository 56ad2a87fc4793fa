// NCCL as the C++ side sees it, with no NCCL header: a communicator of one rank per GPU, whose
// collectives run on the calling thread's stream (so a CUDA graph capturing that stream captures
// them; NCCL >= 2.9). Built when the CUDA toolkit has NCCL (PATHBENCH_HAVE_NCCL). Implemented in
// nccl.cu; errors throw, naming the call and NCCL's reason, like runtime.h.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace pb::cuda {

using NcclId = std::array<char, 128>;  // ncclUniqueId: made by one rank, given to all
NcclId nccl_unique_id();

class Comm {
 public:
  // Joins rank `rank` of `world` on the current device; blocks until every rank has joined.
  // The caller sets NCCL_NVLS_ENABLE=0 first, once per process (runners/data_parallel.cpp).
  Comm(const NcclId& id, int world, int rank);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // x ← Σ over ranks of x, in place. Every rank gets the same bits (NCCL reduces each element
  // once and broadcasts it), so replicas stay identical.
  void all_reduce_sum(float* x, size_t n);
  // The shard's mean loss and backward scale (1 / its targets) → those of the global batch:
  // mean ← Σ_r mean_r·n_r / Σ_r n_r, scale ← 1 / Σ_r n_r (0 when no rank has a target), with
  // n_r = #{targets ≥ 0} of rank r's shard of n positions.
  void reduce_loss(float* mean, float* scale, const int32_t* targets, int64_t n);

 private:
  void* comm_ = nullptr;      // ncclComm_t
  double* stats_ = nullptr;   // device (2): Σ loss, Σ targets
};

}  // namespace pb::cuda
