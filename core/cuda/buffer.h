// DeviceBuffer<T>: an owning array in device memory with the subset of std::vector's interface
// the model code uses (resize, data, size, empty); PinnedBuffer<T> the same in page-locked host
// memory, which the stream copies to and from without waiting (host steps, engine.h). resize()
// keeps its memory when shrinking, so pointers stay valid (a captured graph stays valid) across a
// smaller evaluation batch; contents are not preserved when it grows. Device memory exhausted: a
// pb::Error saying what to reduce (device_alloc).
#pragma once
#include <cstddef>
#include <utility>

#include "core/cuda/runtime.h"

namespace pb::cuda {

template <class T, void* (*alloc)(size_t), void (*release)(void*)>
class OwnedArray {
 public:
  OwnedArray() = default;
  explicit OwnedArray(size_t n) { resize(n); }
  OwnedArray(const OwnedArray&) = delete;
  OwnedArray& operator=(const OwnedArray&) = delete;
  OwnedArray(OwnedArray&& o) noexcept { swap(o); }
  OwnedArray& operator=(OwnedArray&& o) noexcept {
    swap(o);
    return *this;
  }
  ~OwnedArray() { release(ptr_); }

  void resize(size_t n) {
    if (n > capacity_) {
      release(ptr_);
      ptr_ = static_cast<T*>(alloc(n * sizeof(T)));
      capacity_ = n;
    }
    size_ = n;
  }
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  void swap(OwnedArray& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
  }
  T* ptr_ = nullptr;
  size_t size_ = 0, capacity_ = 0;
};

template <class T>
using DeviceBuffer = OwnedArray<T, device_alloc, device_free>;
template <class T>
using PinnedBuffer = OwnedArray<T, host_alloc_pinned, host_free_pinned>;

}  // namespace pb::cuda
