// Helpers of the GPU tests: moving test vectors to and from the device, and NaN-poisoned device
// outputs (so an element the kernel forgot to write fails the comparison).
#pragma once
#include <limits>
#include <vector>

#include "kernels/cuda/buffer.h"
#include "kernels/cuda/runtime.h"

namespace pb::test {

template <class T>
cuda::DeviceBuffer<T> to_device(const std::vector<T>& h) {
  cuda::DeviceBuffer<T> d(h.size());
  cuda::copy_to_device(d.data(), h.data(), h.size() * sizeof(T));
  return d;
}

template <class T>
std::vector<T> to_host(const cuda::DeviceBuffer<T>& d) {
  std::vector<T> h(d.size());
  cuda::copy_to_host(h.data(), d.data(), d.size() * sizeof(T));  // waits for the stream
  return h;
}

// A device buffer of n floats, every one NaN.
inline cuda::DeviceBuffer<float> poisoned(size_t n) {
  return to_device(std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()));
}

}  // namespace pb::test
