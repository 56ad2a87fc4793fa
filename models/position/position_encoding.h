// The interface of a position encoding: one attention layer, given the projected q, k, v (and the
// normalised layer input x, from which an encoding computes its own inputs such as PaTH's w and β
// or FoX's forget gate), and its registry entry: what the rest of the code needs to know about it
// (EncodingInfo). Each encoding is one file in this folder plus one line in registry.cpp;
// README.md here has the guide "Adding a position encoding". Encodings are templated on the
// engine E (models/engine.h): pointers are in E's memory and ops are called as E::<op>(...).
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/spec.h"
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
  // Set by `pathbench attention` only: the encoding's attention inputs (EncodingInfo::inputs, in
  // that order) given directly. The encoding then uses them instead of computing them from x and
  // its parameters; x and params are unused (null, empty).
  std::span<const S* const> given = {};
  // Stacked runs (models/transformer.h): B = R · the runs' own batch; every op that reads one of
  // `params` gets this Runs (kernels/ops.h), so each run uses its own copy. One run by default.
  Runs runs = {};
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
  std::span<S* const> dgiven = {};  // with AttnInputs::given: their gradients (overwrite); dx, dparams unused
};

// Token-by-token decoding (models/decoder.h): the new token of each of B sequences, all at position
// t (0-based). Pointers are in E's memory, like AttnInputs.
template <class S>
struct DecodeInputs {
  int B, t;
  LayerDims dims;
  const S* x;  // (B, C) normalised layer input
  const S* q;  // (B, H, D)
  const S* k;  // (B, H, D)
  const S* v;  // (B, H, D)
  std::span<const S* const> params;  // in the order of params()
};

// The decoding state of one layer for B sequences of at most Tmax tokens: the cache of keys and
// values and whatever else the encoding keeps between tokens (gate sums, the short convolution's
// last inputs), in E's memory, O(Tmax) per sequence. Family implementations: decode.h (softmax,
// with PaTH's key update in path.h), sba.cpp.
template <class S>
class AttnDecoder {
 public:
  virtual ~AttnDecoder() = default;
  // out = the attention output of token in.t, the tokens 0 .. t − 1 having been fed before.
  virtual void step(S* out,  // (B, H, D)
                    const DecodeInputs<S>& in) = 0;
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
  // A fresh decoding state for B sequences of at most Tmax tokens (models/decoder.h); it may call
  // back into this encoding, which must outlive it.
  virtual std::unique_ptr<AttnDecoder<S>> decoder(const LayerDims& d, int B, int Tmax) = 0;
};

// The attention op an encoding runs: `bench attention` times that kernel.
enum class AttentionFamily {
  Softmax,        // softmax_attention (kernels/ops.h), with the gate and / or the bias table as hooks
  Path,           // path_attention: w, β and the optional gate
  StickBreaking,  // stick_breaking
  Custom,         // anything else (not timed by `bench attention`)
};

// The tensors an encoding computes from x and its parameters and hands to its attention op.
// `pathbench attention` reads them from its input file (and writes their gradients "d<name>").
enum class AttnInput {
  W,     // "w"     (B, T, H, D) unit rows (PaTH)
  Beta,  // "beta"  (B, T, H)    (PaTH)
  LogF,  // "log_f" (B, T, H)    the gate's log f
  Bias,  // "bias"  (H, T)       the relative-position bias table b_h(r), r = 0 .. T − 1
};
const char* input_name(AttnInput i);

// Legend style of the encoding in `pathbench plot`.
struct PlotStyle {
  const char* colour;  // "#rrggbb"
  int sides;           // marker: 0 circle, else a regular polygon
  double rotation;     // degrees
};

// What an encoding declares about itself; the runners and the tests derive everything from it.
struct EncodingInfo {
  AttentionFamily family = AttentionFamily::Softmax;
  bool gate = false;               // its attention adds the gate G_i − G_j (log f per token and head)
  std::vector<AttnInput> inputs{};  // what AttnInputs::given holds, in this order (Bias: the bias hook)
  bool cuda = true;                // the CUDA engine runs it (else refused there, CPU only)
  bool bf16 = true;                // at --precision bf16 it runs on bf16 kernels (else fp32 throughout)
  bool stacks = true;              // it trains stacked runs (AttnInputs::runs; else one run per model)
  std::string test_spec{};         // the spec of the small CPU and GPU tests ("" = the bare name)
  std::vector<std::string> test_variants{};  // further specs they also walk: options that change the computation
  PlotStyle style{nullptr, 0, 0};  // null colour: one derived from the name

  bool takes(AttnInput i) const {
    for (AttnInput x : inputs)
      if (x == i) return true;
    return false;
  }
};

// A registry entry: the schema (name, description, keys with defaults), what the encoding
// declares, and a factory per engine.
template <class E>
using EncodingFactory = std::unique_ptr<PositionEncoding<E>> (*)(const Spec&);

struct EncodingEntry {
  Schema schema;
  EncodingInfo info;
  EncodingFactory<Cpu32> make_cpu32;
  EncodingFactory<Cpu64> make_cpu64;
#if PATHBENCH_HAVE_CUDA
  EncodingFactory<CudaEngine> make_cuda;
#endif
};

template <template <class> class Enc>
EncodingEntry make_entry(Schema schema, EncodingInfo info) {
  return {std::move(schema), std::move(info),
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
inline constexpr const char* kDefaultEncoding = "rope";  // of a model configured without one (train --pe)
const std::vector<EncodingEntry>& encodings();  // in registry order (also the legend order)
const EncodingEntry& encoding_entry(std::string_view name);  // pb::Error for an unknown name
const EncodingInfo& encoding_info(std::string_view spec);   // of a spec's encoding; pb::Error as resolve_encoding
std::string test_spec(const EncodingEntry& e);  // e.info.test_spec, or the bare name
std::vector<std::string> test_specs(const EncodingEntry& e);  // test_spec(e), then e.info.test_variants
std::vector<Schema> encoding_schemas();
Spec resolve_encoding(std::string_view spec);  // pb::Error listing valid names / keys
// pb::Error also when the engine cannot run it (EncodingInfo::cuda).
template <class E>
std::unique_ptr<PositionEncoding<E>> make_encoding(std::string_view spec);

}  // namespace pb
