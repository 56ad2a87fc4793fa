#include "models/params.h"

#include "kernels/rng.h"

namespace pb {

template <class S>
int64_t ParamStore<S>::add(const std::string& prefix, const ParamSpec& spec) {
  int64_t size = 1;
  for (auto d : spec.shape) size *= d;
  const int64_t offset = entries.empty() ? 0 : entries.back().offset + entries.back().size;
  ParamEntry e{spec, offset, size};
  e.spec.name = prefix + spec.name;
  entries.push_back(e);
  return offset;
}

template <class S>
void ParamStore<S>::allocate_and_init(uint64_t seed) {
  const int64_t n = entries.empty() ? 0 : entries.back().offset + entries.back().size;
  params.assign(n, S(0));
  grads.assign(n, S(0));
  m.assign(n, S(0));
  v.assign(n, S(0));
  decay_mask.assign(n, 0);
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    Rng rng(seed, stream_id("init"), i);
    for (int64_t j = 0; j < e.size; ++j) {
      S& p = params[e.offset + j];
      switch (e.spec.init) {
        case Init::Normal: p = S(0.02 * rng.normal()); break;
        case Init::Zeros: p = S(0); break;
        case Init::Ones: p = S(1); break;
      }
      decay_mask[e.offset + j] = e.spec.decay;
    }
  }
}

template struct ParamStore<float>;
template struct ParamStore<double>;

}  // namespace pb
