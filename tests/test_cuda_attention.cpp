// The CUDA softmax attention (with the FoX gate) and stick-breaking attention against the CPU
// reference run in double on the same inputs: relative RMS ≤ 1e-5 for the forward (o, lse) and
// ≤ 1e-4 for every gradient (tests/README.md, float against double). Device outputs start as NaN,
// so an element a kernel forgot to write fails. Shapes cover T ∈ {1, 7, 63, 100, 1000} (one tile,
// partial tiles, many tiles) × D ∈ {8, 32, 50, 64, 128, 200} (every padded head dim, with and
// without masked columns); also larger logits (q, k ~ N(0, 9)), reruns bit for bit, and no device
// allocation once the scratch is sized.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "kernels/cuda/ops.h"
#include "core/cuda/runtime.h"
#include "kernels/ops.h"
#include "tests/check.h"
#include "tests/cuda_check.h"

namespace pb {
namespace {

using test::cast;
using test::rel_rms;

constexpr double kForwardTol = 1e-5, kGradTol = 1e-4;

size_t n_elems(const AttnShape& s) { return size_t(s.B) * s.T * s.H * s.D; }
size_t n_scalars(const AttnShape& s) { return size_t(s.B) * s.T * s.H; }
double default_scale(const AttnShape& s) { return 1.0 / std::sqrt(double(s.D)); }

// Sequence lengths × head dims; B·H = 6 heads, 2 for T = 1000 (the double reference is T²).
std::vector<AttnShape> shapes() {
  std::vector<AttnShape> out;
  for (const int T : {1, 7, 63, 100, 1000})
    for (const int D : {8, 32, 50, 64, 128}) out.push_back(T < 1000 ? AttnShape{2, T, 3, D} : AttnShape{1, T, 2, D});
  out.push_back({1, 130, 2, 200});  // the padded head dim 256
  return out;
}

std::string describe(const AttnShape& s) {
  return fmt::format("B={} T={} H={} D={}", s.B, s.T, s.H, s.D);
}

// No gate, log_f = log σ(z) with z ~ N(0, 1), or strongly negative log_f ≈ −5 (z ~ N(−5, 1)).
enum class Gate { None, Random, Strong };
const char* gate_name(Gate g) { return g == Gate::None ? "no gate" : g == Gate::Random ? "gate" : "strong gate"; }

struct Inputs {
  std::vector<double> q, k, v, dout;  // (B, T, H, D)
  std::vector<double> log_f;          // (B, T, H), empty without a gate
};

Inputs make_inputs(const AttnShape& s, uint64_t seed, Gate gate, double qk_std = 1.0) {
  const size_t n = n_elems(s);
  Inputs in{test::randn(n, seed, qk_std), test::randn(n, seed + 1, qk_std), test::randn(n, seed + 2),
            test::randn(n, seed + 3), {}};
  if (gate == Gate::None) return in;
  in.log_f = test::randn(n_scalars(s), seed + 4);
  for (double& x : in.log_f) {
    if (gate == Gate::Strong) x -= 5;
    x = std::min(x, 0.0) - std::log1p(std::exp(-std::abs(x)));  // log σ(x)
  }
  return in;
}

template <class S>
struct Result {
  std::vector<S> o, lse, dq, dk, dv, dlog_f;
};

// Relative RMS of a GPU result against the double reference, within `tol` (NaN fails).
void check_rel(const std::string& what, const std::vector<float>& got, const std::vector<double>& want,
               double tol) {
  const double err = rel_rms(got, want);
  INFO(what << ": relative RMS " << err << " (tolerance " << tol << ")");
  CHECK(err <= tol);
}

// ---------------------------------------------------------------------------------------------
// Softmax attention

Result<double> cpu_softmax(const AttnShape& s, const Inputs& in) {
  const SoftmaxAttentionArgs args{s, default_scale(s)};
  const double* log_f = in.log_f.empty() ? nullptr : in.log_f.data();
  Result<double> r;
  r.o.resize(n_elems(s));
  r.lse.resize(n_scalars(s));
  r.dq.resize(n_elems(s));
  r.dk.resize(n_elems(s));
  r.dv.resize(n_elems(s));
  r.dlog_f.resize(in.log_f.size());
  softmax_attention_forward(r.o.data(), r.lse.data(), in.q.data(), in.k.data(), in.v.data(), log_f, args);
  softmax_attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), log_f ? r.dlog_f.data() : nullptr,
                             in.dout.data(), r.o.data(), r.lse.data(), in.q.data(), in.k.data(),
                             in.v.data(), log_f, args);
  return r;
}

