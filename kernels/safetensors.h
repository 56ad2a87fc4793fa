// A small safetensors reader/writer (F32 and F64): an 8-byte little-endian header length, a JSON
// header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}
// padded with spaces to a multiple of 8, then the raw little-endian data. Loads in Python's
// `safetensors`. Values are held as double in memory; `dtype` says how they are stored.
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

// pb::Error naming the file and the problem for a missing, truncated or malformed file.
TensorMap read_safetensors(const std::string& path);
// Written atomically (temp file + rename).
void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The tensor `name` with the given shape, or a pb::Error naming the tensor, the expected and the
// found shape ("missing tensor 'q'", "tensor 'q' has shape (2, 3), expected (B, T, H, D) = ...").
const Tensor& require_tensor(const TensorMap& m, const std::string& name,
                             const std::vector<int64_t>& shape, const std::string& path);

std::string shape_str(const std::vector<int64_t>& shape);  // "(2, 3, 4)"

}  // namespace pb
