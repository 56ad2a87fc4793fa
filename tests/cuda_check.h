// Helpers of the GPU tests: moving test vectors to and from the device, and NaN-poisoned device
// outputs (so an element the kernel forgot to write fails the comparison).
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/cuda/buffer.h"
#include "core/cuda/runtime.h"
#include "tests/check.h"

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

// Test values that float holds exactly, so the double CPU reference sees the kernel's inputs.
inline std::vector<double> round_to_float(std::vector<double> v) {
  for (auto& x : v) x = double(float(x));
  return v;
}
inline std::vector<double> randf(size_t n, uint64_t seed, double std = 1.0) {
  return round_to_float(randn(n, seed, std));
}
inline std::vector<double> randuf(size_t n, uint64_t seed, double lo, double hi) {
  return round_to_float(randu(n, seed, lo, hi));
}

// A device buffer of n floats, every one NaN.
inline cuda::DeviceBuffer<float> poisoned(size_t n) {
  return to_device(std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()));
}

}  // namespace pb::test

namespace pb::test {

// bf16 on the host: the bits of x rounded to nearest even (as __float2bfloat16_rn), and back.
inline uint16_t to_bf16_bits(double x) {
  const float f = float(x);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline double from_bf16_bits(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// x rounded to bf16 (still as doubles: what a float64 reference of a bf16 kernel gets).
inline std::vector<double> round_bf16(std::vector<double> x) {
  for (double& v : x) v = from_bf16_bits(to_bf16_bits(v));
  return x;
}
inline std::vector<uint16_t> bf16_bits(const std::vector<double>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = to_bf16_bits(x[i]);
  return out;
}
inline std::vector<double> from_bf16(const std::vector<uint16_t>& b) {
  std::vector<double> out(b.size());
  for (size_t i = 0; i < b.size(); ++i) out[i] = from_bf16_bits(b[i]);
  return out;
}
// A device buffer of n bf16 NaNs.
inline cuda::DeviceBuffer<uint16_t> poisoned_bf16(size_t n) {
  return to_device(std::vector<uint16_t>(n, uint16_t(0x7fc0)));
}

// a and b the same floats, bit for bit (a kernel against itself: in place, replayed, one stacked run).
inline void require_identical(const std::string& what, const std::vector<float>& a, const std::vector<float>& b) {
  INFO(what);
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace pb::test
