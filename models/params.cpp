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
void ParamStore<E>::allocate_and_init(const std::vector<uint64_t>& seeds) {
  if (seeds.empty()) fail("a model needs at least one run (seed)");
  const int64_t n = seeds.size() > 1 && E::on_device ? (count() + 15) / 16 * 16 : count();  // a block
  const int64_t all = n * int64_t(seeds.size());
  try {
    init(seeds, n);
  } catch (const std::bad_alloc&) {
    fail("out of host memory allocating {} parameters ({:.3g} GiB for the weights, gradients and AdamW moments): "
         "reduce --d-model, --mlp-ratio or --layers", all, 4.0 * double(all) * sizeof(S) / (1 << 30));
  }
}

template <class E>
void ParamStore<E>::init(const std::vector<uint64_t>& seeds, int64_t n) {  // n: one run's block
  runs = int(seeds.size());
  const int64_t all = n * runs;
  std::vector<S> host(all, S(0));
  std::vector<uint8_t> mask(all, 0);
  for (int r = 0; r < runs; ++r) {
    S* block = host.data() + r * n;  // (n) run r's parameters
    for (size_t i = 0; i < entries.size(); ++i) {
      const auto& e = entries[i];
      Rng rng(seeds[r], stream_id("init"), i);
      for (int64_t j = 0; j < e.size; ++j) {
        S& p = block[e.offset + j];
        switch (e.spec.init) {
          case Init::Normal: p = S(0.02 * rng.normal()); break;
          case Init::Zeros: p = S(0); break;
          case Init::Ones: p = S(1); break;
          case Init::Constant: p = S(e.spec.value); break;
        }
        mask[r * n + e.offset + j] = e.spec.decay;
      }
    }
  }
  for (auto* b : {&params, &grads, &m, &v}) {
    b->resize(all);
    E::zero(b->data(), all);
  }
  decay_mask.resize(all);
  E::upload(decay_mask.data(), mask.data(), all);
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
