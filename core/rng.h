// Counter-based RNG (Philox4x32-10 from Random123): the stream for (seed, stream_id, index) is a
// pure function of those three numbers, so any thread, shard or GPU can produce any example (or
// any parameter's init values) identically, in any order. Bounded integers use Lemire's method
// with rejection; nothing depends on the standard library's distributions.
#pragma once
#include <Random123/philox.h>

#include <cmath>
#include <cstdint>
#include <string_view>

namespace pb {

// FNV-1a of a name: turns "train", "val_sparse", "init" into a stream id.
constexpr uint32_t stream_id(std::string_view name) {
  uint32_t h = 2166136261u;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
  return h;
}

class Rng {
 public:
  Rng(uint64_t seed, uint32_t stream, uint64_t index) {
    key_ = {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32) ^ stream}};
    ctr_ = {{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0, stream}};
  }

  uint32_t next_u32() {
    if (pos_ == 4) {
      block_ = r123::Philox4x32()(ctr_, key_);
      ++ctr_.v[2];
      pos_ = 0;
    }
    return block_.v[pos_++];
  }

  // Uniform integer in [0, n), n >= 1 (Lemire's multiply-shift with rejection: unbiased).
  uint32_t below(uint32_t n) {
    uint64_t m = uint64_t(next_u32()) * n;
    uint32_t low = static_cast<uint32_t>(m);
    if (low < n) {
      const uint32_t threshold = (0u - n) % n;
      while (low < threshold) {
        m = uint64_t(next_u32()) * n;
        low = static_cast<uint32_t>(m);
      }
    }
    return static_cast<uint32_t>(m >> 32);
  }

  // Uniform double in [0, 1) with 53 random bits.
  double uniform() {
    const uint64_t hi = next_u32() >> 5, lo = next_u32() >> 6;
    return (hi * 67108864.0 + lo) * (1.0 / 9007199254740992.0);
  }

  // Standard normal (Box-Muller; one value per call, the pair's second is discarded for simplicity
  // of the counter bookkeeping).
  double normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  r123::Philox4x32::key_type key_;
  r123::Philox4x32::ctr_type ctr_;
  r123::Philox4x32::ctr_type block_{};
  int pos_ = 4;
};

}  // namespace pb
