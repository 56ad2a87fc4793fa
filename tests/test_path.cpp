// PaTH attention (kernels/cpu/path_attention.cpp): the blockwise UT-transform kernel against a
// brute-force reference that forms the D×D products H_i ⋯ H_{j+1}, the β = 0 limit (softmax
// attention, FoX with the gate), gradients against central finite differences, float against
// double, block-size and thread-count invariance. A hidden [.bench] case times the flip-flop shape.
//
// Tolerances: double kernel against the references and block sizes against each other: relative
// RMS ≤ 1e-12; gradients: check_gradient rtol 1e-5 (double) with step 1e-5, not the default 1e-6:
// L = Σ dout ⊙ o sums ~10⁴ terms, and its rounding noise divided by 2·1e-6 reaches ~1e-7, the
// criterion's absolute floor (the truncation error at 1e-5 is ~1e-10); float vs double: relative
// RMS ≤ 1e-5 (o) and ≤ 1e-4 (gradients); thread counts: bit-exact.
#include <omp.h>

#include <Eigen/Dense>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "kernels/ops.h"
#include "tests/check.h"

using namespace pb;
using namespace pb::test;
using Vec = std::vector<double>;

namespace {

constexpr double kExact = 1e-12, kFdStep = 1e-5;

struct Problem {
  PathAttentionArgs args;
  bool gate;
  Vec q, k, v, w;     // (B, T, H, D); w rows unit-norm
  Vec beta, log_f;    // (B, T, H); log_f empty without a gate
};

// β ~ U(0, 2), with every 5th value 1e-6 and every 7th 2 − 1e-6; log_f = log sigmoid(N(2, 1)).
Problem make_problem(AttnShape sh, bool gate, uint64_t seed, int block = 16) {
  const size_t n = size_t(sh.B) * sh.T * sh.H * sh.D, m = size_t(sh.B) * sh.T * sh.H;
  Problem p{{sh, 1.0 / std::sqrt(double(sh.D)), block}, gate, randn(n, seed), randn(n, seed + 1),
            randn(n, seed + 2), unit_rows(randn(n, seed + 3), sh.D), randu(m, seed + 4, 0, 2), {}};
  for (size_t i = 0; i < m; ++i) {
    if (i % 5 == 1) p.beta[i] = 1e-6;
    if (i % 7 == 3) p.beta[i] = 2 - 1e-6;
  }
  if (gate) {
    p.log_f = randn(m, seed + 5);
    for (auto& f : p.log_f) f = -std::log1p(std::exp(-(f + 2)));
  }
  return p;
}

template <class S>
struct Outputs {
  std::vector<S> o, lse;  // (B, T, H, D), (B, T, H)
};

template <class S>
struct Grads {
  std::vector<S> dq, dk, dv, dw, dbeta, dlog_f;
};

template <class S>
Outputs<S> forward(const Problem& p) {
  const auto q = cast<S>(p.q), k = cast<S>(p.k), v = cast<S>(p.v), w = cast<S>(p.w);
  const auto beta = cast<S>(p.beta), log_f = cast<S>(p.log_f);
  Outputs<S> out{std::vector<S>(q.size()), std::vector<S>(beta.size())};
  path_attention_forward<S>(out.o.data(), out.lse.data(), q.data(), k.data(), v.data(), w.data(),
                            beta.data(), p.gate ? log_f.data() : nullptr, p.args);
  return out;
}

template <class S>
Grads<S> backward(const Problem& p, const Vec& dout_d) {
  const auto q = cast<S>(p.q), k = cast<S>(p.k), v = cast<S>(p.v), w = cast<S>(p.w);
  const auto beta = cast<S>(p.beta), log_f = cast<S>(p.log_f), dout = cast<S>(dout_d);
  const Outputs<S> f = forward<S>(p);
  Grads<S> g{std::vector<S>(q.size()), std::vector<S>(q.size()), std::vector<S>(q.size()),
             std::vector<S>(q.size()), std::vector<S>(beta.size()), std::vector<S>(log_f.size())};
  path_attention_backward<S>(g.dq.data(), g.dk.data(), g.dv.data(), g.dw.data(), g.dbeta.data(),
                             p.gate ? g.dlog_f.data() : nullptr, dout.data(), f.o.data(),
                             f.lse.data(), q.data(), k.data(), v.data(), w.data(), beta.data(),
                             p.gate ? log_f.data() : nullptr, p.args);
  return g;
}

// Softmax attention given every row's logits: row_logits(b, h, i) returns s_ij for j = 0..i.
template <class RowLogits>
Outputs<double> attend(const Problem& p, RowLogits row_logits) {
  const auto [B, T, H, D] = p.args.shape;
  Outputs<double> out{Vec(p.q.size()), Vec(p.beta.size())};
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < T; ++i) {
        const Vec s = row_logits(b, h, i);  // (i + 1)
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double x : s) sum += std::exp(x - mx);
        const size_t row = (size_t(b) * T + i) * H + h;
        out.lse[row] = mx + std::log(sum);
        for (int j = 0; j <= i; ++j)
          for (int d = 0; d < D; ++d)
            out.o[row * D + d] += std::exp(s[j] - out.lse[row]) * p.v[((size_t(b) * T + j) * H + h) * D + d];
      }
  return out;
}

