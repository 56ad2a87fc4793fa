// The bf16 flash attention (kernels/cuda/flash_attention_bf16.cu) against the CPU reference run in
// double on the same inputs: q, k, v and dout are rounded to bf16 on the host (log_f to float)
// before both see them, and both backwards get the GPU's o (bf16) and lse, so only the kernel's
// own rounding is measured. (δ = dout·o from the bf16 o is the contract, not the kernel's error:
// with a strong gate P is near the identity, dS = P (dP − δ) cancels, and the double reference
// itself moves dq, dk by ~2e-2 relative RMS when given the bf16-rounded o.) Device outputs start
// as NaN, so an element a kernel forgot to write fails. Shapes: T ∈ {1, 17, 64, 100, 257, 1000}
// (one row, partial tiles, one whole 64-row tile, several) × D ∈ {32, 64, 128}, without a gate,
// with one, with a strong one.
//
// Tolerances, relative RMS (bf16 results, so not tests/README.md's float ones): one bf16 rounding
// (8 significant bits) has a relative RMS error of about 1.6e-3. o: P rounded before P V and o
// stored in bf16, ≈ 2e-3 → 2.7e-3. lse: fp32 throughout, 1e-3 (the vector's RMS, so lse near 0
// is no problem). dq, dk, dv: P or dS rounded once, the result stored in bf16, ≈ 2.4e-3 → 4e-3.
// dlog_f: sums of the fp32 dS → 6.8e-3.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/attention_bf16.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "kernels/ops.h"
#include "tests/check.h"
#include "tests/cuda_check.h"

