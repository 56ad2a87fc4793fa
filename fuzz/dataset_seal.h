// Rewrites the two XXH3 checksums of a binary dataset file (tasks/README.md, "Binary file layout")
// over its bytes as they are, so that a changed header field or record reaches the checks behind
// the checksums: the fuzz target does it to every input, the regression tests to the inputs found.
#pragma once
#include "core/xxhash.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "tasks/dataset_file.h"

namespace pb::fuzz {

inline void seal_dataset(std::string& f) {
  constexpr size_t kHeaderBytesAt = 12, kPayloadHashAt = 48, kHeaderHashAt = 56;
  if (f.size() < kDatasetFixedHeader) return;
  uint32_t header_bytes;
  std::memcpy(&header_bytes, f.data() + kHeaderBytesAt, 4);
  if (header_bytes < kDatasetFixedHeader || header_bytes > f.size()) return;
  const uint64_t payload = XXH3_64bits(f.data() + header_bytes, f.size() - header_bytes);
  std::memcpy(f.data() + kPayloadHashAt, &payload, 8);
  std::memset(f.data() + kHeaderHashAt, 0, 8);
  const uint64_t header = XXH3_64bits(f.data(), header_bytes);
  std::memcpy(f.data() + kHeaderHashAt, &header, 8);
}

}  // namespace pb::fuzz
