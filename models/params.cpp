#include "models/params.h"

#include <new>

#include "core/error.h"
#include "core/rng.h"

namespace pb {

template <class E>
int64_t ParamStore<E>::add(const std::string& prefix, const ParamSpec& spec) {
  int64_t size = 1;
  for (auto d : spec.shape) size *= d;
  const int64_t offset = entries.empty() ? 0 : entries.back().offset + entries.back().size;
  ParamEntry e{spec, offset, size};
  e.spec.name = prefix + spec.name;
  entries.push_back(e);
  return offset;
}

template <class E>
void ParamStore<E>::allocate_and_init(uint64_t seed) {
  const int64_t n = entries.empty() ? 0 : entries.back().offset + entries.back().size;
  try {
    init(seed, n);
  } catch (const std::bad_alloc&) {
    fail("out of host memory allocating {} parameters ({:.3g} GiB for the weights, gradients and AdamW moments): "
         "reduce --d-model, --mlp-ratio or --layers", n, 4.0 * double(n) * sizeof(S) / (1 << 30));
  }
}

template <class E>
void ParamStore<E>::init(uint64_t seed, int64_t n) {
  std::vector<S> host(n, S(0));
  std::vector<uint8_t> mask(n, 0);
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    Rng rng(seed, stream_id("init"), i);
    for (int64_t j = 0; j < e.size; ++j) {
      S& p = host[e.offset + j];
      switch (e.spec.init) {
        case Init::Normal: p = S(0.02 * rng.normal()); break;
        case Init::Zeros: p = S(0); break;
        case Init::Ones: p = S(1); break;
      }
      mask[e.offset + j] = e.spec.decay;
    }
  }
  for (auto* b : {&params, &grads, &m, &v}) {
    b->resize(n);
    E::zero(b->data(), n);
  }
  decay_mask.resize(n);
  E::upload(decay_mask.data(), mask.data(), n);
  from_host(host);
}

template <class E>
std::vector<typename E::Scalar> ParamStore<E>::to_host() const {
  std::vector<S> host(params.size());
  E::download(host.data(), params.data(), host.size());
  return host;
}

template <class E>
void ParamStore<E>::from_host(const std::vector<S>& host) {
  E::upload(params.data(), host.data(), host.size());
}

template struct ParamStore<Cpu32>;
template struct ParamStore<Cpu64>;
#if PATHBENCH_HAVE_CUDA
template struct ParamStore<CudaEngine>;
#endif

}  // namespace pb
