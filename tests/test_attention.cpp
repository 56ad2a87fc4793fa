// RoPE, softmax attention (with the FoX gate and the bias table) and stick-breaking attention on the
// CPU: naive double references written here with plain loops, central finite differences,
// invariants, float against double, extreme inputs and thread-count independence.
// Tolerances: forward against the naive references 1e-12 (double); finite differences rtol 1e-5
// (check_gradient's criterion, all entries for T ≤ 7, 300 spread-out entries for T = 63); float
// against double rel RMS 1e-5 (forward) and 1e-4 (gradients).
#include <omp.h>

#include <algorithm>
#include <ctime>
#include <complex>

#include "kernels/ops.h"
#include "tests/check.h"

namespace pb {
namespace {

using test::cast;
using test::check_gradient;
using test::dot;
using test::rel_rms;
using test::require_close;

// Odd shapes covering T ∈ {1, 7, 63}, D ∈ {8, 50}, H ∈ {1, 3}, B ∈ {1, 2}.
const std::vector<AttnShape> kGradShapes = {
    {1, 1, 1, 8}, {2, 7, 3, 8}, {1, 7, 3, 50}, {2, 63, 1, 50}, {1, 63, 3, 8}};

std::string describe(const AttnShape& s) {
  return fmt::format("B={} T={} H={} D={}", s.B, s.T, s.H, s.D);
}
size_t n_elems(const AttnShape& s) { return size_t(s.B) * s.T * s.H * s.D; }
size_t n_scalars(const AttnShape& s) { return size_t(s.B) * s.T * s.H; }
// Index of (b, t, h) in a (B, T, H) tensor; of (b, t, h, d) in a (B, T, H, D) tensor.
size_t at(const AttnShape& s, int b, int t, int h) { return (size_t(b) * s.T + t) * s.H + h; }
size_t at(const AttnShape& s, int b, int t, int h, int d) { return at(s, b, t, h) * s.D + d; }
double default_scale(const AttnShape& s) { return 1.0 / std::sqrt(double(s.D)); }

// Sets the number of OpenMP threads for its scope. Finite differences run on one thread: they make
// thousands of tiny calls, where thread wake-ups and barriers would dominate on a busy machine.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

// Entries checked by finite differences: all for T ≤ 7, a spread-out subset for longer sequences.
size_t fd_entries(const AttnShape& s, size_t n) { return s.T <= 7 ? n : 300; }

struct Inputs {
  std::vector<double> q, k, v, dout;  // (B, T, H, D)
  std::vector<double> log_f;          // (B, T, H), empty without a gate
  std::vector<double> bias;           // (H, T), empty without a bias table
};

Inputs make_inputs(const AttnShape& s, uint64_t seed, bool gate) {
  const size_t n = n_elems(s);
  Inputs in{test::randn(n, seed), test::randn(n, seed + 1), test::randn(n, seed + 2),
            test::randn(n, seed + 3), {}, {}};
  if (gate) in.log_f = test::randu(n_scalars(s), seed + 4, -1.0, 0.0);
  return in;
}

// ---------------------------------------------------------------------------------------------
// Calls into the kernels, in precision S.

template <class S>
std::vector<S> run_rope(const AttnShape& s, const std::vector<double>& x, bool backward) {
  const std::vector<S> in = cast<S>(x);
  std::vector<S> out(in.size());  // (B, T, H, D)
  const RopeArgs args{s};
  if (backward) {
    rope_backward(out.data(), in.data(), args);
  } else {
    rope_forward(out.data(), in.data(), args);
  }
  return out;
}

template <class S>
struct SoftmaxResult {
  std::vector<S> o, lse, dq, dk, dv, dlog_f, dbias;
};

template <class S>
SoftmaxResult<S> run_softmax(const AttnShape& s, const Inputs& in, bool backward) {
  const SoftmaxAttentionArgs args{s, default_scale(s)};
  const auto q = cast<S>(in.q), k = cast<S>(in.k), v = cast<S>(in.v), log_f = cast<S>(in.log_f);
  const auto table = cast<S>(in.bias);
  const S* gate = log_f.empty() ? nullptr : log_f.data();
  const S* bias = table.empty() ? nullptr : table.data();
  SoftmaxResult<S> r;
  r.o.resize(n_elems(s));
  r.lse.resize(n_scalars(s));
  softmax_attention_forward(r.o.data(), r.lse.data(), q.data(), k.data(), v.data(), gate, args, bias);
  if (!backward) return r;
  const auto dout = cast<S>(in.dout);
  r.dq.resize(n_elems(s));
  r.dk.resize(n_elems(s));
  r.dv.resize(n_elems(s));
  r.dlog_f.resize(log_f.size());
  r.dbias.resize(table.size());
  softmax_attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), gate ? r.dlog_f.data() : nullptr,
                             dout.data(), r.o.data(), r.lse.data(), q.data(), k.data(), v.data(),
                             gate, args, bias ? r.dbias.data() : nullptr, bias);
  return r;
}

