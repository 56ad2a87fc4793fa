// DeviceBuffer<T>: an owning array in device memory with the subset of std::vector's interface
// the model code uses (resize, data, size, empty). resize() keeps its memory when shrinking, so
// pointers stay valid (a captured graph stays valid) across a smaller evaluation batch; contents
// are not preserved when it grows. Device memory exhausted: a pb::Error saying what to reduce
// (device_alloc).
#pragma once
#include <cstddef>
#include <utility>

#include "core/cuda/runtime.h"

namespace pb::cuda {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    swap(o);
    return *this;
  }
  ~DeviceBuffer() { device_free(ptr_); }

  void resize(size_t n) {
    if (n > capacity_) {
      device_free(ptr_);
      ptr_ = static_cast<T*>(device_alloc(n * sizeof(T)));
      capacity_ = n;
    }
    size_ = n;
  }
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  void swap(DeviceBuffer& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
  }
  T* ptr_ = nullptr;
  size_t size_ = 0, capacity_ = 0;
};

}  // namespace pb::cuda
