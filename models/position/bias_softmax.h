// The bases of the encodings that add a relative-position bias table to causal softmax attention
// (kerple, t5): s_ij = τ q_i·k_j + b_h(i − j). A BiasSoftmax computes the table b (H, T) from its
// parameters (table()) and maps the table's gradient back onto them (table_backward()); the
// attention, its gradients, `pathbench attention`'s given table and decoding are handled here.
// A HostBiasSoftmax only writes b_h(r) and its gradient as functions in double (below).
#pragma once
#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "models/position/decode.h"
#include "models/position/softmax_args.h"

namespace pb {

template <class E>
class BiasSoftmax : public PositionEncoding<E> {
 public:
  using S = typename E::Scalar;

  void forward(S* out, const AttnInputs<S>& in) override {
    lse_.resize(size_t(in.B) * in.T * in.dims.H);
    bias_.resize(size_t(in.dims.H) * in.T);
    dbias_.resize(bias_.size());
    if (in.given.empty()) table(bias_.data(), in);
    E::softmax_attention_forward(out, lse_.data(), in.q, in.k, in.v, (const S*)nullptr, softmax_args(in),
                                 in.given.empty() ? bias_.data() : in.given[0]);
  }

  void backward(const AttnGrads<S>& g, const AttnInputs<S>& in) override {
    const bool given = !in.given.empty();
    E::softmax_attention_backward(g.dq, g.dk, g.dv, (S*)nullptr, g.dout, g.out, lse_.data(), in.q, in.k, in.v,
                                  (const S*)nullptr, softmax_args(in), given ? g.dgiven[0] : dbias_.data(),
                                  given ? in.given[0] : bias_.data());
    if (!given) table_backward(g, dbias_.data(), in);
  }

  std::unique_ptr<AttnDecoder<S>> decoder(const LayerDims& d, int B, int Tmax) override {
    return std::make_unique<Decoder>(*this, d, B, Tmax);
  }

 protected:
  // bias (H, T) = b_h(r), r = 0 .. T − 1, from the parameters in.params.
  virtual void table(S* bias, const AttnInputs<S>& in) = 0;
  // g.dparams += the gradient of the table's parameters given dbias (H, T).
  virtual void table_backward(const AttnGrads<S>& g, const S* dbias, const AttnInputs<S>& in) = 0;

 private:
  // The cache with the table of the decoder's maximum length, computed at the first token (b_h(r)
  // does not depend on the table's length).
  class Decoder final : public SoftmaxDecoder<E> {
   public:
    Decoder(BiasSoftmax& enc, const LayerDims& d, int B, int Tmax)
        : SoftmaxDecoder<E>(d, B, Tmax, false), enc_(enc) {}

   protected:
    const S* bias(const DecodeInputs<S>& in, int& stride) override {
      const int length = this->Tmax();
      if (table_.empty()) {
        table_.resize(size_t(in.dims.H) * length);
        enc_.table(table_.data(), {1, length, in.dims, nullptr, nullptr, nullptr, nullptr, in.params});
      }
      stride = length;
      return table_.data();
    }

   private:
    BiasSoftmax& enc_;
    typename E::template Buffer<S> table_;  // (H, Tmax)
  };

  typename E::template Buffer<S> lse_;           // (B, T, H)
  typename E::template Buffer<S> bias_, dbias_;  // (H, T)
};

// A BiasSoftmax whose table is a closed-form function of a few parameters per head: every parameter
// tensor of the encoding has shape (H), and a = (a_0 .. a_{n−1}) are head h's entries. The derived
// encoding writes b_h(r) = bias(a, r) and ∂b_h(r)/∂a_k (bias_gradient) in double; the table is
// built on the host in a host step (models/engine.h, so a CUDA graph replays it):
//   forward:  download a (n, H), b_h(r) for r < T in double, upload b (H, T);
//   backward: download a and db (H, T), da_kh = Σ_r db_h(r) ∂b_h(r)/∂a_k in double, upload da,
//             g.dparams[k] += da_k (add_bias with one row).
template <class E>
class HostBiasSoftmax : public BiasSoftmax<E> {
 public:
  using S = typename E::Scalar;

