// The CUDA runtime behind runtime.h: one stream and one cuBLAS handle per host thread (kept for
// the next thread when it ends), device memory, copies, graphs and timers. Device discovery
// (device.h) is here too.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/cuda/check.cuh"
#include "core/cuda/runtime.h"
#include "core/device.h"
#include "core/error.h"
#include "core/slow_call.h"
#include "core/writer_first_mutex.h"

namespace pb {

bool cuda_built() { return true; }

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error (35) or "no device" (100)
    return 0;
  }
  return n;
}

std::string cuda_device_name(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return prop.name;
}

int cuda_current_device() {
  int d = 0;
  if (cudaGetDevice(&d) != cudaSuccess) cudaGetLastError();
  return d;
}

namespace cuda {

void throw_cuda_error(const char* what, const char* detail, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error: ") + what + ": " + detail + " (" + file + ":" +
                           std::to_string(line) + ")");
}

namespace {

// Runs packed in threads of one process capture their graphs while other threads create streams
// or handles and allocate; calls that synchronise the device invalidate a capture in flight on
// another thread ("operation failed due to a previous error during capture"), in the thread-local
// capture mode used here too (seen on the H200). So captures hold this lock shared from
// Graph::begin to Graph::end, and those calls take it alone (CaptureFence): they wait for the
// captures in flight, which happen once per run (again only if its memory moved). Writer first:
// with many runs capturing in turn, a reader-first lock kept allocations waiting for seconds
// (kernels/dev/pack_notes.md).
WriterFirstMutex g_capture_mutex;
thread_local std::shared_lock<WriterFirstMutex> t_capture_lock;  // held while this thread captures
thread_local std::optional<SlowCall> t_capture_timer;             // from Graph::begin to its end
std::atomic<const char*> g_fence_holder{nullptr};  // the call holding the lock alone, if any
std::atomic<int> g_capturing{0};                    // threads holding it shared

// Who holds the lock as a wait for it starts, for the slow-call line (core/slow_call.h); made only
// when the lock was not free.
struct FenceNote {
  char text[128];
  FenceNote() {
    const char* holder = g_fence_holder.load();
    std::snprintf(text, sizeof(text), "held alone for %s, %d threads capturing", holder ? holder : "nothing",
                  g_capturing.load());
  }
};

// Takes `lock` (alone or shared, by its type), timed with who held it when it was not free.
template <class Lock>
void lock_noting_holder(Lock& lock, const char* what) {
  if (lock.try_lock()) return;
  const FenceNote note;
  const SlowCall wait(what, note.text);
  lock.lock();
}

// The lock held alone for one call (`what`), unless this thread is itself capturing (then the
// call fails on its own, as it would in a single-threaded program, instead of deadlocking).
struct CaptureFence {
  std::unique_lock<WriterFirstMutex> lock;
  explicit CaptureFence(const char* what) : lock(g_capture_mutex, std::defer_lock) {
    if (t_capture_lock.owns_lock()) return;
    lock_noting_holder(lock, "waiting for the capture fence");
    g_fence_holder.store(what);
  }
  ~CaptureFence() {
    if (lock.owns_lock()) g_fence_holder.store(nullptr);
  }
};

// An on/off switch from the environment: unset or empty gives `fallback`, "0" off, anything else on.
bool env_switch(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) != "0" : fallback;
}

constexpr size_t kBlasWorkspace = size_t(32) << 20;  // fixed, so cuBLAS never allocates in a graph

thread_local uint64_t t_allocations = 0;  // per thread: runs packed in threads never see each other's

// Sizes of the live device_alloc blocks, for allocated_bytes() and its peak.
struct AllocTracker {
  std::mutex mutex;
  std::unordered_map<void*, size_t> sizes;
  uint64_t current = 0, peak = 0;
};
AllocTracker& tracker() {
  static AllocTracker* t = new AllocTracker;  // never destroyed: thread contexts free at exit
  return *t;
}
void untrack(void* p) {
  AllocTracker& t = tracker();
  const std::lock_guard<std::mutex> lock(t.mutex);
  if (const auto it = t.sizes.find(p); it != t.sizes.end()) {
    t.current -= it->second;
    t.sizes.erase(it);
  }
}

// Device memory comes from the device's stream-ordered pool (cudaMallocAsync / cudaFreeAsync on
// the calling thread's stream), not from cudaMalloc / cudaFree, which synchronise the device: with
// runs packed on one GPU, each of the hundreds of allocations at a run's start and end waited for
// the other runs' work, and starting or ending a run took minutes (kernels/dev/pack_notes.md).
// Memory is used on the stream of the thread that allocated it, or is idle when another thread
// frees it (a stacked group's model after its last step), so a stream-ordered free is safe. The
// pool keeps what is freed (release threshold: all of it) for the next run to reuse.
cudaStream_t make_stream(int device) {
  cudaMemPool_t pool = nullptr;
  PB_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t keep = UINT64_MAX;
  PB_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  cudaStream_t s = nullptr;
  PB_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

// A thread's stream, cuBLAS handle with its fixed workspace, and scratch arenas, on one device.
// Never destroyed: a thread that ends gives its context to the next thread that needs one on that
// device, because cublasDestroy synchronises the device (cuBLAS documentation), which beside
// packed runs waits for all their queued work, and a packed sweep's slot threads end while others
// still train. The process's exit frees them.
struct Context {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  void* workspace = nullptr;
  void* scratch[kScratchArenas] = {};
  size_t scratch_bytes[kScratchArenas] = {};
};

struct ContextPool {
  std::mutex mutex;
  std::vector<Context*> idle;  // given back by threads that ended
};
ContextPool& context_pool() {
  static ContextPool* p = new ContextPool;  // never destroyed: threads give contexts back at exit
  return *p;
}

Context* new_context(int device) {
  const CaptureFence fence("creating a thread's stream and cuBLAS handle");
  const SlowCall timed("creating a thread's stream and cuBLAS handle");
  auto* c = new Context;
  c->device = device;
  c->stream = make_stream(device);
  PB_CUBLAS_CHECK(cublasCreate(&c->blas));
  PB_CUBLAS_CHECK(cublasSetStream(c->blas, c->stream));
  PB_CUBLAS_CHECK(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));  // fp32 GEMMs stay fp32 (no TF32)
  PB_CUDA_CHECK(cudaMallocAsync(&c->workspace, kBlasWorkspace, c->stream));
  PB_CUBLAS_CHECK(cublasSetWorkspace(c->blas, c->workspace, kBlasWorkspace));
  return c;
}

struct ThreadContext {  // the calling thread's context, back to the pool when the thread ends
  Context* c = nullptr;
  ~ThreadContext() {
    if (!c) return;
    ContextPool& p = context_pool();
    const std::lock_guard<std::mutex> lock(p.mutex);
    p.idle.push_back(c);
  }
};

Context& context() {
  thread_local ThreadContext t;
  if (t.c) return *t.c;
  int device = 0;
  PB_CUDA_CHECK(cudaGetDevice(&device));
  {
    ContextPool& p = context_pool();
    const std::lock_guard<std::mutex> lock(p.mutex);
    for (size_t i = 0; i < p.idle.size() && !t.c; ++i)
      if (p.idle[i]->device == device) t.c = p.idle[i], p.idle.erase(p.idle.begin() + i);
  }
  if (t.c) PB_CUBLAS_CHECK(cublasSetMathMode(t.c->blas, CUBLAS_DEFAULT_MATH));  // a new thread's precision: fp32
  else t.c = new_context(device);
  return *t.c;
}

// Page-locked host blocks are never given back (cudaFreeHost synchronises the device, and
// cudaMallocHost is slow): a freed block waits here for the next request it fits.
struct PinnedCache {
  std::mutex mutex;
  std::multimap<size_t, void*> idle;           // bytes → block
  std::unordered_map<void*, size_t> bytes_of;  // every block handed out
};
PinnedCache& pinned_cache() {
  static PinnedCache* c = new PinnedCache;  // never destroyed, like its blocks
  return *c;
}

}  // namespace

