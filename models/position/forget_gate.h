// The FoX forget gate shared by fox and path_fox: log f = logsigmoid(x W_f + b_f), one per head.
// Its two parameters sit at positions `first` and `first + 1` of the encoding's params().
#pragma once
#include <vector>

#include "models/position/position_encoding.h"
#include "models/position/projection.h"

namespace pb {

template <class S>
class ForgetGate {
 public:
  static std::vector<ParamSpec> params(const LayerDims& d) {
    return {{"w_f", {d.C, d.H}, Init::Normal, true}, {"b_f", {d.H}, Init::Zeros, false}};
  }

  const S* forward(const AttnInputs<S>& in, size_t first) {
    const int N = in.B * in.T, H = in.dims.H;
    z_.resize(size_t(N) * H);
    log_f_.resize(z_.size());
    dlog_f_.resize(z_.size());
    head_projection_forward(z_.data(), in.x, in.params[first], in.params[first + 1], N, in.dims.C, H);
    for (size_t i = 0; i < z_.size(); ++i) log_f_[i] = log_sigmoid(z_[i]);  // log f = log σ(z)
    return log_f_.data();
  }

  const S* log_f() const { return log_f_.data(); }
  S* dlog_f() { return dlog_f_.data(); }  // filled by the attention backward

  void backward(const AttnGrads<S>& g, const AttnInputs<S>& in, size_t first) {
    const int N = in.B * in.T, H = in.dims.H;
    for (size_t i = 0; i < z_.size(); ++i) dlog_f_[i] *= sigmoid(-z_[i]);  // d log σ(z)/dz = σ(−z)
    head_projection_backward(g.dx, g.dparams[first], g.dparams[first + 1], dlog_f_.data(), in.x,
                             in.params[first], N, in.dims.C, H);
  }

 private:
  std::vector<S> z_, log_f_, dlog_f_;  // (B, T, H)
};

}  // namespace pb
