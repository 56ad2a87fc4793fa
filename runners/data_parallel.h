// Data-parallel training (docs/multi-gpu.md). world = procs × gpus ranks, one host thread per GPU,
// rank = proc_id·gpus + local GPU index. Every rank holds a full replica (the same seed gives the
// same initial parameters), trains on its 1/world of the global batch, and its TrainStep sums the
// loss normalisation and the gradients over all ranks with NCCL (train_step.h), so every replica
// takes the one-GPU step of the whole batch. The NCCL id reaches the other processes of a
// multi-process run through a shared file (--nccl-id-file), written by process 0.
#pragma once
#include <functional>
#include <string>

#include "runners/train_config.h"
#include "runners/train_step.h"

namespace pb {

struct Shard {
  int rank = 0, world = 1;     // rank 0 (the lead) alone prints and writes files
  Reducer* reducer = nullptr;  // null when world == 1
  bool lead() const { return rank == 0; }
};

// Calls f(shard) for each GPU of this process, each on its own thread with its device, precision
// and a share of the CPU threads set, and its NCCL communicator joined; or f(Shard{}) on the
// calling thread when world_size(cfg) == 1. `device` is select_device()'s. Rethrows the first
// rank's exception after all threads have ended.
void run_data_parallel(const TrainConfig& cfg, const std::string& device, const std::function<void(const Shard&)>& f);

}  // namespace pb
