#include "runners/data_parallel.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/io.h"
#if PATHBENCH_HAVE_NCCL
#include "core/cuda/nccl.h"
#include "core/cuda/runtime.h"
#endif

namespace pb {

#if PATHBENCH_HAVE_NCCL
namespace {

constexpr double kIdWaitSeconds = 600;  // processes of one job may start minutes apart

struct NcclReducer final : Reducer {
  explicit NcclReducer(cuda::Comm& c) : comm(c) {}
  void loss(float* mean, float* scale, const int32_t* targets, int64_t n) override {
    comm.reduce_loss(mean, scale, targets, n);
  }
  void grads(float* g, int64_t n) override { comm.all_reduce_sum(g, size_t(n)); }
  cuda::Comm& comm;
};

// Process 0 makes the id and writes it to `path` atomically (hex); the others poll for the file.
cuda::NcclId exchange_id(const std::string& path, bool writer) {
  cuda::NcclId id;
  std::string hex;
  if (writer) {
    id = cuda::nccl_unique_id();
    for (char c : id) hex += fmt::format("{:02x}", uint8_t(c));
    write_file_atomic(path, hex);
    return id;
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::duration<double>(kIdWaitSeconds))
      fail("--nccl-id-file '{}': process 0 did not write it within {:.0f} s", path, kIdWaitSeconds);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  hex = read_file(path);
  if (hex.size() != 2 * id.size()) fail("--nccl-id-file '{}' does not hold an NCCL id", path);
  for (size_t i = 0; i < id.size(); ++i) id[i] = char(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return id;
}

// The process's index on its node (Slurm / Open MPI); without a launcher all are on one node.
int local_proc(const TrainConfig& cfg) {
  for (const char* n : {"SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"})
    if (const char* v = std::getenv(n)) return std::atoi(v);
  return cfg.proc_id;
}

}  // namespace
#endif

void run_data_parallel(const TrainConfig& cfg, const std::string& device, const std::function<void(const Shard&)>& f) {
  const int world = world_size(cfg);
  if (world == 1) return f(Shard{});
#if PATHBENCH_HAVE_NCCL
  if (device != "cuda") fail("--gpus {} trains on CUDA devices, not on '{}'", cfg.gpus, device);
  // Never NVLink multicast (NVLS), whatever the environment says; set before the first NCCL call
  // and before the rank threads exist (setenv must not race with NCCL reading the environment).
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  const int visible = cuda_device_count();  // ≥ cfg.gpus, checked by select_device()
  const int proc = std::max(cfg.proc_id, 0);  // −1: not resolved, one process
  // Device of local GPU l: (local process · gpus + l) mod visible, so one process per GPU under
  // srun / mpirun picks its own device whether or not CUDA_VISIBLE_DEVICES was narrowed for it.
  const int first_device = cfg.procs > 1 ? local_proc(cfg) * cfg.gpus : 0;
  const cuda::NcclId id = cfg.procs > 1 ? exchange_id(cfg.nccl_id_file, proc == 0) : cuda::nccl_unique_id();
  const int omp_threads = std::max(1, omp_get_max_threads() / cfg.gpus);
  std::vector<std::exception_ptr> errors(cfg.gpus);
  std::vector<std::thread> threads;
  for (int l = 0; l < cfg.gpus; ++l)
    threads.emplace_back([&, l] {
      try {
        const int rank = proc * cfg.gpus + l;
        cuda::set_device((first_device + l) % visible);
        cuda::set_precision(cuda::parse_precision(cfg.precision));  // per thread, like the stream
        omp_set_num_threads(omp_threads);
        cuda::Comm comm(id, world, rank);  // returns when all ranks have joined
        if (rank == 0 && cfg.procs > 1) std::filesystem::remove(cfg.nccl_id_file);  // read by all: no stale id later
        NcclReducer reducer(comm);
        f(Shard{rank, world, &reducer});
      } catch (...) {
        errors[l] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
#else
  (void)device;
  fail("--gpus {}: this build has no NCCL", cfg.gpus);
#endif
}

}  // namespace pb
