// GPU tests of PaTH attention (kernels/cuda/path_*.cu, path_launch.cu): the CUDA float forward and backward
// against the CPU reference (kernels/cpu/path_attention.cpp) in double on the same inputs, and
// β = 0 against the CPU softmax attention reference in double. Outputs are NaN-poisoned first, so
// an element the kernels forget fails. The backward gets the GPU's own o and lse, as in training.
//
// Tolerances (tests/README.md): relative RMS ≤ 1e-5 for o and lse, ≤ 1e-4 for every gradient.
// Inputs: w rows unit-norm, β ~ U(0, 2) or near its ends (U(0, 0.01), U(1.99, 2)),
// log_f = log σ(z) with z ~ N(2, 1).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/ops.h"
#include "kernels/ops.h"
#include "tests/check.h"
#include "tests/cuda_check.h"

using namespace pb;
using namespace pb::test;
using Vec = std::vector<double>;

namespace {

constexpr double kForwardTol = 1e-5, kGradTol = 1e-4;

enum class BetaRange { Uniform, NearZero, NearTwo, Zero };

struct Problem {
  PathAttentionArgs args;
  bool gate;
  Vec q, k, v, w;   // (B, T, H, D); w rows unit-norm
  Vec beta, log_f;  // (B, T, H); log_f empty without a gate
  Vec dout;         // (B, T, H, D)
};

Problem make_problem(AttnShape sh, bool gate, BetaRange range, uint64_t seed) {
  const size_t n = size_t(sh.B) * sh.T * sh.H * sh.D, m = size_t(sh.B) * sh.T * sh.H;
  const double lo = range == BetaRange::NearTwo ? 1.99 : 0.0;
  const double hi = range == BetaRange::Uniform ? 2.0 : range == BetaRange::NearZero ? 0.01 : 2.0;
  Problem p{{sh, 1.0 / std::sqrt(double(sh.D)), 64}, gate, randn(n, seed), randn(n, seed + 1),
            randn(n, seed + 2), unit_rows(randn(n, seed + 3), sh.D), randu(m, seed + 4, lo, hi),
            {}, randn(n, seed + 6)};
  if (range == BetaRange::Zero) std::fill(p.beta.begin(), p.beta.end(), 0.0);
  if (gate) {
    p.log_f = randn(m, seed + 5);
    for (auto& f : p.log_f) f = -std::log1p(std::exp(-(f + 2)));  // log σ(z), z ~ N(2, 1)
  }
  return p;
}

template <class S>
struct Result {
  std::vector<S> o, lse;                           // (B, T, H, D), (B, T, H)
  std::vector<S> dq, dk, dv, dw, dbeta, dlog_f;    // dlog_f empty without a gate
};

// The CPU reference in double: forward, then backward from its own o and lse.
Result<double> cpu_reference(const Problem& p) {
  const size_t n = p.q.size(), m = p.beta.size();
  const double* lf = p.gate ? p.log_f.data() : nullptr;
  Result<double> r{Vec(n), Vec(m), Vec(n), Vec(n), Vec(n), Vec(n), Vec(m), Vec(p.gate ? m : 0)};
  path_attention_forward<double>(r.o.data(), r.lse.data(), p.q.data(), p.k.data(), p.v.data(),
                                 p.w.data(), p.beta.data(), lf, p.args);
  path_attention_backward<double>(r.dq.data(), r.dk.data(), r.dv.data(), r.dw.data(),
                                  r.dbeta.data(), p.gate ? r.dlog_f.data() : nullptr,
                                  p.dout.data(), r.o.data(), r.lse.data(), p.q.data(), p.k.data(),
                                  p.v.data(), p.w.data(), p.beta.data(), lf, p.args);
  return r;
}

// The CUDA kernels in float on the cast inputs.
Result<float> gpu_run(const Problem& p) {
  const size_t n = p.q.size(), m = p.beta.size();
  auto q = to_device(cast<float>(p.q)), k = to_device(cast<float>(p.k));
  auto v = to_device(cast<float>(p.v)), w = to_device(cast<float>(p.w));
  auto beta = to_device(cast<float>(p.beta)), dout = to_device(cast<float>(p.dout));
  cuda::DeviceBuffer<float> log_f, dlog_f;
  if (p.gate) {
    log_f = to_device(cast<float>(p.log_f));
    dlog_f = poisoned(m);
  }
  auto o = poisoned(n), lse = poisoned(m);
  auto dq = poisoned(n), dk = poisoned(n), dv = poisoned(n), dw = poisoned(n), dbeta = poisoned(m);
  cuda::path_attention_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), w.data(),
                               beta.data(), p.gate ? log_f.data() : nullptr, p.args);
  cuda::path_attention_backward(dq.data(), dk.data(), dv.data(), dw.data(), dbeta.data(),
                                p.gate ? dlog_f.data() : nullptr, dout.data(), o.data(),
                                lse.data(), q.data(), k.data(), v.data(), w.data(), beta.data(),
                                p.gate ? log_f.data() : nullptr, p.args);
  Result<float> r{to_host(o), to_host(lse), to_host(dq), to_host(dk), to_host(dv), to_host(dw),
                  to_host(dbeta), {}};
  if (p.gate) r.dlog_f = to_host(dlog_f);
  return r;
}

