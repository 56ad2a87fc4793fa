// Device and page-locked memory of core/cuda/runtime.h as runs packed in one process use it: a
// thread that allocates and frees while other threads keep the GPU busy does not wait for their
// work (runtime.cu: stream-ordered allocation; kernels/dev/pack_notes.md says why it matters), the
// byte counts follow every allocation, and a freed page-locked block is handed out again to a
// request it fits. Four busy threads launch 32 memsets of 256 MiB and a reduction between waits,
// the way training steps keep their streams full, so the GPU is never idle until they stop;
// the allocating thread must finish its 100 allocations and frees in 5 s. A call that waited for
// the device to be idle would wait for the busy threads to stop. The second case takes a run's
// whole life this way, phase by phase, beside threads that replay CUDA graphs as training does.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "core/cuda/runtime.h"
#include "kernels/cuda/ops.h"

using namespace pb;
using Clock = std::chrono::steady_clock;

// Four threads that keep the GPU busy until stopped or `seconds` have passed: each enqueues 32
// memsets of 256 MiB and a reduction, directly or (graphs) as a captured graph it replays, then
// waits for them, like a training step; `batches` counts the rounds.
class BusyThreads {
 public:
  BusyThreads(int seconds, bool graphs) : deadline_(Clock::now() + std::chrono::seconds(seconds)) {
    for (int t = 0; t < 4; ++t) threads_.emplace_back([this, graphs] { work(graphs); });
    while (batches < 8 && Clock::now() < deadline_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~BusyThreads() { stop(); }
  void stop() {
    stop_ = true;
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }
  std::atomic<int> batches{0};

 private:
  void work(bool graphs) {
    constexpr size_t kBig = size_t(256) << 20;
    float* big = static_cast<float*>(cuda::device_alloc(kBig));
    float* sum = static_cast<float*>(cuda::device_alloc(sizeof(float)));
    auto round = [&] {
      for (int i = 0; i < 32; ++i) cuda::zero_on_device(big, kBig);
      cuda::sum_squares(sum, big, int64_t(kBig / sizeof(float)));
    };
    cuda::Graph graph;
    if (graphs) {
      round();  // sizes the reduction's scratch before the capture, as a training step's warm-up does
      cuda::synchronize();
      graph.begin();
      round();
      graph.end();
    }
    while (!stop_ && Clock::now() < deadline_) {
      if (graphs) graph.launch();
      else round();
      cuda::synchronize();
      ++batches;
    }
    graph.reset();
    cuda::device_free(big);
    cuda::device_free(sum);
    cuda::synchronize();
  }
  const Clock::time_point deadline_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

TEST_CASE("cuda memory: allocating and freeing beside busy threads does not wait for their work", "[cuda]") {
  BusyThreads busy(15, false);

  const auto t0 = Clock::now();
  const int before = busy.batches;
  for (int i = 0; i < 100; ++i) {  // sizes as a model's buffers have them: 4 KiB to 16 MiB
    void* p = cuda::device_alloc(size_t(4096) << (i % 13));
    cuda::zero_on_device(p, 4096);
    cuda::device_free(p);
  }
  cuda::synchronize();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const int during = busy.batches - before;
  busy.stop();
  std::printf("100 allocations and frees beside 4 busy threads: %.3f s (%d of their batches ended meanwhile)\n",
              seconds, during);
  CHECK(seconds < 5.0);
}

// What a packed run does at its start and end, timed phase by phase on a new thread while four
// threads replay captured graphs for up to 20 s: a phase that waits for an idle device lasts until
// they stop and fails.
TEST_CASE("cuda memory: a run's start and end do not wait for threads replaying graphs", "[cuda]") {
  BusyThreads busy(20, true);

  std::vector<std::pair<const char*, double>> phases;  // (what, seconds), in order
  auto time = [&](const char* what, auto&& f) {
    const auto t0 = Clock::now();
    f();
    phases.emplace_back(what, std::chrono::duration<double>(Clock::now() - t0).count());
  };
  Clock::time_point last_op;
  const int before = busy.batches;
  std::thread run([&] {
    time("a new thread's stream and cuBLAS handle", [] { cuda::synchronize(); });
    std::vector<void*> held;
    time("256 new allocations of 16 MiB (the pool grows by 4 GiB)", [&] {
      for (int i = 0; i < 256; ++i) held.push_back(cuda::device_alloc(size_t(16) << 20));
      cuda::synchronize();
    });
    float* x = static_cast<float*>(held[0]);
    float* w = static_cast<float*>(held[1]);
    float* y = static_cast<float*>(held[2]);
    float* r = static_cast<float*>(held[3]);
    cuda::zero_on_device(x, 64 * 64 * sizeof(float));
    cuda::zero_on_device(w, 64 * 64 * sizeof(float));
    time("a first cuBLAS GEMM", [&] {
      cuda::matmul_forward(y, x, w, 64, 64, 64);
      cuda::synchronize();
    });
    time("a kernel's first launch (rmsnorm)", [&] {
      cuda::rmsnorm_forward(y, r, x, w, 64, 64, 1e-5);
      cuda::synchronize();
    });
    time("a graph captured, instantiated, launched and destroyed", [&] {
      cuda::Graph g;
      g.begin();
      cuda::zero_on_device(y, 4096);
      g.end();
      g.launch();
      cuda::synchronize();
    });
    time("freeing the 256 allocations", [&] {
      for (void* p : held) cuda::device_free(p);
      cuda::synchronize();
    });
    last_op = Clock::now();
  });
  run.join();
  phases.emplace_back("the thread's exit (its stream and cuBLAS handle kept for the next thread)",
                      std::chrono::duration<double>(Clock::now() - last_op).count());
  const int during = busy.batches - before;
  busy.stop();
  for (const auto& [what, seconds] : phases) {
    std::printf("beside 4 threads replaying graphs: %s: %.3f s\n", what, seconds);
    INFO(what);
    CHECK(seconds < 5.0);
  }
  std::printf("(%d of their batches ended while the run's thread lived)\n", during);
}

TEST_CASE("cuda memory: allocated bytes follow allocations and frees", "[cuda]") {
  const uint64_t base = cuda::allocated_bytes();
  const uint64_t count = cuda::allocation_count();
  void* a = cuda::device_alloc(1000);
  void* b = cuda::device_alloc(3000);
  CHECK(cuda::allocated_bytes() == base + 4000);
  CHECK(cuda::allocation_count() == count + 2);
  cuda::device_free(a);
  CHECK(cuda::allocated_bytes() == base + 3000);
  cuda::device_free(b);
  cuda::synchronize();
  CHECK(cuda::allocated_bytes() == base);
  CHECK(cuda::device_alloc(0) == nullptr);
}

TEST_CASE("cuda memory: a freed page-locked block serves the next request it fits", "[cuda]") {
  const uint64_t count = cuda::allocation_count();
  void* a = cuda::host_alloc_pinned(1000);
  cuda::host_free_pinned(a);
  void* b = cuda::host_alloc_pinned(800);  // fits (no more than twice the request): the same block
  CHECK(b == a);
  void* c = cuda::host_alloc_pinned(800);  // the block is taken: a new one
  CHECK(c != a);
  cuda::host_free_pinned(b);
  void* d = cuda::host_alloc_pinned(400);  // fits, but wastes more than half of it: a new block
  CHECK(d != a);
  CHECK(cuda::allocation_count() == count + 4);  // every block handed out moves a graph's copies
  for (void* p : {c, d}) cuda::host_free_pinned(p);
}