// G_t = Σ_{u≤t} log_f_u of one (b, h); zero without a gate.
Vec prefix_gate(const Problem& p, int b, int h) {
  const auto [B, T, H, D] = p.args.shape;
  Vec g(T, 0.0);
  for (int t = 0; t < T && p.gate; ++t) g[t] = (t ? g[t - 1] : 0.0) + p.log_f[(size_t(b) * T + t) * H + h];
  return g;
}

Eigen::Map<const Eigen::VectorXd> row(const Vec& x, const Problem& p, int b, int t, int h) {
  const auto [B, T, H, D] = p.args.shape;
  return Eigen::Map<const Eigen::VectorXd>(x.data() + ((size_t(b) * T + t) * H + h) * D, D);
}

// The definition: s_ij = scale · q_iᵀ (H_i ⋯ H_{j+1}) k_j + G_i − G_j with the D×D product formed.
Outputs<double> brute_force(const Problem& p) {
  const int T = p.args.shape.T, H = p.args.shape.H, D = p.args.shape.D;
  return attend(p, [&](int b, int h, int i) {
    const Vec g = prefix_gate(p, b, h);
    Eigen::MatrixXd prod = Eigen::MatrixXd::Identity(D, D);  // (D, D): H_i ⋯ H_{j+1}
    Vec s(i + 1);
    for (int j = i; j >= 0; --j) {
      s[j] = p.args.scale * row(p.q, p, b, i, h).dot(prod * row(p.k, p, b, j, h)) + g[i] - g[j];
      const auto w = row(p.w, p, b, j, h);
      const Eigen::VectorXd pw = prod * w;  // (D)
      prod -= p.beta[(size_t(b) * T + j) * H + h] * pw * w.transpose();  // prod ← prod H_j = prod − β_j (prod w_j) w_jᵀ
    }
    return s;
  });
}

// Softmax attention with the FoX gate: s_ij = scale · q_i·k_j + G_i − G_j.
Outputs<double> softmax_reference(const Problem& p) {
  return attend(p, [&](int b, int h, int i) {
    const Vec g = prefix_gate(p, b, h);
    Vec s(i + 1);
    for (int j = 0; j <= i; ++j)
      s[j] = p.args.scale * row(p.q, p, b, i, h).dot(row(p.k, p, b, j, h)) + g[i] - g[j];
    return s;
  });
}

