// t5: T5 relative-position buckets (Raffel et al. 2020), causal: a learned bias per head and bucket
// of the distance r = i − j ≥ 0, added by the softmax kernel's bias hook. Buckets as T5's
// unidirectional _relative_position_bucket: with E = num_buckets / 2, r < E is its own bucket,
// larger r go to E + ⌊log(r / E) / log(max_distance / E) · (num_buckets − E)⌋, at most
// num_buckets − 1. The table is a product with a fixed one-hot matrix, b (H, T) = θ (H, NB) Pᵀ
// with P_rn = [bucket(r) = n], so it needs no kernel of its own: dθ += db P.
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "core/error.h"
#include "models/position/bias_softmax.h"

namespace pb {
namespace {

template <class E>
class T5 final : public BiasSoftmax<E> {
 public:
  using S = typename E::Scalar;
  explicit T5(const Spec& spec)
      : buckets_(int(spec.get_int("num_buckets"))), max_distance_(int(spec.get_int("max_distance"))) {
    if (buckets_ < 2) fail("t5: num_buckets must be >= 2, got {}", buckets_);
    if (max_distance_ <= buckets_ / 2)
      fail("t5: max_distance must exceed num_buckets / 2 = {}, got {}", buckets_ / 2, max_distance_);
  }

  std::vector<ParamSpec> params(const LayerDims& d) const override {
    return {{"table", {d.H, buckets_}, Init::Normal, false}};
  }

  void table(S* bias, const AttnInputs<S>& in) override {  // b = θ Pᵀ
    E::matmul_forward(bias, in.params[0], one_hot(in.T).pt.data(), in.dims.H, buckets_, in.T);
  }

  void table_backward(const AttnGrads<S>& g, const S* dbias, const AttnInputs<S>& in) override {  // dθ += db P
    E::matmul_forward(g.dparams[0], dbias, one_hot(in.T).p.data(), in.dims.H, in.T, buckets_,
                      GradMode::Accumulate);
  }

 private:
  int bucket(int r) const {
    const int exact = buckets_ / 2;
    if (r < exact) return r;
    const double x =
        std::log(double(r) / exact) / std::log(double(max_distance_) / exact) * (buckets_ - exact);
    return std::min(exact + int(x), buckets_ - 1);
  }

  // P_rn = [bucket(r) = n] for one length T.
  struct OneHot {
    typename E::template Buffer<S> p, pt;  // P (T, NB), Pᵀ (NB, T)
  };

  // Built once per length and kept: a captured training step goes on reading its length's
  // matrices after an evaluation at another length.
  const OneHot& one_hot(int T) {
    auto [it, added] = one_hot_.try_emplace(T);
    if (added) {
      std::vector<S> p(size_t(T) * buckets_, S(0)), pt(p.size(), S(0));
      for (int r = 0; r < T; ++r) {
        const int n = bucket(r);
        p[size_t(r) * buckets_ + n] = pt[size_t(n) * T + r] = S(1);
      }
      it->second.p.resize(p.size());
      it->second.pt.resize(pt.size());
      E::upload(it->second.p.data(), p.data(), p.size());
      E::upload(it->second.pt.data(), pt.data(), pt.size());
    }
    return it->second;
  }

  int buckets_, max_distance_;
  std::map<int, OneHot> one_hot_;  // by T
};

}  // namespace

EncodingEntry t5_encoding() {
  return make_entry<T5>({"t5", "T5 relative buckets (causal): learned bias per head and distance bucket",
                         {{"num_buckets", ParamType::Int, "32", "distance buckets (half exact, half log-spaced)",
                           {}},
                          {"max_distance", ParamType::Int, "128", "distances from here share the last bucket",
                           {}}}},
                        {.family = AttentionFamily::Softmax,
                         .inputs = {AttnInput::Bias},
                         .stacks = false,  // one bias table (H, T) for the whole batch
                         .test_spec = "t5:num_buckets=6,max_distance=8"});  // exact and log buckets at T ≥ 5
}

}  // namespace pb