namespace pb {
namespace {

using bf16 = cuda::bf16_bits;

constexpr double kOutTol = 2.7e-3, kLseTol = 1e-3, kGradTol = 4e-3, kGateTol = 6.8e-3;

// float → bf16, round to nearest even (finite x), and back.
bf16 to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16(u >> 16);
}
float from_bf16(bf16 b) {
  const uint32_t u = uint32_t(b) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// x rounded to bf16 in place; returns the bits.
std::vector<bf16> round_bf16(std::vector<double>& x) {
  std::vector<bf16> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    bits[i] = to_bf16(float(x[i]));
    x[i] = from_bf16(bits[i]);
  }
  return bits;
}
std::vector<float> widen(const std::vector<bf16>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = from_bf16(x[i]);
  return y;
}

// A device buffer of n bf16 NaNs.
cuda::DeviceBuffer<bf16> poisoned_bf16(size_t n) {
  return test::to_device(std::vector<bf16>(n, 0x7fc0));
}

// No gate, log_f = log σ(z) with z ~ N(0, 1), or strongly negative log_f ≈ −5 (z ~ N(−5, 1)).
enum class Gate { None, Random, Strong };
const char* gate_name(Gate g) {
  return g == Gate::None ? "no gate" : g == Gate::Random ? "gate" : "strong gate";
}

void check_rel(const std::string& what, const std::vector<float>& got, const std::vector<double>& want,
               double tol) {
  const double err = test::rel_rms(got, want);
  INFO(what << ": relative RMS " << err << " (tolerance " << tol << ")");
  CHECK(err <= tol);
}

void check_flash(const AttnShape& s, Gate gate, uint64_t seed) {
  INFO(fmt::format("B={} T={} H={} D={}, {}", s.B, s.T, s.H, s.D, gate_name(gate)));
  const size_t n = size_t(s.B) * s.T * s.H * s.D, ns = size_t(s.B) * s.T * s.H;
  const SoftmaxAttentionArgs args{s, 1.0 / std::sqrt(double(s.D))};
  std::vector<double> q = test::randn(n, seed), k = test::randn(n, seed + 1),
                      v = test::randn(n, seed + 2), dout = test::randn(n, seed + 3), log_f;
  const auto q_bits = round_bf16(q), k_bits = round_bf16(k), v_bits = round_bf16(v);
  const auto dout_bits = round_bf16(dout);
  if (gate != Gate::None) {
    log_f = test::randn(ns, seed + 4);
    for (double& x : log_f) {
      if (gate == Gate::Strong) x -= 5;
      x = double(float(std::min(x, 0.0) - std::log1p(std::exp(-std::abs(x)))));  // log σ(x), in float
    }
  }

  // the GPU
  const auto gq = test::to_device(q_bits), gk = test::to_device(k_bits), gv = test::to_device(v_bits);
  const auto gdout = test::to_device(dout_bits);
  const auto glog_f_buf = test::to_device(test::cast<float>(log_f));
  const float* glog_f = log_f.empty() ? nullptr : glog_f_buf.data();
  auto go = poisoned_bf16(n), gdq = poisoned_bf16(n), gdk = poisoned_bf16(n), gdv = poisoned_bf16(n);
  auto glse = test::poisoned(ns), gdlog_f = test::poisoned(log_f.size());
  cuda::flash_attention_bf16_forward(go.data(), glse.data(), gq.data(), gk.data(), gv.data(), glog_f,
                                     args);
  cuda::flash_attention_bf16_backward(gdq.data(), gdk.data(), gdv.data(),
                                      glog_f ? gdlog_f.data() : nullptr, gdout.data(), go.data(),
                                      glse.data(), gq.data(), gk.data(), gv.data(), glog_f, args);

  const std::vector<float> got_o = widen(test::to_host(go)), got_lse = test::to_host(glse);

  // the reference, in double; its backward from the GPU's o and lse
  const double* lf = log_f.empty() ? nullptr : log_f.data();
  std::vector<double> o(n), lse(ns), dq(n), dk(n), dv(n), dlog_f(log_f.size());
  softmax_attention_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), lf, args);
  const std::vector<double> gpu_o(got_o.begin(), got_o.end()), gpu_lse(got_lse.begin(), got_lse.end());
  softmax_attention_backward(dq.data(), dk.data(), dv.data(), lf ? dlog_f.data() : nullptr, dout.data(),
                             gpu_o.data(), gpu_lse.data(), q.data(), k.data(), v.data(), lf, args);

  check_rel("o", got_o, o, kOutTol);
  check_rel("lse", got_lse, lse, kLseTol);
  check_rel("dq", widen(test::to_host(gdq)), dq, kGradTol);
  check_rel("dk", widen(test::to_host(gdk)), dk, kGradTol);
  check_rel("dv", widen(test::to_host(gdv)), dv, kGradTol);
  if (lf) check_rel("dlog_f", test::to_host(gdlog_f), dlog_f, kGateTol);
}

TEST_CASE("bf16 flash attention matches the double reference on bf16 inputs", "[cuda][flash]") {
  for (const int T : {1, 17, 64, 100, 257, 1000})
    for (const int D : {32, 64, 128})
      for (const Gate gate : {Gate::None, Gate::Random, Gate::Strong})
        check_flash(T < 1000 ? AttnShape{2, T, 3, D} : AttnShape{1, T, 2, D}, gate, 40);
}

TEST_CASE("bf16 flash attention rejects head dims other than 32, 64, 128", "[cuda][flash]") {
  const AttnShape s{1, 4, 1, 48};
  const SoftmaxAttentionArgs args{s, 1.0};
  const size_t n = size_t(s.T) * s.D;
  auto x = poisoned_bf16(n), y = poisoned_bf16(n);
  auto lse = test::poisoned(s.T);
  CHECK_THROWS_AS(cuda::flash_attention_bf16_forward(y.data(), lse.data(), x.data(), x.data(), x.data(),
                                                     nullptr, args),
                  Error);
  CHECK_THROWS_WITH(cuda::flash_attention_bf16_backward(y.data(), y.data(), y.data(), nullptr,
                                                        x.data(), x.data(), lse.data(), x.data(),
                                                        x.data(), x.data(), nullptr, args),
                    Catch::Matchers::Contains("head dim 48"));
}

}  // namespace
}  // namespace pb
