// `pathbench attention`: runs one attention variant on tensors from a safetensors file, for
// cross-checking against other implementations (e.g. FLA's Triton kernels). Reads q, k, v
// (B, T, H, D), plus w (B, T, H, D, unit-norm) and beta (B, T, H) for path/path_fox, and log_f
// (B, T, H) for fox/path_fox; scale 1/sqrt(D). Writes o, and with `do` in the input also dq, dk, dv
// and, where they exist, dw, dbeta, dlog_f.
#include <cmath>

#include "kernels/error.h"
#include "kernels/ops.h"
#include "kernels/safetensors.h"
#include "models/position/position_encoding.h"
#include "runners/commands.h"

namespace pb {
namespace {

template <class S>
struct Buf {  // a tensor of the file as a contiguous S array
  std::vector<S> v;
  Buf() = default;
  explicit Buf(const Tensor& t) : v(t.data.begin(), t.data.end()) {}
  explicit Buf(size_t n) : v(n) {}
  S* p() { return v.empty() ? nullptr : v.data(); }
};

template <class S>
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
  Buf<S> q(in.at("q")), k(require_tensor(in, "k", s4, path)), v(require_tensor(in, "v", s4, path));
  Buf<S> w, beta, log_f;
  if (is_path) w = Buf<S>(require_tensor(in, "w", s4, path)), beta = Buf<S>(require_tensor(in, "beta", s3, path));
  if (gated) log_f = Buf<S>(require_tensor(in, "log_f", s3, path));
  const size_t n4 = q.v.size(), n3 = n4 / shape.D;
  if (name == "alibi") {  // the constant gate log f = −m_h, m_h = 2^(−8h/H)
    log_f = Buf<S>(n3);
    for (size_t i = 0; i < n3; ++i) log_f.v[i] = -S(std::exp2(-8.0 * double(i % shape.H + 1) / shape.H));
  }
  Buf<S> qr = q, kr = k;  // rope rotates q and k first
  const RopeArgs rope{shape, name == "rope" ? pe.get_float("base") : 0.0};
  if (name == "rope") rope_forward(qr.p(), q.p(), rope), rope_forward(kr.p(), k.p(), rope);

  Buf<S> o(n4), lse(n3);
  const SoftmaxAttentionArgs sargs{shape, scale};
  const PathAttentionArgs pargs{shape, scale, is_path ? int(pe.get_int("block")) : 64};
  if (is_path)
    path_attention_forward(o.p(), lse.p(), q.p(), k.p(), v.p(), w.p(), beta.p(), log_f.p(), pargs);
  else if (name == "sba")
    stick_breaking_forward(o.p(), q.p(), k.p(), v.p(), StickBreakingArgs{shape, scale});
  else
    softmax_attention_forward(o.p(), lse.p(), qr.p(), kr.p(), v.p(), log_f.p(), sargs);

  TensorMap out;
  auto put = [&](const char* key, const Buf<S>& b, const std::vector<int64_t>& shp) {
    out[key] = Tensor{dtype, shp, std::vector<double>(b.v.begin(), b.v.end())};
  };
  put("o", o, s4);
  if (!in.count("do")) return out;
  Buf<S> dout(require_tensor(in, "do", s4, path)), dq(n4), dk(n4), dv(n4), dw, dbeta, dlog_f;
  if (is_path) dw = Buf<S>(n4), dbeta = Buf<S>(n3);
  if (gated || name == "alibi") dlog_f = Buf<S>(n3);
  if (is_path)
    path_attention_backward(dq.p(), dk.p(), dv.p(), dw.p(), dbeta.p(), dlog_f.p(), dout.p(), o.p(), lse.p(), q.p(),
                            k.p(), v.p(), w.p(), beta.p(), log_f.p(), pargs);
  else if (name == "sba")
    stick_breaking_backward(dq.p(), dk.p(), dv.p(), dout.p(), q.p(), k.p(), v.p(), StickBreakingArgs{shape, scale});
  else
    softmax_attention_backward(dq.p(), dk.p(), dv.p(), dlog_f.p(), dout.p(), o.p(), lse.p(), qr.p(), kr.p(), v.p(),
                               log_f.p(), sargs);
  if (name == "rope") rope_backward(dq.p(), dq.p(), rope), rope_backward(dk.p(), dk.p(), rope);
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
  cmd->add_option("--device", o->device, "cpu")->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "f32 | f64: compute and output precision")->capture_default_str();
  cmd->callback([o] {
    const Spec pe = resolve_encoding(o->pe);
    if (o->device != "cpu") fail("attention --device {}: only cpu is available in this build", o->device);
    if (o->dtype != "f32" && o->dtype != "f64") fail("--dtype must be f32 or f64, got '{}'", o->dtype);
    const TensorMap in = read_safetensors(o->in);
    const TensorMap out = o->dtype == "f32" ? run<float>(pe, in, o->in, "F32") : run<double>(pe, in, o->in, "F64");
    write_safetensors(o->out, out, {{"pe", pe.canonical()}});
  });
}

}  // namespace pb