template <class S>
struct StickResult {
  std::vector<S> o, dq, dk, dv;
};

template <class S>
StickResult<S> run_stick(const AttnShape& s, const Inputs& in, bool backward, double bias = 0) {
  const StickBreakingArgs args{s, default_scale(s), bias};
  const auto q = cast<S>(in.q), k = cast<S>(in.k), v = cast<S>(in.v);
  StickResult<S> r;
  r.o.resize(n_elems(s));
  stick_breaking_forward(r.o.data(), q.data(), k.data(), v.data(), args);
  if (!backward) return r;
  const auto dout = cast<S>(in.dout);
  r.dq.resize(n_elems(s));
  r.dk.resize(n_elems(s));
  r.dv.resize(n_elems(s));
  stick_breaking_backward(r.dq.data(), r.dk.data(), r.dv.data(), dout.data(), q.data(), k.data(),
                          v.data(), args);
  return r;
}

// ---------------------------------------------------------------------------------------------
// Naive references: plain loops in double.

double dot_qk(const AttnShape& s, const Inputs& in, int b, int h, int i, int j) {
  double acc = 0;
  for (int d = 0; d < s.D; ++d) acc += in.q[at(s, b, i, h, d)] * in.k[at(s, b, j, h, d)];
  return acc;
}

// rope(x) pair m at position t: (x_m + i·x_{m+D/2}) · e^{i·t·base^(−2m/D)}.
std::vector<double> naive_rope(const AttnShape& s, const std::vector<double>& x, double base) {
  std::vector<double> out(x.size());
  const int half = s.D / 2;
  for (int b = 0; b < s.B; ++b)
    for (int t = 0; t < s.T; ++t)
      for (int h = 0; h < s.H; ++h)
        for (int m = 0; m < half; ++m) {
          const std::complex<double> z(x[at(s, b, t, h, m)], x[at(s, b, t, h, m + half)]);
          const auto r = z * std::polar(1.0, t * std::pow(base, -2.0 * m / s.D));
          out[at(s, b, t, h, m)] = r.real();
          out[at(s, b, t, h, m + half)] = r.imag();
        }
  return out;
}

using Bias = std::function<double(int b, int h, int i, int j)>;

struct NaiveSoftmax {
  std::vector<double> o, lse;
};

// o_i = Σ_{j≤i} softmax_j(scale·q_i·k_j + bias(b, h, i, j)) v_j.
NaiveSoftmax naive_softmax(const AttnShape& s, const Inputs& in, const Bias& bias) {
  NaiveSoftmax r{std::vector<double>(n_elems(s)), std::vector<double>(n_scalars(s))};
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.H; ++h)
      for (int i = 0; i < s.T; ++i) {
        std::vector<double> logit(i + 1);
        for (int j = 0; j <= i; ++j) logit[j] = default_scale(s) * dot_qk(s, in, b, h, i, j) + bias(b, h, i, j);
        const double mx = *std::max_element(logit.begin(), logit.end());
        double sum = 0;
        for (double l : logit) sum += std::exp(l - mx);
        r.lse[at(s, b, i, h)] = mx + std::log(sum);
        for (int j = 0; j <= i; ++j)
          for (int d = 0; d < s.D; ++d)
            r.o[at(s, b, i, h, d)] += std::exp(logit[j] - mx) / sum * in.v[at(s, b, j, h, d)];
      }
  return r;
}

// FoX bias D_ij = Σ_{u=j+1}^{i} log_f_u, by its definition.
Bias fox_bias(const AttnShape& s, const std::vector<double>& log_f) {
  return [&s, &log_f](int b, int h, int i, int j) {
    double acc = 0;
    for (int u = j + 1; u <= i; ++u) acc += log_f[at(s, b, u, h)];
    return acc;
  };
}