cudaStream_t stream() { return context().stream; }
cublasHandle_t blas() { return context().blas; }

void set_device(int device) { PB_CUDA_CHECK(cudaSetDevice(device)); }
void block_in_waits() {
  if (env_switch("PB_CUDA_SPIN", false)) return;
  if (const cudaError_t err = cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync); err != cudaSuccess) {
    cudaGetLastError();
    std::fprintf(stderr, "pathbench: waits for the GPU keep spinning (cudaSetDeviceFlags: %s)\n", cudaGetErrorString(err));
  }
}
void synchronize() {
  const cudaStream_t s = stream();
  const SlowCall timed("cudaStreamSynchronize");
  PB_CUDA_CHECK(cudaStreamSynchronize(s));
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  if (t_capture_lock.owns_lock()) throw Error("device_alloc while this thread captures a CUDA graph");
  const cudaStream_t s = stream();  // outside the fence: a first call creates the context under it
  {
    const CaptureFence fence("cudaMallocAsync");
    const SlowCall timed("cudaMallocAsync");
    const cudaError_t err = cudaMallocAsync(&p, bytes, s);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not a sticky error: clear it, the device stays usable
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      const double gib = 1 << 30;
      char what[256];  // snprintf, not fmt: nvcc builds this file without fmt's compiled part
      std::snprintf(what, sizeof(what), "out of GPU memory allocating %.3g GiB (%.3g of %.3g GiB free): reduce "
                    "--batch, --eval-batch, --d-model, --layers or the task's len, or run fewer runs per GPU",
                    bytes / gib, free_bytes / gib, total_bytes / gib);
      throw Error(what);
    }
    PB_CUDA_CHECK(err);
  }
  ++t_allocations;
  AllocTracker& t = tracker();
  const std::lock_guard<std::mutex> lock(t.mutex);
  t.sizes[p] = bytes;
  t.current += bytes;
  if (t.current > t.peak) t.peak = t.current;
  return p;
}
void device_free(void* p) {
  if (!p) return;
  untrack(p);
  const cudaStream_t s = stream();
  const CaptureFence fence("cudaFreeAsync");
  const SlowCall timed("cudaFreeAsync");
  cudaFreeAsync(p, s);
}
uint64_t allocation_count() { return t_allocations; }
void memory_info(size_t& free_bytes, size_t& total_bytes) { PB_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes)); }
uint64_t allocated_bytes() {
  AllocTracker& t = tracker();
  const std::lock_guard<std::mutex> lock(t.mutex);
  return t.current;
}
uint64_t peak_allocated_bytes() {
  AllocTracker& t = tracker();
  const std::lock_guard<std::mutex> lock(t.mutex);
  return t.peak;
}
void reset_peak_allocated() {
  AllocTracker& t = tracker();
  const std::lock_guard<std::mutex> lock(t.mutex);
  t.peak = t.current;
}

