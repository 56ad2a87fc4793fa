// The position-encoding registry: one line per encoding in PB_POSITION_ENCODINGS. Each line names
// the factory `<name>_encoding()` defined in models/position/<name>.cpp. The list feeds the CLI's
// choices, `pathbench list`, `attention`, `bench attention`, the plots' legend order and the
// tests, which walk it.
#include <type_traits>

#include "core/error.h"
#include "models/position/position_encoding.h"

#define PB_POSITION_ENCODINGS(X) \
  X(nope)                        \
  X(rope)                        \
  X(alibi)                       \
  X(sba)                         \
  X(fox)                         \
  X(path)                        \
  X(path_fox)                    \
  X(kerple)                      \
  X(t5)

namespace pb {

#define PB_DECLARE(name) EncodingEntry name##_encoding();
PB_POSITION_ENCODINGS(PB_DECLARE)
#undef PB_DECLARE

const std::vector<EncodingEntry>& encodings() {
#define PB_ENTRY(name) name##_encoding(),
  static const std::vector<EncodingEntry> all = {PB_POSITION_ENCODINGS(PB_ENTRY)};
#undef PB_ENTRY
  return all;
}

const char* input_name(AttnInput i) {
  switch (i) {
    case AttnInput::W: return "w";
    case AttnInput::Beta: return "beta";
    case AttnInput::LogF: return "log_f";
    case AttnInput::Bias: return "bias";
  }
  return "?";
}

const EncodingEntry& encoding_entry(std::string_view name) {
  for (const auto& e : encodings())
    if (e.schema.name == name) return e;
  resolve_encoding(name);  // throws, listing the valid names
  fail("unknown position encoding '{}'", name);
}

std::string test_spec(const EncodingEntry& e) {
  return e.info.test_spec.empty() ? e.schema.name : e.info.test_spec;
}

std::vector<std::string> test_specs(const EncodingEntry& e) {
  std::vector<std::string> specs{test_spec(e)};
  specs.insert(specs.end(), e.info.test_variants.begin(), e.info.test_variants.end());
  return specs;
}

std::vector<Schema> encoding_schemas() {
  std::vector<Schema> s;
  for (const auto& e : encodings()) s.push_back(e.schema);
  return s;
}

Spec resolve_encoding(std::string_view spec) {
  return resolve_spec(spec, encoding_schemas(), "position encoding");
}

const EncodingInfo& encoding_info(std::string_view spec) { return encoding_entry(resolve_encoding(spec).name()).info; }

template <class E>
std::unique_ptr<PositionEncoding<E>> make_encoding(std::string_view text) {
  const Spec spec = resolve_encoding(text);  // checks the name, so the entry exists
  const EncodingEntry& e = encoding_entry(spec.name());
  if constexpr (std::is_same_v<E, Cpu32>) return e.make_cpu32(spec);
  else if constexpr (std::is_same_v<E, Cpu64>) return e.make_cpu64(spec);
#if PATHBENCH_HAVE_CUDA
  else {
    if (!e.info.cuda) fail("position encoding '{}' runs on the CPU only (--device cpu)", spec.name());
    return e.make_cuda(spec);
  }
#endif
}

template std::unique_ptr<PositionEncoding<Cpu32>> make_encoding<Cpu32>(std::string_view);
template std::unique_ptr<PositionEncoding<Cpu64>> make_encoding<Cpu64>(std::string_view);
#if PATHBENCH_HAVE_CUDA
template std::unique_ptr<PositionEncoding<CudaEngine>> make_encoding<CudaEngine>(std::string_view);
#endif

}  // namespace pb
