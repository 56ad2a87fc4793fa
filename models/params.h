// Parameters live in one flat buffer per model (params | grads | AdamW m | AdamW v) in the
// engine's memory, so the optimizer, gradient clipping, checkpoints and all-reduce treat "all
// parameters" as one span. Layers and encodings receive non-owning pointers into it, in the
// order of their ParamSpecs. A store of R stacked runs (Runs, kernels/ops.h) holds R such blocks
// one after the other, run r's at r · run_size(), each initialised from its own seed; `entries`
// give the offsets within one block. On the GPU a stacked run's block is padded with zeros to a
// multiple of 16 floats, so that every run's weights are as aligned as run 0's (cuBLAS's tensor-core
// paths and the kernels' float4 loads need 16 bytes); the padding never changes (no gradient, no
// decay).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/engine.h"

namespace pb {

enum class Init { Normal, Zeros, Ones, Constant };

struct ParamSpec {
  std::string name;            // relative to its owner, e.g. "w_beta"
  std::vector<int64_t> shape;  // row-major
  Init init = Init::Normal;    // Normal: N(0, 0.02²)
  bool decay = true;           // AdamW weight decay applies
  double value = 0;            // Init::Constant's value
};

struct ParamEntry {
  ParamSpec spec;    // spec.name is the full name, e.g. "layers.0.pe.w_beta"
  int64_t offset;    // into the flat buffers
  int64_t size;
};

template <class E>
struct ParamStore {
  using S = typename E::Scalar;
  template <class T>
  using Buf = typename E::template Buffer<T>;

  std::vector<ParamEntry> entries;
  Buf<S> params, grads, m, v;  // (runs, n) each
  Buf<uint8_t> decay_mask;     // (runs, n)
  int runs = 1;

  int64_t add(const std::string& prefix, const ParamSpec& spec);  // returns its offset
  // Zero grads and moments, params N(0, 0.02²) (or per Init) by a counter-based RNG per entry,
  // drawn on the host, so every engine starts from the same numbers. Host memory exhausted: a
  // pb::Error saying what to reduce (device memory: cuda::device_alloc's pb::Error).
  void allocate_and_init(uint64_t seed) { allocate_and_init(std::vector<uint64_t>{seed}); }
  void allocate_and_init(const std::vector<uint64_t>& seeds);  // one run per seed
  int64_t size() const { return static_cast<int64_t>(params.size()); }  // all runs
  int64_t run_size() const { return size() / runs; }                    // one run's block, padding included
  int64_t count() const { return entries.empty() ? 0 : entries.back().offset + entries.back().size; }  // one run's
  std::vector<S> to_host() const;              // the params
  void from_host(const std::vector<S>& host);  // sets the params

 private:
  void init(const std::vector<uint64_t>& seeds, int64_t n);  // allocate_and_init of n parameters per run
};

}  // namespace pb