 protected:
  virtual double bias(const double* a, int r) const = 0;                   // a (n)
  virtual void bias_gradient(double* da, const double* a, int r) const = 0;  // da (n) = ∂b(r)/∂a

 private:
  // The arguments of the host steps of one shape, at an address that stays valid while a graph
  // that captured them can replay.
  struct Step {
    HostBiasSoftmax* enc;
    int n, H, T;
  };

  void table(S* b, const AttnInputs<S>& in) final {
    Step& step = enqueue_download(in.params, in.dims.H, in.T);
    E::host_step(&table_on_host, &step);
    E::upload(b, host_table_.data(), size_t(step.H) * step.T);
  }

  void table_backward(const AttnGrads<S>& g, const S* dbias, const AttnInputs<S>& in) final {
    Step& step = enqueue_download(in.params, in.dims.H, in.T);
    E::download_async(host_table_.data(), dbias, size_t(step.H) * step.T);
    E::host_step(&gradient_on_host, &step);
    E::upload(da_.data(), host_da_.data(), host_da_.size());
    for (int k = 0; k < step.n; ++k) E::add_bias(g.dparams[k], da_.data() + size_t(k) * step.H, 1, step.H);
  }

  // Sizes the buffers and enqueues the download of the parameters into host_a_ (n, H).
  Step& enqueue_download(std::span<const S* const> params, int H, int T) {
    const int n = int(params.size());
    host_a_.resize(size_t(n) * H);
    host_da_.resize(host_a_.size());
    da_.resize(host_a_.size());
    host_table_.resize(size_t(H) * T);
    for (int k = 0; k < n; ++k) E::download_async(host_a_.data() + size_t(k) * H, params[k], H);
    return steps_.try_emplace({H, T}, Step{this, n, H, T}).first->second;
  }

  // a (n) of head h.
  std::vector<double> head(const Step& s, int h) const {
    std::vector<double> a(s.n);
    for (int k = 0; k < s.n; ++k) a[k] = host_a_.data()[size_t(k) * s.H + h];
    return a;
  }

  static void table_on_host(void* p) {  // host_table_ (H, T) = b
    const Step& s = *static_cast<const Step*>(p);
    S* b = s.enc->host_table_.data();
    for (int h = 0; h < s.H; ++h) {
      const std::vector<double> a = s.enc->head(s, h);
      for (int r = 0; r < s.T; ++r) b[size_t(h) * s.T + r] = S(s.enc->bias(a.data(), r));
    }
  }

  static void gradient_on_host(void* p) {  // host_da_ (n, H) from db (H, T) in host_table_
    const Step& s = *static_cast<const Step*>(p);
    const S* db = s.enc->host_table_.data();
    std::vector<double> da(s.n), sum(s.n);
    for (int h = 0; h < s.H; ++h) {
      const std::vector<double> a = s.enc->head(s, h);
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int r = 0; r < s.T; ++r) {
        s.enc->bias_gradient(da.data(), a.data(), r);
        for (int k = 0; k < s.n; ++k) sum[k] += double(db[size_t(h) * s.T + r]) * da[k];
      }
      for (int k = 0; k < s.n; ++k) s.enc->host_da_.data()[size_t(k) * s.H + h] = S(sum[k]);
    }
  }

  std::map<std::pair<int, int>, Step> steps_;          // by (H, T)
  typename E::template HostBuffer<S> host_a_, host_da_;  // (n, H)
  typename E::template HostBuffer<S> host_table_;       // (H, T): b forward, db backward
  typename E::template Buffer<S> da_;                   // (n, H)
};

}  // namespace pb
