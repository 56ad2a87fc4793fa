// The interface of a position encoding: one attention layer, given the projected q, k, v (and the
// normalised layer input x, from which an encoding computes its own inputs such as PaTH's w and β
// or FoX's forget gate). Each encoding is one file in this folder plus one line in registry.cpp;
// README.md here has the guide "Adding a position encoding". Encodings are templated on the
// engine E (models/engine.h): pointers are in E's memory and ops are called as E::<op>(...).
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/spec.h"
#include "models/engine.h"
#include "models/params.h"

namespace pb {

struct LayerDims {
  int C;  // d_model
  int H;  // heads
  int D;  // head dim
};

template <class S>
struct AttnInputs {
  int B, T;
  LayerDims dims;
  const S* x;                  // (B, T, C) normalised layer input
  const S* q;                  // (B, T, H, D)
  const S* k;                  // (B, T, H, D)
  const S* v;                  // (B, T, H, D)
  std::span<const S* const> params;  // in the order of params()
};

template <class S>
struct AttnGrads {
  const S* out;                // (B, T, H, D) the output of forward()
  const S* dout;               // (B, T, H, D) gradient of the output
  S* dx;                       // (B, T, C)    accumulate (+=)
  S* dq;                       // (B, T, H, D) overwrite
  S* dk;                       // (B, T, H, D) overwrite
  S* dv;                       // (B, T, H, D) overwrite
  std::span<S* const> dparams; // accumulate (+=), in the order of params()
};

template <class E>
class PositionEncoding {
 public:
  using S = typename E::Scalar;

  virtual ~PositionEncoding() = default;
  // Its own per-layer parameters (none by default).
  virtual std::vector<ParamSpec> params(const LayerDims&) const { return {}; }
  // out = attention(q, k, v) under this encoding; may keep what backward() needs.
  virtual void forward(S* out,  // (B, T, H, D)
                       const AttnInputs<S>& in) = 0;
  // Backward of the last forward() with the same inputs.
  virtual void backward(const AttnGrads<S>& g, const AttnInputs<S>& in) = 0;
};

// A registry entry: the schema (name, description, keys with defaults) and a factory per engine.
template <class E>
using EncodingFactory = std::unique_ptr<PositionEncoding<E>> (*)(const Spec&);

struct EncodingEntry {
  Schema schema;
  EncodingFactory<Cpu32> make_cpu32;
  EncodingFactory<Cpu64> make_cpu64;
#if PATHBENCH_HAVE_CUDA
  EncodingFactory<CudaEngine> make_cuda;
#endif
};

template <template <class> class Enc>
EncodingEntry make_entry(Schema schema) {
  return {std::move(schema),
          [](const Spec& s) -> std::unique_ptr<PositionEncoding<Cpu32>> { return std::make_unique<Enc<Cpu32>>(s); },
          [](const Spec& s) -> std::unique_ptr<PositionEncoding<Cpu64>> { return std::make_unique<Enc<Cpu64>>(s); },
#if PATHBENCH_HAVE_CUDA
          [](const Spec& s) -> std::unique_ptr<PositionEncoding<CudaEngine>> {
            return std::make_unique<Enc<CudaEngine>>(s);
          },
#endif
  };
}

// registry.cpp
const std::vector<EncodingEntry>& encodings();
std::vector<Schema> encoding_schemas();
Spec resolve_encoding(std::string_view spec);  // pb::Error listing valid names / keys
template <class E>
std::unique_ptr<PositionEncoding<E>> make_encoding(std::string_view spec);

}  // namespace pb
