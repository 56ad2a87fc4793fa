#include "core/safetensors.h"

#include <nlohmann/json.hpp>
#include "core/xxhash.h"

#include <cstring>

#include "core/error.h"
#include "core/io.h"

namespace pb {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

// "xxh3_64" of __metadata__: XXH3-64 (seed 0) of the data section, as 16 lowercase hex digits.
static std::string data_checksum(const char* data, size_t n) { return fmt::format("{:016x}", XXH3_64bits(data, n)); }

static int64_t numel(const std::vector<int64_t>& shape) {  // −1 when the product overflows
  int64_t n = 1;
  for (auto d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return -1;
  return n;
}

// The length of the JSON header after the file's first 8 bytes (which hold it), checked to fit.
static uint64_t header_length(const std::string& bytes, const std::string& path) {
  if (bytes.size() < 8) fail("'{}' is not a safetensors file: shorter than its 8-byte header length", path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > bytes.size() - 8) fail("'{}' is truncated: header of {} bytes does not fit", path, header_len);
  return header_len;
}

TensorMap read_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  const std::string bytes = read_file(path);
  const uint64_t header_len = header_length(bytes, path);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.substr(8, header_len));
  } catch (const nlohmann::json::exception& e) {
    fail("'{}': malformed safetensors header ({})", path, e.what());
  }
  if (!header.is_object()) fail("'{}': safetensors header is not a JSON object", path);
  const size_t base = 8 + header_len, data_len = bytes.size() - base;
  const auto meta = header.find("__metadata__");
  if (meta != header.end() && meta->is_object() && meta->contains(kChecksumKey)) {
    const auto& stored = (*meta)[kChecksumKey];
    const std::string computed = data_checksum(bytes.data() + base, data_len);
    if (!stored.is_string() || stored.get<std::string>() != computed)
      fail("'{}' is corrupted: the checksum of its tensor data ({} {}) does not match the stored {}", path,
           kChecksumKey, computed, stored.dump());
  }
  if (metadata && meta != header.end() && meta->is_object())
    for (const auto& [key, value] : meta->items())
      if (value.is_string()) (*metadata)[key] = value.get<std::string>();
  TensorMap out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    try {
      Tensor t;
      t.dtype = info.at("dtype").get<std::string>();
      t.shape = info.at("shape").get<std::vector<int64_t>>();
      const auto offs = info.at("data_offsets").get<std::vector<uint64_t>>();
      const size_t width = t.dtype == "F32" ? 4 : t.dtype == "F64" ? 8 : 0;
      if (width == 0) fail("'{}': tensor '{}' has dtype {}; only F32 and F64 are supported", path, name, t.dtype);
      for (auto d : t.shape)
        if (d < 0) fail("'{}': tensor '{}' has a negative dimension", path, name);
      const int64_t n = numel(t.shape);
      if (n < 0 || uint64_t(n) > data_len / width || offs.size() != 2 || offs[0] > offs[1] ||
          offs[1] > data_len || offs[1] - offs[0] != uint64_t(n) * width)
        fail("'{}': tensor '{}' data offsets do not match its shape {} and dtype, or lie outside the file",
             path, name, shape_str(t.shape));
      t.data.resize(n);
      const char* p = bytes.data() + base + offs[0];
      for (int64_t i = 0; i < n; ++i) {
        if (width == 4) {
          float f;
          std::memcpy(&f, p + 4 * i, 4);
          t.data[i] = f;
        } else {
          std::memcpy(&t.data[i], p + 8 * i, 8);
        }
      }
      out.emplace(name, std::move(t));
    } catch (const nlohmann::json::exception& e) {
      fail("'{}': malformed entry for tensor '{}' ({})", path, name, e.what());
    }
  }
  return out;
}

std::string safetensors_checksum(const std::string& path) {
  const std::string bytes = read_file(path);
  const uint64_t header_len = header_length(bytes, path);
  return data_checksum(bytes.data() + 8 + header_len, bytes.size() - 8 - header_len);
}

void write_safetensors(const std::string& path, const TensorMap& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {  // std::map: sorted names, deterministic layout
    const uint64_t bytes = t.data.size() * (t.dtype == "F64" ? 8 : 4);
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string data;  // (offset,) bytes: every tensor, in header order
  data.reserve(offset);
  for (const auto& [name, t] : tensors) {
    for (double v : t.data) {
      if (t.dtype == "F64") {
        data.append(reinterpret_cast<const char*>(&v), 8);
      } else {
        const float f = static_cast<float>(v);
        data.append(reinterpret_cast<const char*>(&f), 4);
      }
    }
  }
  header["__metadata__"] = metadata;
  header["__metadata__"][kChecksumKey] = data_checksum(data.data(), data.size());
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t len = h.size();
  std::memcpy(out.data(), &len, 8);
  out += h;
  out += data;
  write_file_atomic(path, out);
}

const Tensor& require_tensor(const TensorMap& m, const std::string& name,
                             const std::vector<int64_t>& shape, const std::string& path) {
  const auto it = m.find(name);
  if (it == m.end()) fail("'{}' has no tensor '{}' (expected shape {})", path, name, shape_str(shape));
  if (it->second.shape != shape)
    fail("tensor '{}' in '{}' has shape {}, expected {}", name, path, shape_str(it->second.shape), shape_str(shape));
  return it->second;
}

}  // namespace pb
