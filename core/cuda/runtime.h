// The CUDA runtime as the C++ side sees it, with no CUDA header: the device, the calling thread's
// stream and cuBLAS handle (created on first use), device memory, copies, and CUDA graphs.
// Errors throw pb::Error naming the call and the CUDA error. Implemented in runtime.cu.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace pb::cuda {

void set_device(int device);  // before any other call of this thread
// Threads of this process that wait for the current device sleep instead of spinning
// (cudaDeviceScheduleBlockingSync): for many runs packed on one GPU, whose spinning waits take the
// CPU cores the other runs launch and capture from (kernels/dev/pack_notes.md). PB_CUDA_SPIN=1
// keeps spinning, the CUDA default, to compare.
void block_in_waits();
void synchronize();           // waits for the calling thread's stream

// Stream-ordered on the calling thread's stream (the device's memory pool, runtime.cu): memory is
// used on that stream, or idle when freed from another thread. Counted by allocation_count().
void* device_alloc(size_t bytes);
void device_free(void* p);
// The calling thread's allocations so far: a graph it captured is stale when its memory moved.
// Per thread, so runs packed in one process (one thread each) never recapture for another's.
uint64_t allocation_count();
// Free and total bytes of the current device (cudaMemGetInfo).
void memory_info(size_t& free_bytes, size_t& total_bytes);

// Bytes of device memory now held through device_alloc (all threads), and the most held since
// the start or the last reset_peak_allocated(), which sets the peak to the current bytes: the
// counterpart of PyTorch's memory_allocated / max_memory_allocated / reset_peak_memory_stats.
// cuBLAS's fixed workspace is not counted (allocated directly, once per thread).
uint64_t allocated_bytes();
uint64_t peak_allocated_bytes();
void reset_peak_allocated();

// Temporary device memory for one op call: at least `bytes`, the calling thread's, contents
// undefined, valid until the next scratch() call of the same arena (ops on one stream run one
// after another). It grows by reallocation, so the first (eager) step sizes it and graph replays
// never allocate. Arenas nest, so a caller's region survives the scratch() of what it calls:
//   0  the ops';
//   1  precision wrappers that convert fp32 arguments to bf16 and call a bf16 op;
//   2  bf16 ops that convert to fp32 and call (part of) an fp32 op.
constexpr int kScratchArenas = 3;
void* scratch(size_t bytes, int arena = 0);

// Precision of the calling thread's ops (`--precision`); storage, master weights, optimizer and
// every other op stay fp32 whatever it is:
//   FP32  fp32 everywhere (default);
//   TF32  matmul_* on TF32 tensor cores (fp32 storage and accumulation, 10-bit mantissa products,
//         like PyTorch's set_float32_matmul_precision("high"));
//   BF16  what PyTorch's bf16 autocast computes in bf16: matmul_* with bf16 tensor-core products
//         and fp32 accumulation (cuBLAS CUBLAS_COMPUTE_32F_FAST_16BF, fp32 storage), and the
//         softmax / PaTH attention ops through the bf16 kernels of attention_bf16.h (q, k, v, o
//         and their gradients rounded to bf16; attention_mixed.cu). Stick-breaking stays fp32.
// Per thread, like the stream and the cuBLAS handle it sets the math mode of.
enum class Precision { FP32, TF32, BF16 };
void set_precision(Precision p);
Precision precision();
// "fp32" | "tf32" | "bf16" (the values of --precision); std::invalid_argument otherwise.
inline Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::FP32;
  if (name == "tf32") return Precision::TF32;
  if (name == "bf16") return Precision::BF16;
  throw std::invalid_argument("precision must be fp32, tf32 or bf16, got '" + name + "'");
}

// Stream-ordered copies on the calling thread's stream. to_host waits for the copy.
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void copy_on_device(void* dst, const void* src, size_t bytes);
void zero_on_device(void* dst, size_t bytes);

// Page-locked host memory, for asynchronous copies; counted by allocation_count() (a captured
// graph copies to and from it). Used on the calling thread's stream: freeing waits for that stream
// and keeps the block for a later request (page-locked memory is never given back).
void* host_alloc_pinned(size_t bytes);
void host_free_pinned(void* p);
void copy_to_host_async(void* dst_pinned, const void* src, size_t bytes);
// Enqueues fn(data) on the calling thread's stream: it runs on a host thread of the runtime after
// the work before it and before the work after it (cudaLaunchHostFunc), and a graph captures it.
// fn must not call CUDA; data must stay valid while a graph that captured it can replay.
void launch_host(void (*fn)(void*), void* data);

// Whether training steps are captured and replayed as graphs (the default) or launched op by op
// (PB_CUDA_GRAPHS=0, which a packed sweep sets unless the environment does: runners/scheduler.h,
// prepare_packed_process; kernels/dev/pack_notes.md).
bool graphs_enabled();

// The work enqueued on this thread's stream between begin() and end(), replayed by launch().
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();
  void begin();   // starts capturing the stream
  void end();     // stops capturing and instantiates
  void abort();   // stops capturing and discards it (the captured work threw)
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