Result<float> gpu_softmax(const AttnShape& s, const Inputs& in) {
  const SoftmaxAttentionArgs args{s, default_scale(s)};
  const auto q = test::to_device(cast<float>(in.q)), k = test::to_device(cast<float>(in.k));
  const auto v = test::to_device(cast<float>(in.v)), dout = test::to_device(cast<float>(in.dout));
  const auto log_f_buf = test::to_device(cast<float>(in.log_f));
  const float* log_f = in.log_f.empty() ? nullptr : log_f_buf.data();
  auto o = test::poisoned(n_elems(s)), lse = test::poisoned(n_scalars(s));
  auto dq = test::poisoned(n_elems(s)), dk = test::poisoned(n_elems(s)), dv = test::poisoned(n_elems(s));
  auto dlog_f = test::poisoned(in.log_f.size());
  cuda::softmax_attention_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), log_f, args);
  cuda::softmax_attention_backward(dq.data(), dk.data(), dv.data(), log_f ? dlog_f.data() : nullptr,
                                   dout.data(), o.data(), lse.data(), q.data(), k.data(), v.data(),
                                   log_f, args);
  return {test::to_host(o), test::to_host(lse), test::to_host(dq), test::to_host(dk),
          test::to_host(dv), test::to_host(dlog_f)};
}

void check_softmax(const AttnShape& s, Gate gate, double qk_std, uint64_t seed) {
  INFO(describe(s) << ", " << gate_name(gate) << ", q, k std " << qk_std);
  const Inputs in = make_inputs(s, seed, gate, qk_std);
  const auto want = cpu_softmax(s, in);
  const auto got = gpu_softmax(s, in);
  check_rel("o", got.o, want.o, kForwardTol);
  check_rel("lse", got.lse, want.lse, kForwardTol);
  check_rel("dq", got.dq, want.dq, kGradTol);
  check_rel("dk", got.dk, want.dk, kGradTol);
  check_rel("dv", got.dv, want.dv, kGradTol);
  if (gate != Gate::None) check_rel("dlog_f", got.dlog_f, want.dlog_f, kGradTol);
}

TEST_CASE("CUDA softmax attention matches the double reference", "[cuda][softmax]") {
  for (const AttnShape& s : shapes())
    for (const Gate gate : {Gate::None, Gate::Random, Gate::Strong}) check_softmax(s, gate, 1.0, 10);
}

TEST_CASE("CUDA softmax attention at the edges of 128-query forward tiles", "[cuda][softmax]") {
  // DP = 64 and 128 run the forward on 128 queries × 64 keys: whole, partial and one-row tiles
  for (const AttnShape& s : {AttnShape{2, 128, 2, 64}, AttnShape{1, 129, 2, 128}, AttnShape{2, 191, 1, 40},
                             AttnShape{1, 257, 2, 96}})
    for (const Gate gate : {Gate::None, Gate::Random, Gate::Strong}) check_softmax(s, gate, 1.0, 30);
}

TEST_CASE("CUDA softmax attention with larger logits", "[cuda][softmax]") {
  for (const AttnShape& s : {AttnShape{2, 100, 3, 64}, AttnShape{1, 1000, 2, 32}, AttnShape{2, 63, 3, 50}})
    for (const Gate gate : {Gate::None, Gate::Random}) check_softmax(s, gate, 3.0, 20);
}

// ---------------------------------------------------------------------------------------------
// Stick-breaking attention

Result<double> cpu_stick(const AttnShape& s, const Inputs& in, double bias) {
  const StickBreakingArgs args{s, default_scale(s), bias};
  Result<double> r;
  r.o.resize(n_elems(s));
  r.dq.resize(n_elems(s));
  r.dk.resize(n_elems(s));
  r.dv.resize(n_elems(s));
  stick_breaking_forward(r.o.data(), in.q.data(), in.k.data(), in.v.data(), args);
  stick_breaking_backward(r.dq.data(), r.dk.data(), r.dv.data(), in.dout.data(), in.q.data(),
                          in.k.data(), in.v.data(), args);
  return r;
}

Result<float> gpu_stick(const AttnShape& s, const Inputs& in, double bias) {
  const StickBreakingArgs args{s, default_scale(s), bias};
  const auto q = test::to_device(cast<float>(in.q)), k = test::to_device(cast<float>(in.k));
  const auto v = test::to_device(cast<float>(in.v)), dout = test::to_device(cast<float>(in.dout));
  auto o = test::poisoned(n_elems(s));
  auto dq = test::poisoned(n_elems(s)), dk = test::poisoned(n_elems(s)), dv = test::poisoned(n_elems(s));
  cuda::stick_breaking_forward(o.data(), q.data(), k.data(), v.data(), args);
  cuda::stick_breaking_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                                v.data(), args);
  return {test::to_host(o), {}, test::to_host(dq), test::to_host(dk), test::to_host(dv), {}};
}

