// Safetensors files (core/safetensors.cpp) as `attention --in` and `eval` (load_checkpoint)
// read them: read_safetensors, then require_tensor on every tensor found. Each tensor's data must
// hold exactly the product of its shape.
#include "fuzz/fuzz.h"
#include "core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pb;
  fuzz::expect_error([&] {
    const std::string path = fuzz::input_file("in.safetensors", fuzz::as_text(data, size));
    const TensorMap m = read_safetensors(path);
    for (const auto& [name, t] : m) {
      uint64_t n = 1;
      bool overflow = false;
      for (int64_t d : t.shape) overflow |= __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n);
      fuzz::require(!overflow && t.data.size() == n, "tensor data size equals the product of its shape");
      require_tensor(m, name, t.shape, path);
    }
  });
  return 0;
}
