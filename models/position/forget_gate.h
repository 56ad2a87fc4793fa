// The FoX forget gate shared by fox and path_fox: log f = scale · logsigmoid(x W_f + b_f), one per
// head (scale 1, or path_fox's gate_scale). Its two parameters sit at positions `first` and
// `first + 1` of the encoding's params(). b_f starts at the spec's `gate_bias` (0 as in FoX's and
// FLA's code: f ≈ σ(0) = 1/2 at init, a key d tokens back damped by about 2^−d; a large bias starts
// the gate near 1, attention near uniform over the past).
#pragma once
#include <vector>

#include "models/position/position_encoding.h"
#include "models/position/projection.h"

namespace pb {

// The spec key of b_f's initial value (a float: finite, core/spec.h), in fox's and path_fox's schemas.
inline ParamDef gate_bias_key() {
  return {"gate_bias", ParamType::Float, "0",
          "b_f at init: 0, f ≈ 1/2 (FoX, FLA); larger starts the gate nearer 1 (a flatter recency prior)",
          {}, true};
}

template <class E>
class ForgetGate {
 public:
  using S = typename E::Scalar;

  static std::vector<ParamSpec> params(const LayerDims& d, double bias) {
    return {{"w_f", {d.C, d.H}, Init::Normal, true}, {"b_f", {d.H}, Init::Constant, false, bias}};
  }

  const S* forward(const AttnInputs<S>& in, size_t first, double scale) {
    const int N = in.B * in.T, H = in.dims.H;
    z_.resize(size_t(N) * H);
    log_f_.resize(z_.size());
    dlog_f_.resize(z_.size());
    log_f_rows(log_f_.data(), z_.data(), in.x, in.params, first, N, in.dims.C, H, scale, in.runs);
    return log_f_.data();
  }

  // log f (N, H) of the N rows of x (N, C), z (N, H) scratch; forward() and decoding.
  static void log_f_rows(S* log_f, S* z, const S* x, std::span<const S* const> params, size_t first, int N,
                         int C, int H, double scale, Runs runs = {}) {
    head_projection_forward<E>(z, x, params[first], params[first + 1], N, C, H, runs);
    E::log_sigmoid_forward(log_f, z, int64_t(N) * H, scale);  // log f = scale · log σ(z)
  }

  const S* log_f() const { return log_f_.data(); }
  S* dlog_f() { return dlog_f_.data(); }  // filled by the attention backward

  void backward(const AttnGrads<S>& g, const AttnInputs<S>& in, size_t first, double scale) {
    const int N = in.B * in.T, H = in.dims.H;
    // dz = scale · dlog f · σ(−z)
    E::log_sigmoid_backward(dlog_f_.data(), dlog_f_.data(), z_.data(), int64_t(z_.size()), scale);
    head_projection_backward<E>(g.dx, g.dparams[first], g.dparams[first + 1], dlog_f_.data(), in.x,
                                in.params[first], N, in.dims.C, H, in.runs);
  }

 private:
  typename E::template Buffer<S> z_, log_f_, dlog_f_;  // (B, T, H)
};

}  // namespace pb