// The bias table's b_h(i − j), set to random values in `in`.
Bias table_bias(const AttnShape& s, Inputs& in, uint64_t seed) {
  in.bias = test::randn(size_t(s.H) * s.T, seed);
  return [&s, &in](int, int h, int i, int j) { return in.bias[size_t(h) * s.T + (i - j)]; };
}

// A_ij = σ(z_ij) ∏_{j<l<i} (1 − σ(z_il)),  o_i = Σ_{j<i} A_ij v_j + (1 − Σ_{j<i} A_ij) v_i,
// z_ij = scale·q_i·k_j + bias.
std::vector<double> naive_stick(const AttnShape& s, const Inputs& in, double bias = 0) {
  std::vector<double> o(n_elems(s));
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.H; ++h)
      for (int i = 0; i < s.T; ++i) {
        std::vector<double> sig(i);
        for (int l = 0; l < i; ++l)
          sig[l] = 1 / (1 + std::exp(-(default_scale(s) * dot_qk(s, in, b, h, i, l) + bias)));
        double rem = 1;
        for (int j = 0; j < i; ++j) {
          double a = sig[j];
          for (int l = j + 1; l < i; ++l) a *= 1 - sig[l];
          rem -= a;
          for (int d = 0; d < s.D; ++d) o[at(s, b, i, h, d)] += a * in.v[at(s, b, j, h, d)];
        }
        for (int d = 0; d < s.D; ++d) o[at(s, b, i, h, d)] += rem * in.v[at(s, b, i, h, d)];
      }
  return o;
}

// ---------------------------------------------------------------------------------------------
// RoPE

TEST_CASE("rope matches the complex rotation and its backward inverts it in place", "[rope]") {
  for (const AttnShape& s : kGradShapes) {
    INFO(describe(s));
    const auto x = test::randn(n_elems(s), 1);
    const RopeArgs args{s, 500000.0};
    std::vector<double> y = x;  // (B, T, H, D), rotated in place
    rope_forward(y.data(), y.data(), args);
    require_close("rope", y, naive_rope(s, x, args.base), 1e-12, 1e-12);
    rope_backward(y.data(), y.data(), args);
    require_close("rope backward of rope", y, x, 1e-12, 1e-12);
  }
}

TEST_CASE("rope gradients match finite differences", "[rope]") {
  const ThreadCount one_thread(1);
  for (const AttnShape& s : kGradShapes) {
    INFO(describe(s));
    auto x = test::randn(n_elems(s), 2);
    const auto dout = test::randn(n_elems(s), 3);
    const auto dx = run_rope<double>(s, dout, true);
    check_gradient("x", x, dx, [&] { return dot(run_rope<double>(s, x, false), dout); }, 1e-5,
                   fd_entries(s, x.size()));
  }
}

TEST_CASE("rope scores depend only on i - j and rope keeps norms", "[rope]") {
  const AttnShape s{1, 40, 2, 50};
  // q_t = q_0 and k_t = k_0 at every position, so rope(q)_i·rope(k)_j is a function of (i, j)
  const auto q0 = test::randn(s.H * s.D, 4), k0 = test::randn(s.H * s.D, 5);
  std::vector<double> q(n_elems(s)), k(n_elems(s));  // (B, T, H, D)
  for (int t = 0; t < s.T; ++t)
    for (int c = 0; c < s.H * s.D; ++c) {
      q[size_t(t) * s.H * s.D + c] = q0[c];
      k[size_t(t) * s.H * s.D + c] = k0[c];
    }
  const auto rq = run_rope<double>(s, q, false), rk = run_rope<double>(s, k, false);
  auto score = [&](int h, int i, int j) {
    double acc = 0;
    for (int d = 0; d < s.D; ++d) acc += rq[at(s, 0, i, h, d)] * rk[at(s, 0, j, h, d)];
    return acc;
  };
  std::vector<double> shifted, unshifted;
  for (int h = 0; h < s.H; ++h)
    for (int i = 0; i < s.T; ++i)
      for (int j = 0; j < s.T; ++j)
        for (int shift = 1; std::max(i, j) + shift < s.T; shift += 7) {
          shifted.push_back(score(h, i + shift, j + shift));
          unshifted.push_back(score(h, i, j));
        }
  require_close("shifted scores", shifted, unshifted, 1e-12, 1e-11);

  auto norms = [&](const std::vector<double>& x) {
    std::vector<double> n(n_scalars(s));  // (B, T, H)
    for (size_t r = 0; r < n.size(); ++r)
      for (int d = 0; d < s.D; ++d) n[r] += x[r * s.D + d] * x[r * s.D + d];
    return n;
  };
  const auto x = test::randn(n_elems(s), 6);
  require_close("norms", norms(run_rope<double>(s, x, false)), norms(x), 1e-13, 0);
}

