// The CUDA runtime as the C++ side sees it, with no CUDA header: the device, the calling thread's
// stream and cuBLAS handle (created on first use), device memory, copies, and CUDA graphs.
// Errors throw pb::Error naming the call and the CUDA error. Implemented in runtime.cu.
#pragma once
#include <cstddef>
#include <cstdint>

namespace pb::cuda {

void set_device(int device);  // before any other call of this thread
void synchronize();           // waits for the calling thread's stream

void* device_alloc(size_t bytes);  // cudaMalloc; counted by allocation_count()
void device_free(void* p);
uint64_t allocation_count();       // allocations so far: a captured graph is stale when it moved

// Temporary device memory for one op call: at least `bytes`, the calling thread's, contents
// undefined, valid until the next scratch() call (ops on one stream run one after another). It
// grows by reallocation, so the first (eager) step sizes it and graph replays never allocate.
void* scratch(size_t bytes);

// GEMM precision of matmul_*: fp32 (default) or TF32 tensor cores (fp32 storage and accumulation,
// 10-bit mantissa products, like PyTorch's set_float32_matmul_precision("high")).
void set_tf32(bool on);

// Stream-ordered copies on the calling thread's stream. to_host waits for the copy.
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_on_device(void* dst, const void* src, size_t bytes);
void zero_on_device(void* dst, size_t bytes);

void* host_alloc_pinned(size_t bytes);  // page-locked host memory, for asynchronous copies
void host_free_pinned(void* p);
void copy_to_host_async(void* dst_pinned, const void* src, size_t bytes);

// The work enqueued on this thread's stream between begin() and end(), replayed by launch().
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();
  void begin();   // starts capturing the stream
  void end();     // stops capturing and instantiates
  void launch();  // replays on the stream
  bool ready() const { return exec_ != nullptr; }
  void reset();

 private:
  void* exec_ = nullptr;  // cudaGraphExec_t
};

// Device time between two points of the stream, for benchmarks.
class Timer {
 public:
  Timer();
  ~Timer();
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;
  void start();
  double stop_ms();  // waits for the stream
 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

}  // namespace pb::cuda
