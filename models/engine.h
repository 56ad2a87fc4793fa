// Engines: where the model's ops run. The model and the position encodings are written once,
// templated on an engine E, and call E::<op>(...) with the argument lists of kernels/ops.h:
//   CpuEngine<float|double>  the reference ops of kernels/cpu/ (double for gradient checks),
//                            buffers are std::vector;
//   CudaEngine               the ops of kernels/cuda/ on device pointers, buffers are
//                            cuda::DeviceBuffer, everything enqueued on the thread's stream.
// E::Buffer<T> holds the engine's memory; copy / zero / upload / download move it. Host steps, for
// a small computation on the host inside a step (HostBiasSoftmax, models/position/bias_softmax.h):
// E::HostBuffer<T> is host memory the engine copies to and from without waiting (pinned on the
// GPU); download_async into it, host_step(fn, data) runs fn(data) after the work enqueued before
// it, upload from it. On the GPU all three are enqueued on the stream, so a CUDA graph replays them.
#pragma once
#include <algorithm>
#include <cstddef>
#include <new>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/ops.h"
#if PATHBENCH_HAVE_CUDA
#include "core/cuda/buffer.h"
#include "kernels/cuda/ops.h"
#endif

// Every op an engine forwards (kernels/ops.h and kernels/cuda/ops.h declare the same list).
#define PB_ENGINE_OPS(X)                                                                     \
  X(matmul_forward) X(matmul_backward) X(rmsnorm_forward) X(rmsnorm_backward)                \
  X(swiglu_forward) X(swiglu_backward) X(embedding_forward) X(embedding_backward)            \
  X(cross_entropy_forward) X(cross_entropy_backward) X(loss_mean) X(short_conv_forward)      \
  X(short_conv_backward) X(l2norm_forward) X(l2norm_backward) X(sum_squares) X(adamw_update) \
  X(add_bias) X(bias_backward) X(log_sigmoid_forward) X(log_sigmoid_backward)                \
  X(beta_forward) X(beta_backward) X(rope_forward) X(rope_backward)                          \
  X(softmax_attention_forward) X(softmax_attention_backward) X(stick_breaking_forward)       \
  X(stick_breaking_backward) X(path_attention_forward) X(path_attention_backward)            \
  X(kv_append) X(decode_gate) X(decode_attention) X(path_key_update) X(decode_stick_breaking) \
  X(short_conv_step)

// Ops that so far have only their CPU reference (kernels/ops.h, kernels/cpu/): the CPU engines
// forward them like the others, the CUDA engine refuses them at run time, so a new op never breaks
// the CUDA build. An encoding calling one declares `.cuda = false` in its registry entry (the CUDA
// engine then refuses the encoding up front). When its .cu exists, the op moves to PB_ENGINE_OPS.
#define PB_CPU_ONLY_OPS(X)

namespace pb {

// 64-byte aligned storage for the CPU engine's buffers: Eigen's vectorised loops peel differently
// at other alignments, so buffers placed wherever malloc puts them would round differently from
// one run to the next in the same process.
template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <class U>
  bool operator==(const Aligned64<U>&) const { return true; }
};

template <class S>
struct CpuEngine {
  using Scalar = S;
  template <class T>
  using Buffer = std::vector<T, Aligned64<T>>;
  static constexpr bool on_device = false;

#define PB_FORWARD_CPU(op) \
  template <class... A>    \
  static void op(A&&... a) { pb::op(std::forward<A>(a)...); }
  PB_ENGINE_OPS(PB_FORWARD_CPU)
  PB_CPU_ONLY_OPS(PB_FORWARD_CPU)
#undef PB_FORWARD_CPU

  template <class T>
  static void copy(T* dst, const T* src, size_t n) { std::copy(src, src + n, dst); }
  template <class T>
  static void zero(T* dst, size_t n) { std::fill(dst, dst + n, T(0)); }
  template <class T>
  static void upload(T* dst, const T* host, size_t n) { copy(dst, host, n); }
  template <class T>
  static void download(T* host, const T* src, size_t n) { copy(host, src, n); }
  static void sync() {}  // waits for the work enqueued by this thread (none is left on the CPU)

  template <class T>
  using HostBuffer = Buffer<T>;
  template <class T>
  static void download_async(T* host, const T* src, size_t n) { copy(host, src, n); }
  static void host_step(void (*fn)(void*), void* data) { fn(data); }
};

using Cpu32 = CpuEngine<float>;
using Cpu64 = CpuEngine<double>;

#if PATHBENCH_HAVE_CUDA
struct CudaEngine {
  using Scalar = float;
  template <class T>
  using Buffer = cuda::DeviceBuffer<T>;
  static constexpr bool on_device = true;

#define PB_FORWARD_CUDA(op) \
  template <class... A>     \
  static void op(A&&... a) { pb::cuda::op(std::forward<A>(a)...); }
  PB_ENGINE_OPS(PB_FORWARD_CUDA)
#undef PB_FORWARD_CUDA
#define PB_REFUSE_CUDA(op) \
  template <class... A>    \
  static void op(A&&...) { fail("op '{}' has no CUDA implementation yet (CPU only)", #op); }
  PB_CPU_ONLY_OPS(PB_REFUSE_CUDA)
#undef PB_REFUSE_CUDA

  template <class T>
  static void copy(T* dst, const T* src, size_t n) { cuda::copy_on_device(dst, src, n * sizeof(T)); }
  template <class T>
  static void zero(T* dst, size_t n) { cuda::zero_on_device(dst, n * sizeof(T)); }
  template <class T>
  static void upload(T* dst, const T* host, size_t n) { cuda::copy_to_device(dst, host, n * sizeof(T)); }
  template <class T>
  static void download(T* host, const T* src, size_t n) { cuda::copy_to_host(host, src, n * sizeof(T)); }
  static void sync() { cuda::synchronize(); }  // waits for this thread's stream

  template <class T>
  using HostBuffer = cuda::PinnedBuffer<T>;
  template <class T>
  static void download_async(T* host, const T* src, size_t n) {
    cuda::copy_to_host_async(host, src, n * sizeof(T));
  }
  static void host_step(void (*fn)(void*), void* data) { cuda::launch_host(fn, data); }
};
#endif

}  // namespace pb