template <class A, class B>
void check_grads_close(const Grads<A>& got, const Grads<B>& want, double tol) {
  CHECK(rel_rms(got.dq, want.dq) <= tol);
  CHECK(rel_rms(got.dk, want.dk) <= tol);
  CHECK(rel_rms(got.dv, want.dv) <= tol);
  CHECK(rel_rms(got.dw, want.dw) <= tol);
  CHECK(rel_rms(got.dbeta, want.dbeta) <= tol);
  CHECK(rel_rms(got.dlog_f, want.dlog_f) <= tol);
}

}  // namespace

TEST_CASE("PaTH forward matches the brute-force definition for any block size", "[path]") {
  uint64_t seed = 100;
  for (int T : {1, 7, 63, 100})
    for (int D : {8, 50})
      for (int H : {1, 3})
        for (int B : {1, 2})
          for (bool gate : {false, true}) {
            Problem p = make_problem({B, T, H, D}, gate, seed += 10);
            const Outputs<double> want = brute_force(p);
            for (int block : {1, 2, 3, 4, 16, 64}) {
              p.args.block = block;
              const Outputs<double> got = forward<double>(p);
              INFO("B=" << B << " T=" << T << " H=" << H << " D=" << D << " gate=" << gate << " block=" << block);
              CHECK(rel_rms(got.o, want.o) <= kExact);
              CHECK(rel_rms(got.lse, want.lse) <= kExact);
            }
          }
}

TEST_CASE("PaTH with beta = 0 is softmax attention, with the gate FoX", "[path]") {
  for (bool gate : {false, true}) {
    Problem p = make_problem({2, 63, 3, 8}, gate, 7, 16);
    std::fill(p.beta.begin(), p.beta.end(), 0.0);
    const Outputs<double> got = forward<double>(p), want = softmax_reference(p);
    INFO("gate=" << gate);
    CHECK(rel_rms(got.o, want.o) <= kExact);
    CHECK(rel_rms(got.lse, want.lse) <= kExact);
  }
}

TEST_CASE("PaTH gradients match central finite differences", "[path]") {
  struct Case {
    AttnShape shape;
    int block;
    bool gate;
    size_t max_entries;
  };
  const Case cases[] = {
      {{1, 1, 1, 8}, 4, true, 200},    {{1, 1, 3, 50}, 16, false, 200},
      {{2, 7, 3, 8}, 4, true, 200},    {{1, 7, 1, 50}, 4, false, 200},
      {{1, 7, 3, 50}, 16, true, 200},  {{1, 63, 1, 8}, 4, true, 60},
      {{1, 63, 3, 8}, 16, false, 60},  {{1, 63, 3, 50}, 16, true, 40},
      {{2, 63, 1, 50}, 4, false, 40},
  };
  // Thousands of forwards on tiny shapes: one thread saves the fork/join per call, which dominates
  // on a loaded 2-core machine (results do not depend on the thread count: tested below).
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  uint64_t seed = 500;
  for (const Case& c : cases) {
    Problem p = make_problem(c.shape, c.gate, seed += 10, c.block);
    const Vec dout = randn(p.q.size(), seed + 7);
    const Grads<double> g = backward<double>(p, dout);
    const auto loss = [&] { return dot(forward<double>(p).o, dout); };  // L = Σ dout ⊙ o
    INFO("B=" << c.shape.B << " T=" << c.shape.T << " H=" << c.shape.H << " D=" << c.shape.D
              << " block=" << c.block << " gate=" << c.gate);
    check_gradient("q", p.q, g.dq, loss, 1e-5, c.max_entries, kFdStep);
    check_gradient("k", p.k, g.dk, loss, 1e-5, c.max_entries, kFdStep);
    check_gradient("v", p.v, g.dv, loss, 1e-5, c.max_entries, kFdStep);
    check_gradient("w", p.w, g.dw, loss, 1e-5, c.max_entries, kFdStep);
    check_gradient("beta", p.beta, g.dbeta, loss, 1e-5, c.max_entries, kFdStep);
    if (c.gate) check_gradient("log_f", p.log_f, g.dlog_f, loss, 1e-5, c.max_entries, kFdStep);
  }
  omp_set_num_threads(threads);
}