void check_rms(const std::string& what, const std::vector<float>& got, const Vec& want, double tol) {
  const double err = rel_rms(got, want);
  INFO(what << ": relative RMS " << err << " (tolerance " << tol << ")");
  CHECK(err <= tol);  // NaN (an unwritten element) fails too
}

void check_against_cpu(const Problem& p) {
  const Result<double> want = cpu_reference(p);
  const Result<float> got = gpu_run(p);
  check_rms("o", got.o, want.o, kForwardTol);
  check_rms("lse", got.lse, want.lse, kForwardTol);
  check_rms("dq", got.dq, want.dq, kGradTol);
  check_rms("dk", got.dk, want.dk, kGradTol);
  check_rms("dv", got.dv, want.dv, kGradTol);
  check_rms("dw", got.dw, want.dw, kGradTol);
  check_rms("dbeta", got.dbeta, want.dbeta, kGradTol);
  if (p.gate) check_rms("dlog_f", got.dlog_f, want.dlog_f, kGradTol);
}

}  // namespace

TEST_CASE("CUDA PaTH matches the CPU reference over shapes, head dims and the gate", "[cuda]") {
  uint64_t seed = 3000;
  for (int T : {1, 7, 63, 100})
    for (int D : {8, 32, 50, 64, 128})
      for (bool gate : {false, true}) {
        const Problem p = make_problem({2, T, 3, D}, gate, BetaRange::Uniform, seed += 10);
        INFO("B=2 T=" << T << " H=3 D=" << D << " gate=" << gate);
        check_against_cpu(p);
      }
}

TEST_CASE("CUDA PaTH matches the CPU reference with beta near 0 and near 2", "[cuda]") {
  uint64_t seed = 4000;
  for (BetaRange range : {BetaRange::NearZero, BetaRange::NearTwo})
    for (int D : {8, 50, 64, 128})
      for (bool gate : {false, true}) {
        const Problem p = make_problem({2, 100, 3, D}, gate, range, seed += 10);
        INFO("T=100 D=" << D << " gate=" << gate << " beta " << (range == BetaRange::NearZero ? "near 0" : "near 2"));
        check_against_cpu(p);
      }
}

TEST_CASE("CUDA PaTH matches the CPU reference on long sequences", "[cuda]") {
  uint64_t seed = 5000;
  for (int D : {32, 64, 128})
    for (bool gate : {false, true}) {
      const Problem p = make_problem({1, 1000, 2, D}, gate, BetaRange::Uniform, seed += 10);
      INFO("B=1 T=1000 H=2 D=" << D << " gate=" << gate);
      check_against_cpu(p);
    }
}

TEST_CASE("CUDA PaTH matches the CPU reference with more work items than resident CTAs", "[cuda]") {
  // The backward scan is persistent (one CTA per resident slot, items strided by the grid):
  // B·H·n_blocks = 224 (D = 64) and B·H·⌈n_blocks / 2⌉ = 224 (D = 128, two query blocks per
  // item; n_blocks = 13 is odd, so block 0 is an item of its own) exceed the ~132 slots of an H200.
  uint64_t seed = 5500;
  for (int D : {64, 128}) {
    const Problem p = make_problem({4, 400, 8, D}, true, BetaRange::Uniform, seed += 10);
    INFO("B=4 T=400 H=8 D=" << D << " gate=1");
    check_against_cpu(p);
  }
}

TEST_CASE("CUDA PaTH with beta = 0 is softmax attention (FoX with the gate)", "[cuda]") {
  uint64_t seed = 6000;
  for (int D : {8, 64, 128})
    for (bool gate : {false, true}) {
      const Problem p = make_problem({2, 100, 3, D}, gate, BetaRange::Zero, seed += 10);
      INFO("T=100 D=" << D << " gate=" << gate);
      const size_t n = p.q.size(), m = p.beta.size();
      const SoftmaxAttentionArgs sa{p.args.shape, p.args.scale};
      const double* lf = p.gate ? p.log_f.data() : nullptr;
      Result<double> want{Vec(n), Vec(m), Vec(n), Vec(n), Vec(n), {}, {}, Vec(p.gate ? m : 0)};
      softmax_attention_forward<double>(want.o.data(), want.lse.data(), p.q.data(), p.k.data(),
                                        p.v.data(), lf, sa);
      softmax_attention_backward<double>(want.dq.data(), want.dk.data(), want.dv.data(),
                                         p.gate ? want.dlog_f.data() : nullptr, p.dout.data(),
                                         want.o.data(), want.lse.data(), p.q.data(), p.k.data(),
                                         p.v.data(), lf, sa);
      const Result<float> got = gpu_run(p);
      check_rms("o", got.o, want.o, kForwardTol);
      check_rms("lse", got.lse, want.lse, kForwardTol);
      check_rms("dq", got.dq, want.dq, kGradTol);
      check_rms("dk", got.dk, want.dk, kGradTol);
      check_rms("dv", got.dv, want.dv, kGradTol);
      if (p.gate) check_rms("dlog_f", got.dlog_f, want.dlog_f, kGradTol);
      // With β = 0 every term of dw carries a factor β or diag(β) W: it is exactly zero.
      check_rms("dw (absolute)", got.dw, Vec(n, 0.0), 0.0);
    }
}
