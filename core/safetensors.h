// A small safetensors reader/writer (F32 and F64): an 8-byte little-endian header length, a JSON
// header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}
// padded with spaces to a multiple of 8, then the raw little-endian data. Loads in Python's
// `safetensors`. Values are held as double in memory; `dtype` says how they are stored.
// The writer adds __metadata__ "xxh3_64": XXH3-64 (seed 0) of the data section (every byte after
// the header), 16 hex digits; the reader checks it when present (files written elsewhere have none
// and load unchecked).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pb {

struct Tensor {
  std::string dtype = "F32";     // "F32" or "F64"
  std::vector<int64_t> shape;
  std::vector<double> data;      // row-major, product(shape) values
};

using TensorMap = std::map<std::string, Tensor>;

constexpr const char* kChecksumKey = "xxh3_64";  // the checksum's key in __metadata__

// pb::Error naming the file and the problem for a missing, truncated, malformed or corrupted
// (checksum mismatch) file. With `metadata`, also the string entries of __metadata__ (which the
// checksum does not cover).
TensorMap read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);
// XXH3-64 of the data section of the safetensors file at `path`, as its "xxh3_64" would hold it
// (computed, not read: files without the key have one too); a pb::Error if it is not such a file.
std::string safetensors_checksum(const std::string& path);
// Written atomically (temp file + rename).
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The tensor `name` with the given shape, or a pb::Error naming the tensor, the expected and the
// found shape ("missing tensor 'q'", "tensor 'q' has shape (2, 3), expected (B, T, H, D) = ...").
const Tensor& require_tensor(const TensorMap& m, const std::string& name,
                             const std::vector<int64_t>& shape, const std::string& path);

std::string shape_str(const std::vector<int64_t>& shape);  // "(2, 3, 4)"

}  // namespace pb
