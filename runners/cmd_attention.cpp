// `pathbench attention`: runs one attention variant on tensors from a safetensors file, for
// cross-checking against other implementations (e.g. FLA's Triton kernels). Reads q, k, v
// (B, T, H, D), plus w (B, T, H, D, unit-norm) and beta (B, T, H) for path/path_fox, and log_f
// (B, T, H) for fox/path_fox; scale 1/sqrt(D). Writes o, and with `do` in the input also dq, dk, dv
// and, where they exist, dw, dbeta, dlog_f. --device cuda runs the CUDA engine's kernels (f32).
#include <cmath>

#include "kernels/error.h"
#include "models/engine.h"
#include "kernels/safetensors.h"
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
  if (!in.count("q")) fail("'{}' has no tensor 'q' (expected shape (B, T, H, D))", path);
  const Tensor& q_t = in.at("q");
  if (q_t.shape.size() != 4) fail("tensor 'q' in '{}' has shape {}, expected (B, T, H, D)", path, shape_str(q_t.shape));
  const std::vector<int64_t> s4 = q_t.shape, s3 = {s4[0], s4[1], s4[2]};
  const AttnShape shape{int(s4[0]), int(s4[1]), int(s4[2]), int(s4[3])};
  const double scale = 1.0 / std::sqrt(double(shape.D));
  const std::string& name = pe.name();
  const bool is_path = name == "path" || name == "path_fox", gated = name == "fox" || name == "path_fox";
  if (name != "nope" && name != "rope" && name != "alibi" && name != "sba" && !is_path && !gated)
    fail("attention: encoding '{}' is not supported by this command", name);
  using B = Buf<E>;
  B q(in.at("q")), k(require_tensor(in, "k", s4, path)), v(require_tensor(in, "v", s4, path));
  B w, beta, log_f;
  if (is_path) w = B(require_tensor(in, "w", s4, path)), beta = B(require_tensor(in, "beta", s3, path));
  if (gated) log_f = B(require_tensor(in, "log_f", s3, path));
  const size_t n4 = q.v.size(), n3 = n4 / shape.D;
  if (name == "alibi") {  // the constant gate log f = −m_h, m_h = 2^(−8h/H)
    Tensor slopes{"F64", s3, std::vector<double>(n3)};
    for (size_t i = 0; i < n3; ++i) slopes.data[i] = -std::exp2(-8.0 * double(i % shape.H + 1) / shape.H);
    log_f = B(slopes);
  }
  B qr(n4), kr(n4);  // rope rotates q and k first
  const RopeArgs rope{shape, name == "rope" ? pe.get_float("base") : 0.0};
  if (name == "rope") E::rope_forward(qr.p(), q.p(), rope), E::rope_forward(kr.p(), k.p(), rope);
  else E::copy(qr.p(), q.p(), n4), E::copy(kr.p(), k.p(), n4);

  B o(n4), lse(n3);
  const SoftmaxAttentionArgs sargs{shape, scale};
  const PathAttentionArgs pargs{shape, scale, is_path ? int(pe.get_int("block")) : 64};
  if (is_path)
    E::path_attention_forward(o.p(), lse.p(), q.p(), k.p(), v.p(), w.p(), beta.p(), log_f.p(), pargs);
  else if (name == "sba")
    E::stick_breaking_forward(o.p(), q.p(), k.p(), v.p(), StickBreakingArgs{shape, scale});
  else
    E::softmax_attention_forward(o.p(), lse.p(), qr.p(), kr.p(), v.p(), log_f.p(), sargs);

  TensorMap out;
  auto put = [&](const char* key, const B& b, const std::vector<int64_t>& shp) {
    out[key] = Tensor{dtype, shp, b.host()};
  };
  put("o", o, s4);
  if (!in.count("do")) return out;
  B dout(require_tensor(in, "do", s4, path)), dq(n4), dk(n4), dv(n4), dw, dbeta, dlog_f;
  if (is_path) dw = B(n4), dbeta = B(n3);
  if (gated || name == "alibi") dlog_f = B(n3);
  if (is_path)
    E::path_attention_backward(dq.p(), dk.p(), dv.p(), dw.p(), dbeta.p(), dlog_f.p(), dout.p(), o.p(), lse.p(), q.p(),
                            k.p(), v.p(), w.p(), beta.p(), log_f.p(), pargs);
  else if (name == "sba")
    E::stick_breaking_backward(dq.p(), dk.p(), dv.p(), dout.p(), q.p(), k.p(), v.p(), StickBreakingArgs{shape, scale});
  else
    E::softmax_attention_backward(dq.p(), dk.p(), dv.p(), dlog_f.p(), dout.p(), o.p(), lse.p(), qr.p(), kr.p(), v.p(),
                               log_f.p(), sargs);
  if (name == "rope") E::rope_backward(dq.p(), dq.p(), rope), E::rope_backward(dk.p(), dk.p(), rope);
  put("dq", dq, s4), put("dk", dk, s4), put("dv", dv, s4);
  if (is_path) put("dw", dw, s4), put("dbeta", dbeta, s3);
  if (gated) put("dlog_f", dlog_f, s3);
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
  cmd->add_option("--in", o->in, "input safetensors: q, k, v [, w, beta, log_f, do]")->required();
  cmd->add_option("--out", o->out, "output safetensors: o [, dq, dk, dv, dw, dbeta, dlog_f]")->required();
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