TEST_CASE("PaTH float agrees with double", "[path]") {
  for (int block : {16, 64}) {
    const Problem p = make_problem({2, 100, 2, 32}, true, 900, block);
    const Vec dout = randn(p.q.size(), 901);
    INFO("block=" << block);
    CHECK(rel_rms(forward<float>(p).o, forward<double>(p).o) <= 1e-5);
    check_grads_close(backward<float>(p, dout), backward<double>(p, dout), 1e-4);
  }
}

TEST_CASE("PaTH does not depend on the block size", "[path]") {
  Problem p = make_problem({2, 100, 2, 16}, true, 1000, 64);
  const Vec dout = randn(p.q.size(), 1001);
  const Outputs<double> want = forward<double>(p);
  const Grads<double> want_g = backward<double>(p, dout);
  for (int block : {1, 16}) {
    p.args.block = block;
    INFO("block=" << block);
    CHECK(rel_rms(forward<double>(p).o, want.o) <= kExact);
    check_grads_close(backward<double>(p, dout), want_g, kExact);
  }
}

TEST_CASE("PaTH does not depend on the thread count", "[path]") {
  const Problem p = make_problem({2, 40, 3, 16}, true, 1100, 16);
  const Vec dout = randn(p.q.size(), 1101);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Outputs<float> one = forward<float>(p);
  const Grads<float> one_g = backward<float>(p, dout);
  omp_set_num_threads(std::max(2, threads));
  const Outputs<float> many = forward<float>(p);
  const Grads<float> many_g = backward<float>(p, dout);
  omp_set_num_threads(threads);
  CHECK(one.o == many.o);
  CHECK(one.lse == many.lse);
  CHECK((one_g.dq == many_g.dq && one_g.dk == many_g.dk && one_g.dv == many_g.dv));
  CHECK((one_g.dw == many_g.dw && one_g.dbeta == many_g.dbeta && one_g.dlog_f == many_g.dlog_f));
}

// Flip-flop shape, float: prints the median forward and forward+backward times (no pass/fail).
TEST_CASE("PaTH timing at the flip-flop shape", "[path][.bench]") {
  const AttnShape sh{4, 512, 2, 64};
  const Problem p = make_problem(sh, false, 1200, 64);
  const auto q = cast<float>(p.q), k = cast<float>(p.k), v = cast<float>(p.v), w = cast<float>(p.w);
  const auto beta = cast<float>(p.beta), dout = cast<float>(randn(p.q.size(), 1201));
  std::vector<float> o(q.size()), lse(beta.size()), dq(q.size()), dk(q.size()), dv(q.size()),
      dw(q.size()), dbeta(beta.size());
  using Clock = std::chrono::steady_clock;
  std::vector<double> fwd_ms, total_ms;
  for (int it = 0; it < 21; ++it) {
    const auto t0 = Clock::now();
    path_attention_forward<float>(o.data(), lse.data(), q.data(), k.data(), v.data(), w.data(),
                                  beta.data(), nullptr, p.args);
    const auto t1 = Clock::now();
    path_attention_backward<float>(dq.data(), dk.data(), dv.data(), dw.data(), dbeta.data(), nullptr,
                                   dout.data(), o.data(), lse.data(), q.data(), k.data(), v.data(),
                                   w.data(), beta.data(), nullptr, p.args);
    const auto t2 = Clock::now();
    fwd_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    total_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t0).count());
  }
  std::sort(fwd_ms.begin(), fwd_ms.end());
  std::sort(total_ms.begin(), total_ms.end());
  fmt::print(stderr, "path_attention float B=4 T=512 H=2 D=64 block=64, {} threads: forward {:.2f} ms, "
             "forward+backward {:.2f} ms (median of 21)\n", omp_get_max_threads(), fwd_ms[10], total_ms[10]);
  CHECK(std::isfinite(dq[0]));
}