void* scratch(size_t bytes, int arena) {
  Context& ctx = context();
  if (bytes > ctx.scratch_bytes[arena]) {  // the old region is freed in stream order, after its last use
    device_free(ctx.scratch[arena]);
    ctx.scratch[arena] = device_alloc(bytes);
    ctx.scratch_bytes[arena] = bytes;
  }
  return ctx.scratch[arena];
}

namespace {
thread_local Precision t_precision = Precision::FP32;
}  // namespace

// TF32 through the handle's math mode (cublasSgemm then uses TF32 tensor cores); BF16 keeps the
// default math mode and is chosen per GEMM by matmul.cu (cublasGemmEx, CUBLAS_COMPUTE_32F_FAST_16BF).
void set_precision(Precision p) {
  PB_CUBLAS_CHECK(cublasSetMathMode(blas(), p == Precision::TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  t_precision = p;
}
Precision precision() { return t_precision; }

void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes) PB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()));
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  PB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()));
  synchronize();  // timed there
}
void copy_on_device(void* dst, const void* src, size_t bytes) {
  if (bytes) PB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()));
}
void zero_on_device(void* dst, size_t bytes) {
  if (bytes) PB_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream()));
}

void* host_alloc_pinned(size_t bytes) {
  if (bytes == 0) return nullptr;
  ++t_allocations;  // a cached block moves a graph's copies as much as a new one
  PinnedCache& c = pinned_cache();
  {
    const std::lock_guard<std::mutex> lock(c.mutex);
    if (const auto it = c.idle.lower_bound(bytes); it != c.idle.end() && it->first <= 2 * bytes) {
      void* p = it->second;
      c.idle.erase(it);
      return p;
    }
  }
  void* p = nullptr;
  {
    const CaptureFence fence("cudaMallocHost");
    const SlowCall timed("cudaMallocHost");
    PB_CUDA_CHECK(cudaMallocHost(&p, bytes));
  }
  const std::lock_guard<std::mutex> lock(c.mutex);
  c.bytes_of[p] = bytes;
  return p;
}
void host_free_pinned(void* p) {
  if (!p) return;
  const cudaStream_t s = stream();
  {
    const SlowCall timed("cudaStreamSynchronize before reusing a pinned block");
    cudaStreamSynchronize(s);  // a copy or host step of this thread's stream may still use it
  }
  PinnedCache& c = pinned_cache();
  const std::lock_guard<std::mutex> lock(c.mutex);
  if (const auto it = c.bytes_of.find(p); it != c.bytes_of.end()) c.idle.emplace(it->second, p);
}
void copy_to_host_async(void* dst_pinned, const void* src, size_t bytes) {
  if (bytes) PB_CUDA_CHECK(cudaMemcpyAsync(dst_pinned, src, bytes, cudaMemcpyDeviceToHost, stream()));
}
void launch_host(void (*fn)(void*), void* data) { PB_CUDA_CHECK(cudaLaunchHostFunc(stream(), fn, data)); }

