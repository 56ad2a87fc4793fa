// `pathbench attention`: runs one encoding's attention on tensors from a safetensors file, for
// cross-checking against other implementations (e.g. FLA's Triton kernels). The encoding comes from
// the registry and runs its own forward and backward on q, k, v (B, T, H, D) and the attention
// inputs its entry declares (EncodingInfo::inputs: w (B, T, H, D) unit rows, beta (B, T, H),
// log_f (B, T, H), bias (H, T)), read from the file instead of computed from x and parameters;
// scale 1/sqrt(D). Writes o, and with `do` in the input also dq, dk, dv and d<input> for each
// input. --device cuda runs the CUDA engine's kernels (f32).
#include <vector>

#include "core/error.h"
#include "core/safetensors.h"
#include "models/engine.h"
#include "models/position/position_encoding.h"
#include "runners/commands.h"
#include "runners/trainer.h"

namespace pb {
namespace {

template <class E>
struct Buf {  // a tensor of the file as a contiguous array in the engine's memory
  using S = typename E::Scalar;
  typename E::template Buffer<S> v;
  Buf() = default;
  explicit Buf(size_t n) { v.resize(n); }
  explicit Buf(const Tensor& t) : Buf(t.data.size()) {
    const std::vector<S> host(t.data.begin(), t.data.end());
    E::upload(v.data(), host.data(), host.size());
  }
  S* p() { return v.empty() ? nullptr : v.data(); }
  std::vector<double> host() const {
    std::vector<S> h(v.size());
    E::download(h.data(), v.data(), h.size());
    return {h.begin(), h.end()};
  }
};

template <class E>
TensorMap run(const Spec& pe, const TensorMap& in, const std::string& path, const std::string& dtype) {
  using S = typename E::Scalar;
  if (!in.count("q")) fail("'{}' has no tensor 'q' (expected shape (B, T, H, D))", path);
  const Tensor& q_t = in.at("q");
  if (q_t.shape.size() != 4) fail("tensor 'q' in '{}' has shape {}, expected (B, T, H, D)", path, shape_str(q_t.shape));
  const std::vector<int64_t> s4 = q_t.shape;
  const int B = int(s4[0]), T = int(s4[1]), H = int(s4[2]), D = int(s4[3]);
  const auto shape_of = [&](AttnInput i) -> std::vector<int64_t> {
    if (i == AttnInput::W) return s4;
    if (i == AttnInput::Bias) return {H, T};
    return {B, T, H};
  };
  const EncodingInfo& info = encoding_entry(pe.name()).info;
  auto encoding = make_encoding<E>(pe.canonical());  // refused here when E cannot run it
  if (info.inputs.empty() && !encoding->params({0, H, D}).empty())
    fail("attention: encoding '{}' has parameters but declares no attention inputs to read instead",
         pe.name());

  Buf<E> q(q_t), k(require_tensor(in, "k", s4, path)), v(require_tensor(in, "v", s4, path)), o(q.v.size());
  std::vector<Buf<E>> given;
  std::vector<const S*> given_p;
  for (AttnInput i : info.inputs) given.emplace_back(require_tensor(in, input_name(i), shape_of(i), path));
  for (auto& g : given) given_p.push_back(g.p());
  const AttnInputs<S> args{B, T, {0, H, D}, nullptr, q.p(), k.p(), v.p(), {}, given_p};
  encoding->forward(o.p(), args);

  TensorMap out;
  out["o"] = Tensor{dtype, s4, o.host()};
  if (!in.count("do")) return out;
  Buf<E> dout(require_tensor(in, "do", s4, path)), dq(q.v.size()), dk(q.v.size()), dv(q.v.size());
  std::vector<Buf<E>> dgiven;
  std::vector<S*> dgiven_p;
  for (auto& g : given) dgiven.emplace_back(g.v.size());
  for (auto& g : dgiven) dgiven_p.push_back(g.p());
  encoding->backward({o.p(), dout.p(), nullptr, dq.p(), dk.p(), dv.p(), {}, dgiven_p}, args);
  out["dq"] = Tensor{dtype, s4, dq.host()};
  out["dk"] = Tensor{dtype, s4, dk.host()};
  out["dv"] = Tensor{dtype, s4, dv.host()};
  for (size_t i = 0; i < given.size(); ++i) {
    const AttnInput x = info.inputs[i];
    out[std::string("d") + input_name(x)] = Tensor{dtype, shape_of(x), dgiven[i].host()};
  }
  return out;
}

}  // namespace

void add_attention_command(CLI::App& app) {
  struct Opts {
    std::string pe, in, out, device = "cpu", dtype = "f32";
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("attention", "Run one attention variant on tensors from a safetensors file");
  cmd->add_option("--pe", o->pe, "position-encoding spec")->required();
  cmd->add_option("--in", o->in, "input safetensors: q, k, v, the encoding's inputs (w, beta, log_f, bias), [do]")
      ->required();
  cmd->add_option("--out", o->out, "output safetensors: o [, dq, dk, dv, d<input>]")->required();
  cmd->add_option("--device", o->device, "cpu | cuda (f32 only)")->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "f32 | f64: compute and output precision")->capture_default_str();
  cmd->callback([o] {
    const Spec pe = resolve_encoding(o->pe);
    if (o->dtype != "f32" && o->dtype != "f64") fail("--dtype must be f32 or f64, got '{}'", o->dtype);
    if (o->device != "cpu" && o->device != "cuda") fail("--device must be cpu or cuda, got '{}'", o->device);
    if (o->device == "cuda" && o->dtype != "f32") fail("attention --device cuda computes in f32 only (--dtype f32)");
    TrainConfig device_cfg;
    device_cfg.device = o->device;
    const std::string device = select_device(device_cfg);  // pb::Error when cuda is unavailable
    const TensorMap in = read_safetensors(o->in);
    TensorMap out;
    if (o->dtype == "f64") out = run<Cpu64>(pe, in, o->in, "F64");
    else with_engine(device, [&](auto engine) { out = run<decltype(engine)>(pe, in, o->in, "F32"); });
    write_safetensors(o->out, out, {{"pe", pe.canonical()}});
  });
}

}  // namespace pb