// ---------------------------------------------------------------------------------------------
// Softmax attention and the FoX gate

// Kernel against the naive reference with the given bias, on every shape of kGradShapes.
void check_softmax_forward(const std::string& what, bool gate,
                           const std::function<Bias(const AttnShape&, Inputs&)>& make_bias) {
  for (const AttnShape& s : kGradShapes) {
    INFO(what << ", " << describe(s));
    Inputs in = make_inputs(s, 10, gate);
    const Bias bias = make_bias(s, in);
    const auto got = run_softmax<double>(s, in, false);
    const auto want = naive_softmax(s, in, bias);
    require_close("o", got.o, want.o, 1e-12, 1e-12);
    require_close("lse", got.lse, want.lse, 1e-12, 1e-12);
  }
}

TEST_CASE("softmax attention matches the naive reference", "[softmax]") {
  check_softmax_forward("no gate", false, [](const AttnShape&, Inputs&) -> Bias {
    return [](int, int, int, int) { return 0.0; };
  });
  check_softmax_forward("FoX gate", true, [](const AttnShape& s, Inputs& in) {
    return fox_bias(s, in.log_f);
  });
  check_softmax_forward("constant log_f = -m is ALiBi", true, [](const AttnShape&, Inputs& in) -> Bias {
    const double m = 0.375;
    std::fill(in.log_f.begin(), in.log_f.end(), -m);
    return [m](int, int, int i, int j) { return -m * (i - j); };
  });
  check_softmax_forward("bias table", false,
                        [](const AttnShape& s, Inputs& in) { return table_bias(s, in, 11); });
  check_softmax_forward("FoX gate and bias table", true, [](const AttnShape& s, Inputs& in) -> Bias {
    const Bias fox = fox_bias(s, in.log_f), table = table_bias(s, in, 12);
    return [fox, table](int b, int h, int i, int j) { return fox(b, h, i, j) + table(b, h, i, j); };
  });
}

TEST_CASE("FoX gate with log_f = 0 equals no gate", "[softmax]") {
  const AttnShape s{2, 33, 3, 16};
  Inputs gated = make_inputs(s, 40, true);
  std::fill(gated.log_f.begin(), gated.log_f.end(), 0.0);
  Inputs plain = gated;
  plain.log_f.clear();
  const auto a = run_softmax<double>(s, gated, true), b = run_softmax<double>(s, plain, true);
  require_close("o", a.o, b.o, 0, 0);
  require_close("lse", a.lse, b.lse, 0, 0);
  require_close("dq", a.dq, b.dq, 0, 0);
  require_close("dk", a.dk, b.dk, 0, 0);
  require_close("dv", a.dv, b.dv, 0, 0);
}