namespace {
void release_capture_lock() {
  if (!t_capture_lock.owns_lock()) return;
  --g_capturing;
  t_capture_lock.unlock();
  t_capture_timer.reset();  // its line, if the capture was slow
}
}  // namespace

bool graphs_enabled() {
  static const bool on = env_switch("PB_CUDA_GRAPHS", true);
  return on;
}

Graph::~Graph() { reset(); }
void Graph::reset() {
  if (exec_) {
    const SlowCall timed("cudaGraphExecDestroy");
    cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  }
  exec_ = nullptr;
}
void Graph::begin() {
  reset();
  stream();  // the thread's context exists before the lock is taken
  t_capture_lock = std::shared_lock<WriterFirstMutex>(g_capture_mutex, std::defer_lock);
  lock_noting_holder(t_capture_lock, "waiting for the capture fence to capture");
  ++g_capturing;
  t_capture_timer.emplace("capturing a graph (the capture fence held shared)");
  const cudaError_t err = cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) release_capture_lock();
  PB_CUDA_CHECK(err);
}
void Graph::end() {
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream(), &graph);
  release_capture_lock();
  PB_CUDA_CHECK(ended);
  cudaGraphExec_t exec = nullptr;
  cudaError_t err;
  {
    const SlowCall timed("cudaGraphInstantiate");
    err = cudaGraphInstantiate(&exec, graph, 0);
  }
  cudaGraphDestroy(graph);
  PB_CUDA_CHECK(err);
  exec_ = exec;
}
void Graph::abort() {
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream(), &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
  cudaGetLastError();
  release_capture_lock();
}
void Graph::launch() {
  const cudaStream_t s = stream();
  const SlowCall timed("cudaGraphLaunch");
  PB_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), s));
}

Timer::Timer() {
  cudaEvent_t a, b;
  PB_CUDA_CHECK(cudaEventCreate(&a));
  PB_CUDA_CHECK(cudaEventCreate(&b));
  start_ = a, stop_ = b;
}
Timer::~Timer() {
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}
void Timer::start() { PB_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(start_), stream())); }
double Timer::stop_ms() {
  PB_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(stop_), stream()));
  PB_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)));
  float ms = 0;
  PB_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)));
  return ms;
}

}  // namespace cuda
}  // namespace pb