void check_stick(const AttnShape& s, double qk_std, uint64_t seed, double bias = 0) {
  INFO(describe(s) << ", q, k std " << qk_std << ", bias " << bias);
  const Inputs in = make_inputs(s, seed, Gate::None, qk_std);
  const auto want = cpu_stick(s, in, bias);
  const auto got = gpu_stick(s, in, bias);
  check_rel("o", got.o, want.o, kForwardTol);
  check_rel("dq", got.dq, want.dq, kGradTol);
  check_rel("dk", got.dk, want.dk, kGradTol);
  check_rel("dv", got.dv, want.dv, kGradTol);
}

TEST_CASE("CUDA stick-breaking attention matches the double reference", "[cuda][sba]") {
  for (const AttnShape& s : shapes()) check_stick(s, 1.0, 30);
}

TEST_CASE("CUDA stick-breaking attention with larger logits", "[cuda][sba]") {
  for (const AttnShape& s : {AttnShape{2, 100, 3, 64}, AttnShape{1, 1000, 2, 32}, AttnShape{2, 63, 3, 50}})
    check_stick(s, 3.0, 40);
}

TEST_CASE("CUDA stick-breaking attention with a logit bias", "[cuda][sba]") {
  for (const AttnShape& s : {AttnShape{2, 100, 3, 64}, AttnShape{1, 1000, 2, 32}, AttnShape{2, 63, 3, 50}})
    for (double bias : {-5.0, 2.0}) check_stick(s, 1.0, 45, bias);
}

// ---------------------------------------------------------------------------------------------
// Determinism and allocations

template <class S>
bool bit_identical(const std::vector<S>& a, const std::vector<S>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(S)) == 0;
}

TEST_CASE("CUDA attention reruns are bit-identical and allocate nothing", "[cuda][softmax][sba]") {
  const AttnShape s{2, 300, 3, 64};
  const Inputs in = make_inputs(s, 50, Gate::Random);
  const SoftmaxAttentionArgs sm{s, default_scale(s)};
  const StickBreakingArgs sb{s, default_scale(s)};
  const auto q = test::to_device(cast<float>(in.q)), k = test::to_device(cast<float>(in.k));
  const auto v = test::to_device(cast<float>(in.v)), dout = test::to_device(cast<float>(in.dout));
  const auto log_f = test::to_device(cast<float>(in.log_f));
  auto o = test::poisoned(n_elems(s)), lse = test::poisoned(n_scalars(s));
  auto dq = test::poisoned(n_elems(s)), dk = test::poisoned(n_elems(s)), dv = test::poisoned(n_elems(s));
  auto dlog_f = test::poisoned(n_scalars(s));
  // Every output of both ops, copied to the host after one run of each.
  auto run = [&] {
    std::vector<std::vector<float>> out;
    cuda::softmax_attention_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), log_f.data(), sm);
    cuda::softmax_attention_backward(dq.data(), dk.data(), dv.data(), dlog_f.data(), dout.data(),
                                     o.data(), lse.data(), q.data(), k.data(), v.data(), log_f.data(), sm);
    for (const auto* b : {&o, &lse, &dq, &dk, &dv, &dlog_f}) out.push_back(test::to_host(*b));
    cuda::stick_breaking_forward(o.data(), q.data(), k.data(), v.data(), sb);
    cuda::stick_breaking_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(),
                                  v.data(), sb);
    for (const auto* b : {&o, &dq, &dk, &dv}) out.push_back(test::to_host(*b));
    return out;
  };
  const auto first = run();
  const uint64_t allocations = cuda::allocation_count();
  const auto second = run();
  CHECK(cuda::allocation_count() == allocations);
  const char* names[] = {"softmax o", "lse", "softmax dq", "softmax dk", "softmax dv", "dlog_f",
                         "stick-breaking o", "stick-breaking dq", "stick-breaking dk", "stick-breaking dv"};
  REQUIRE(first.size() == std::size(names));
  for (size_t i = 0; i < first.size(); ++i) {
    INFO(names[i]);
    CHECK(bit_identical(first[i], second[i]));
  }
}

}  // namespace
}  // namespace pb