TEST_CASE("softmax attention gradients match finite differences", "[softmax]") {
  const ThreadCount one_thread(1);
  for (const AttnShape& s : kGradShapes) {
    for (const int hooks : {0, 1, 2, 3}) {  // bit 0: gate, bit 1: bias table
      const bool gate = hooks & 1, bias = hooks & 2;
      INFO(describe(s) << (gate ? " with gate" : " no gate") << (bias ? ", bias table" : ""));
      Inputs in = make_inputs(s, 50, gate);
      if (bias) table_bias(s, in, 51);
      const auto g = run_softmax<double>(s, in, true);
      auto loss = [&] { return dot(run_softmax<double>(s, in, false).o, in.dout); };
      const size_t n = fd_entries(s, in.q.size());
      check_gradient("q", in.q, g.dq, loss, 1e-5, n);
      check_gradient("k", in.k, g.dk, loss, 1e-5, n);
      check_gradient("v", in.v, g.dv, loss, 1e-5, n);
      if (gate) check_gradient("log_f", in.log_f, g.dlog_f, loss, 1e-5, fd_entries(s, in.log_f.size()));
      // a table entry's gradient sums a whole diagonal of small terms: against the rounding of the
      // loss (~1e-13 at T = 63) a larger step and the 4-point stencil
      if (bias) check_gradient("bias", in.bias, g.dbias, loss, 1e-5, in.bias.size(), 1e-4, true);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Stick-breaking attention

TEST_CASE("stick-breaking matches the product formula", "[sba]") {
  const double bias = GENERATE(0.0, -3.0, 2.0);
  for (const AttnShape& s : kGradShapes) {
    INFO(describe(s) << ", bias " << bias);
    const Inputs in = make_inputs(s, 60, false);
    require_close("o", run_stick<double>(s, in, false, bias).o, naive_stick(s, in, bias), 1e-12, 1e-12);
  }
}

// The bias moves the prior: at q = 0 every z is the bias, so A_i,i−d = σ(b)(1 − σ(b))^(d−1).
TEST_CASE("stick-breaking's bias sets the weights at zero logits", "[sba]") {
  const AttnShape s{1, 9, 1, 9};
  Inputs in = make_inputs(s, 65, false);
  std::fill(in.q.begin(), in.q.end(), 0.0);
  std::fill(in.v.begin(), in.v.end(), 0.0);
  for (int t = 0; t < s.T; ++t) in.v[at(s, 0, t, 0, t)] = 1;  // o_i holds row i's weights
  for (double bias : {0.0, -5.0}) {
    INFO("bias " << bias);
    const auto o = run_stick<double>(s, in, false, bias).o;
    const double sig = 1 / (1 + std::exp(-bias));
    const int i = s.T - 1;  // the last row: every key before it
    std::vector<double> want(s.D), got(s.D);
    for (int j = 0; j < i; ++j) want[j] = sig * std::pow(1 - sig, i - j - 1);
    want[i] = std::pow(1 - sig, i);  // the leftover
    for (int j = 0; j < s.D; ++j) got[j] = o[at(s, 0, i, 0, j)];
    require_close("row T − 1", got, want, 1e-14, 1e-14);
  }
}

// q, k entries ±c with scale·D·c² = `max_logit`: logits are multiples of max_logit·2/D up to ±max_logit.
Inputs extreme_inputs(const AttnShape& s, double max_logit, uint64_t seed, bool gate) {
  Inputs in = make_inputs(s, seed, gate);
  const double c = std::sqrt(max_logit / (default_scale(s) * s.D));
  for (auto* x : {&in.q, &in.k})
    for (double& e : *x) e = e < 0 ? -c : c;
  for (double& f : in.log_f) f *= 50;
  return in;
}

TEST_CASE("stick-breaking weights with the leftover sum to one", "[sba]") {
  // D = T and v_t = e_t, so o_i holds the weights of row i: A_ij at j < i, the leftover at j = i.
  const AttnShape s{2, 24, 3, 24};
  const bool extreme = GENERATE(false, true);
  INFO((extreme ? "logits up to ±100" : "random logits"));
  Inputs in = extreme ? extreme_inputs(s, 100.0, 70, false) : make_inputs(s, 70, false);
  std::fill(in.v.begin(), in.v.end(), 0.0);
  for (int b = 0; b < s.B; ++b)
    for (int t = 0; t < s.T; ++t)
      for (int h = 0; h < s.H; ++h) in.v[at(s, b, t, h, t)] = 1;
  const auto o = run_stick<double>(s, in, false).o;
  std::vector<double> row_sums(n_scalars(s)), min_weight(n_scalars(s)), above_diagonal(n_scalars(s));
  for (size_t r = 0; r < row_sums.size(); ++r) {
    const int i = int(r / s.H) % s.T;
    for (int j = 0; j < s.D; ++j) {
      const double w = o[r * s.D + j];
      if (j > i) above_diagonal[r] += std::abs(w);
      row_sums[r] += w;
      min_weight[r] = std::min(min_weight[r], w);
    }
  }
  require_close("row sums", row_sums, std::vector<double>(row_sums.size(), 1.0), 0, 1e-12);
  require_close("negative weights", min_weight, std::vector<double>(row_sums.size(), 0.0), 0, 0);
  require_close("weights above the diagonal", above_diagonal, std::vector<double>(row_sums.size(), 0.0), 0, 0);
}

TEST_CASE("stick-breaking gradients match finite differences", "[sba]") {
  const ThreadCount one_thread(1);
  const double bias = GENERATE(0.0, -3.0);
  for (const AttnShape& s : kGradShapes) {
    INFO(describe(s) << ", bias " << bias);
    Inputs in = make_inputs(s, 80, false);
    const auto g = run_stick<double>(s, in, true, bias);
    auto loss = [&] { return dot(run_stick<double>(s, in, false, bias).o, in.dout); };
    const size_t n = fd_entries(s, in.q.size());
    check_gradient("q", in.q, g.dq, loss, 1e-5, n);
    check_gradient("k", in.k, g.dk, loss, 1e-5, n);
    check_gradient("v", in.v, g.dv, loss, 1e-5, n);
  }
}

// ---------------------------------------------------------------------------------------------
// All three: float against double, extreme inputs, thread-count independence

TEST_CASE("float agrees with double", "[rope][softmax][sba]") {
  const AttnShape s{2, 100, 2, 32};
  const Inputs in = make_inputs(s, 90, true);
  SECTION("rope") {
    CHECK(rel_rms(run_rope<float>(s, in.q, false), run_rope<double>(s, in.q, false)) < 1e-5);
    CHECK(rel_rms(run_rope<float>(s, in.q, true), run_rope<double>(s, in.q, true)) < 1e-4);
  }
  SECTION("softmax with gate") {
    const auto f = run_softmax<float>(s, in, true);
    const auto d = run_softmax<double>(s, in, true);
    CHECK(rel_rms(f.o, d.o) < 1e-5);
    CHECK(rel_rms(f.lse, d.lse) < 1e-5);
    CHECK(rel_rms(f.dq, d.dq) < 1e-4);
    CHECK(rel_rms(f.dk, d.dk) < 1e-4);
    CHECK(rel_rms(f.dv, d.dv) < 1e-4);
    CHECK(rel_rms(f.dlog_f, d.dlog_f) < 1e-4);
  }
  SECTION("stick-breaking") {
    const auto f = run_stick<float>(s, in, true);
    const auto d = run_stick<double>(s, in, true);
    CHECK(rel_rms(f.o, d.o) < 1e-5);
    CHECK(rel_rms(f.dq, d.dq) < 1e-4);
    CHECK(rel_rms(f.dk, d.dk) < 1e-4);
    CHECK(rel_rms(f.dv, d.dv) < 1e-4);
  }
}

template <class S>
void require_finite(const std::string& what, const std::vector<S>& x) {
  const auto bad = std::count_if(x.begin(), x.end(), [](S e) { return !std::isfinite(e); });
  INFO(what << ": " << bad << " non-finite of " << x.size());
  CHECK(bad == 0);
}

template <class S>
void check_extreme_inputs() {
  const AttnShape s{2, 63, 3, 8};
  for (const double max_logit : {80.0, 100.0, 1000.0}) {
    INFO("max |logit| " << max_logit);
    const Inputs in = extreme_inputs(s, max_logit, 100, true);
    const auto sm = run_softmax<S>(s, in, true);
    for (const auto* x : {&sm.o, &sm.lse, &sm.dq, &sm.dk, &sm.dv, &sm.dlog_f}) require_finite("softmax", *x);
    const auto sb = run_stick<S>(s, in, true);
    for (const auto* x : {&sb.o, &sb.dq, &sb.dk, &sb.dv}) require_finite("stick-breaking", *x);
  }
}

TEST_CASE("extreme logits and gates give finite results", "[softmax][sba]") {
  check_extreme_inputs<float>();
  check_extreme_inputs<double>();
}

TEST_CASE("results do not depend on the thread count", "[softmax][sba]") {
  const AttnShape s{2, 40, 3, 16};
  const Inputs in = make_inputs(s, 110, true);
  SoftmaxResult<float> sm1, smn;
  StickResult<float> sb1, sbn;
  {
    const ThreadCount one_thread(1);
    sm1 = run_softmax<float>(s, in, true);
    sb1 = run_stick<float>(s, in, true);
  }
  {
    const ThreadCount three_threads(3);
    smn = run_softmax<float>(s, in, true);
    sbn = run_stick<float>(s, in, true);
  }
  require_close("softmax o", smn.o, sm1.o, 0, 0);
  require_close("softmax dq", smn.dq, sm1.dq, 0, 0);
  require_close("softmax dk", smn.dk, sm1.dk, 0, 0);
  require_close("softmax dv", smn.dv, sm1.dv, 0, 0);
  require_close("softmax dlog_f", smn.dlog_f, sm1.dlog_f, 0, 0);
  require_close("stick-breaking o", sbn.o, sb1.o, 0, 0);
  require_close("stick-breaking dq", sbn.dq, sb1.dq, 0, 0);
  require_close("stick-breaking dk", sbn.dk, sb1.dk, 0, 0);
  require_close("stick-breaking dv", sbn.dv, sb1.dv, 0, 0);
}

// ---------------------------------------------------------------------------------------------
// Timings (not pass/fail): ./test_attention "[.bench]"

// Milliseconds since `start` on `clock`.
double ms_since(clockid_t clock, const timespec& start) {
  timespec now;
  clock_gettime(clock, &now);
  return (now.tv_sec - start.tv_sec) * 1e3 + (now.tv_nsec - start.tv_nsec) * 1e-6;
}

// Best wall and process CPU time of `f` in milliseconds over 21 runs, after one warm-up run, and
// the median wall time. On a busy machine the best times estimate a quiet one.
std::string timing(const std::function<void()>& f) {
  f();
  std::vector<double> wall(21), cpu(21);
  for (size_t r = 0; r < wall.size(); ++r) {
    timespec wall_start, cpu_start;
    clock_gettime(CLOCK_MONOTONIC, &wall_start);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu_start);
    f();
    cpu[r] = ms_since(CLOCK_PROCESS_CPUTIME_ID, cpu_start);
    wall[r] = ms_since(CLOCK_MONOTONIC, wall_start);
  }
  std::sort(wall.begin(), wall.end());
  return fmt::format("wall {:6.2f} ms (median {:6.2f}), cpu {:6.2f} ms", wall.front(),
                     wall[wall.size() / 2], *std::min_element(cpu.begin(), cpu.end()));
}

TEST_CASE("attention timings, flip-flop config", "[.bench]") {
  const AttnShape s{4, 512, 2, 64};
  const Inputs in = make_inputs(s, 120, true);
  const auto q = cast<float>(in.q), k = cast<float>(in.k), v = cast<float>(in.v);
  const auto dout = cast<float>(in.dout), log_f = cast<float>(in.log_f);
  std::vector<float> o(n_elems(s)), dq(n_elems(s)), dk(n_elems(s)), dv(n_elems(s));  // (B, T, H, D)
  std::vector<float> lse(n_scalars(s)), dlog_f(n_scalars(s));                         // (B, T, H)
  const SoftmaxAttentionArgs sm{s, default_scale(s)};
  const StickBreakingArgs sb{s, default_scale(s)};
  fmt::print("{}, float, {} OpenMP threads, best of 21 runs:\n", describe(s), omp_get_max_threads());
  for (const float* gate : {static_cast<const float*>(nullptr), log_f.data()}) {
    const std::string name = gate ? "softmax attention + FoX" : "softmax attention";
    fmt::print("  {:24} forward  {}\n", name, timing([&] {
      softmax_attention_forward(o.data(), lse.data(), q.data(), k.data(), v.data(), gate, sm);
    }));
    fmt::print("  {:24} backward {}\n", name, timing([&] {
      softmax_attention_backward(dq.data(), dk.data(), dv.data(), gate ? dlog_f.data() : nullptr,
                                 dout.data(), o.data(), lse.data(), q.data(), k.data(), v.data(),
                                 gate, sm);
    }));
  }
  fmt::print("  {:24} forward  {}\n", "stick-breaking", timing([&] {
    stick_breaking_forward(o.data(), q.data(), k.data(), v.data(), sb);
  }));
  fmt::print("  {:24} backward {}\n", "stick-breaking", timing([&] {
    stick_breaking_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), sb);
  }));
  fmt::print("  {:24} forward  {}\n", "rope", timing([&] { rope_forward(o.data(), q.data(), RopeArgs{s}); }));
}

}  // namespace
}  // namespace pb
