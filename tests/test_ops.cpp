// The dense ops of kernels/ops.h on the CPU: gradients against central finite differences,
// GradMode semantics, AdamW against a scalar PyTorch-formula reference, float against double,
// matmul against a naive triple loop, and independence from the thread count.
//
// Tolerances: gradients rtol 1e-5 (check_gradient, double); float vs double forward: relative RMS
// ≤ 1e-5 and elementwise 1e-5·(|want| + RMS(want)); double against a naive reference 1e-12 relative;
// Overwrite-vs-Accumulate of elementwise ops and any thread count: bit-exact.
#include <omp.h>

#include <array>
#include <limits>

#include "kernels/ops.h"
#include "tests/check.h"

using namespace pb;
using namespace pb::test;
using Vec = std::vector<double>;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kRmsEps = 1e-5, kL2Eps = 1e-3;

double rms(const Vec& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return x.empty() ? 0 : std::sqrt(s / double(x.size()));
}

// Forward of each op at precision S from double inputs (outputs concatenated where several).
template <class S>
std::vector<S> matmul_fwd(const Vec& x, const Vec& w, int N, int K, int M) {
  const auto xs = cast<S>(x), ws = cast<S>(w);
  std::vector<S> y(size_t(N) * M);  // (N, M)
  matmul_forward(y.data(), xs.data(), ws.data(), N, K, M);
  return y;
}
template <class S>
std::vector<S> rmsnorm_fwd(const Vec& x, const Vec& g, int N, int C) {
  const auto xs = cast<S>(x), gs = cast<S>(g);
  std::vector<S> y(size_t(N) * C + N);  // (N, C) then rstd (N)
  rmsnorm_forward(y.data(), y.data() + size_t(N) * C, xs.data(), gs.data(), N, C, kRmsEps);
  return y;
}
template <class S>
std::vector<S> swiglu_fwd(const Vec& ab, int N, int F) {
  const auto abs = cast<S>(ab);
  std::vector<S> h(size_t(N) * F);  // (N, F)
  swiglu_forward(h.data(), abs.data(), N, F);
  return h;
}
template <class S>
std::vector<S> embedding_fwd(const std::vector<int32_t>& tokens, const Vec& table, int C) {
  const auto ts = cast<S>(table);
  std::vector<S> x(tokens.size() * C);  // (N, C)
  embedding_forward(x.data(), tokens.data(), ts.data(), int(tokens.size()), C);
  return x;
}
template <class S>
std::vector<S> cross_entropy_fwd(const Vec& logits, const std::vector<int32_t>& targets, int V,
                                 std::vector<int32_t>* argmax = nullptr) {
  const auto ls = cast<S>(logits);
  const int N = int(targets.size());
  std::vector<S> loss(N);  // (N)
  if (argmax) argmax->assign(N, -7);
  cross_entropy_forward(loss.data(), argmax ? argmax->data() : nullptr, ls.data(), targets.data(),
                        N, V);
  return loss;
}
template <class S>
std::vector<S> short_conv_fwd(const Vec& u, const Vec& a, int B, int T, int C) {
  const auto us = cast<S>(u), as = cast<S>(a);
  std::vector<S> y(size_t(B) * T * C);  // (B, T, C)
  short_conv_forward(y.data(), us.data(), as.data(), B, T, C);
  return y;
}
template <class S>
std::vector<S> l2norm_fwd(const Vec& x, int n_rows, int D) {
  const auto xs = cast<S>(x);
  std::vector<S> y(size_t(n_rows) * D);  // (n_rows, D)
  l2norm_forward(y.data(), xs.data(), n_rows, D, kL2Eps);
  return y;
}
// `steps` AdamW updates from zero moments with the gradients grads[s]; returns the params.
template <class S>
std::vector<S> adamw_run(const Vec& p0, const std::vector<Vec>& grads, const uint8_t* mask,
                         AdamWArgs args) {
  auto p = cast<S>(p0);
  std::vector<S> m(p.size(), S(0)), v(p.size(), S(0));
  for (size_t s = 0; s < grads.size(); ++s) {
    const auto g = cast<S>(grads[s]);
    args.step = int64_t(s) + 1;
    adamw_update(p.data(), m.data(), v.data(), g.data(), mask, int64_t(p.size()), args, (const S*)nullptr);
  }
  return p;
}

// float against double forward (see the tolerance policy at the top).
template <class F>
void check_float_vs_double(const std::string& what, const std::vector<F>& f, const Vec& d) {
  INFO(what);
  CHECK(rel_rms(f, d) <= 1e-5);
  require_close(what + " float vs double", f, d, 1e-5, 1e-5 * rms(d));
}

template <class T>
void require_equal(const std::string& what, const std::vector<T>& a, const std::vector<T>& b) {
  require_close(what, a, b, 0.0, 0.0);
}

Vec plus(const Vec& a, const Vec& b) {
  Vec c(a.size());
  for (size_t i = 0; i < a.size(); ++i) c[i] = a[i] + b[i];
  return c;
}

const std::array<std::array<int, 3>, 3> kMatmulShapes = {{{1, 8, 3}, {7, 50, 8}, {63, 3, 50}}};
const std::array<std::array<int, 2>, 4> kRowShapes = {{{1, 8}, {7, 50}, {63, 3}, {63, 50}}};

}  // namespace

TEST_CASE("matmul gradients match finite differences", "[ops]") {
  for (auto [N, K, M] : kMatmulShapes) {
    Vec x = randn(N * K, 1), w = randn(K * M, 2);
    const Vec dy = randn(N * M, 3);
    Vec dx(N * K, kNaN), dw(K * M, 0.0);
    matmul_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), N, K, M,
                    GradMode::Overwrite);
    auto loss = [&] { return dot(matmul_fwd<double>(x, w, N, K, M), dy); };
    const auto shape = fmt::format(" N={} K={} M={}", N, K, M);
    check_gradient("matmul x" + shape, x, dx, loss);
    check_gradient("matmul w" + shape, w, dw, loss);
  }
}

TEST_CASE("rmsnorm gradients match finite differences", "[ops]") {
  for (auto [N, C] : kRowShapes) {
    Vec x = randn(N * C, 4), g = randu(C, 5, 0.5, 1.5);
    const Vec dy = randn(N * C, 6);
    const Vec y = rmsnorm_fwd<double>(x, g, N, C);
    Vec dx(N * C, kNaN), dg(C, 0.0);
    rmsnorm_backward(dx.data(), dg.data(), dy.data(), x.data(), y.data() + N * C, g.data(), N, C,
                     GradMode::Overwrite);
    auto loss = [&] {
      const Vec out = rmsnorm_fwd<double>(x, g, N, C);
      return dot(std::vector<double>(out.begin(), out.begin() + N * C), dy);
    };
    const auto shape = fmt::format(" N={} C={}", N, C);
    check_gradient("rmsnorm x" + shape, x, dx, loss);
    check_gradient("rmsnorm g" + shape, g, dg, loss);
  }
}

TEST_CASE("swiglu gradients match finite differences", "[ops]") {
  for (auto [N, F] : kRowShapes) {
    Vec ab = randn(N * 2 * F, 7, 2.0);
    const Vec dh = randn(N * F, 8);
    Vec dab(N * 2 * F, kNaN);
    swiglu_backward(dab.data(), dh.data(), ab.data(), N, F);
    check_gradient(fmt::format("swiglu ab N={} F={}", N, F), ab, dab,
                   [&] { return dot(swiglu_fwd<double>(ab, N, F), dh); });
  }
}

TEST_CASE("embedding gradients match finite differences", "[ops]") {
  constexpr int V = 11;
  for (auto [N, C] : kRowShapes) {
    const auto tokens = random_tokens(N, V, 9);
    Vec table = randn(V * C, 10);
    const Vec dx = randn(N * C, 11);
    Vec dtable(V * C, 0.0);
    embedding_backward(dtable.data(), dx.data(), tokens.data(), N, C);
    check_gradient(fmt::format("embedding table N={} C={}", N, C), table, dtable,
                   [&] { return dot(embedding_fwd<double>(tokens, table, C), dx); });
  }
}

TEST_CASE("cross_entropy: loss, argmax and gradients, with ignored rows", "[ops]") {
  constexpr double kScale = 0.37;
  for (auto [N, V] : kRowShapes) {
    Vec logits = randn(N * V, 12, 3.0);
    auto targets = random_tokens(N, V, 13);
    for (int n = 1; n < N; n += 3) targets[n] = -1;
    std::vector<int32_t> argmax;
    const Vec loss = cross_entropy_fwd<double>(logits, targets, V, &argmax);
    for (int n = 0; n < N; ++n) {
      const double* l = logits.data() + n * V;
      const int arg = int(std::max_element(l, l + V) - l);
      double lse = 0;
      for (int i = 0; i < V; ++i) lse += std::exp(l[i]);
      const double want = targets[n] < 0 ? 0.0 : std::log(lse) - l[targets[n]];
      CHECK(argmax[n] == arg);
      CHECK(loss[n] == Approx(want).epsilon(1e-12).margin(1e-14));
    }
    Vec dlogits(N * V, kNaN);
    const double scale = kScale;
    cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), N, V, &scale);
    for (int n = 1; n < N; n += 3)
      for (int i = 0; i < V; ++i) CHECK(dlogits[n * V + i] == 0.0);
    check_gradient(fmt::format("cross_entropy logits N={} V={}", N, V), logits, dlogits, [&] {
      const Vec l = cross_entropy_fwd<double>(logits, targets, V);
      return kScale * dot(l, Vec(l.size(), 1.0));
    });
  }
}

TEST_CASE("cross_entropy: stable for huge logits, argmax takes the lowest index on ties", "[ops]") {
  const Vec logits = {1000, 1002, 1002, -5, 0, 0, 0, 0};  // (2, 4)
  const std::vector<int32_t> targets = {0, -1};
  std::vector<int32_t> argmax;
  const Vec loss = cross_entropy_fwd<double>(logits, targets, 4, &argmax);
  CHECK(argmax == std::vector<int32_t>{1, 0});
  CHECK(loss[0] == Approx(2 + std::log(2 + std::exp(-2.0) + std::exp(-1007.0))));
  CHECK(loss[1] == 0.0);
  std::vector<float> dlogits(8);
  const auto lf = cast<float>(logits);
  const float one = 1.0f;
  cross_entropy_backward(dlogits.data(), lf.data(), targets.data(), 2, 4, &one);
  for (float d : dlogits) CHECK(std::isfinite(d));
}

TEST_CASE("short_conv gradients match finite differences (T below and above the width)", "[ops]") {
  for (auto [B, T, C] : std::array<std::array<int, 3>, 4>{{{2, 1, 8}, {3, 2, 50}, {2, 7, 3}, {1, 63, 8}}}) {
    Vec u = randn(B * T * C, 14), a = randn(kShortConvWidth * C, 15, 0.7);
    const Vec dy = randn(B * T * C, 16);
    Vec du(B * T * C, kNaN), da(kShortConvWidth * C, 0.0);
    short_conv_backward(du.data(), da.data(), dy.data(), u.data(), a.data(), B, T, C);
    auto loss = [&] { return dot(short_conv_fwd<double>(u, a, B, T, C), dy); };
    const auto shape = fmt::format(" B={} T={} C={}", B, T, C);
    check_gradient("short_conv u" + shape, u, du, loss);
    check_gradient("short_conv a" + shape, a, da, loss);
  }
}

TEST_CASE("short_conv is causal with zero left-padding", "[ops]") {
  const int B = 1, T = 4, C = 1;
  const Vec u = {1, 2, 3, 4}, a = {0.5, -0.25, 0.125};
  const Vec y = short_conv_fwd<double>(u, a, B, T, C);
  auto silu = [](double z) { return z / (1 + std::exp(-z)); };
  const Vec want = {silu(0.5), silu(1 - 0.25), silu(1.5 - 0.5 + 0.125),
                    silu(2 - 0.75 + 0.25)};
  require_close("short_conv y", y, want, 1e-14, 0.0);
}

TEST_CASE("l2norm gradients match finite differences", "[ops]") {
  for (auto [N, D] : kRowShapes) {
    Vec x = randn(N * D, 17, 0.3);
    const Vec dy = randn(N * D, 18);
    Vec dx(N * D, kNaN);
    l2norm_backward(dx.data(), dy.data(), x.data(), N, D, kL2Eps);
    check_gradient(fmt::format("l2norm x N={} D={}", N, D), x, dx,
                   [&] { return dot(l2norm_fwd<double>(x, N, D), dy); });
  }
}

TEST_CASE("GradMode: Accumulate adds onto the buffer, Overwrite ignores it", "[ops]") {
  const int N = 7, K = 50, M = 3, C = 50;
  const Vec x = randn(N * K, 19), w = randn(K * M, 20), dy = randn(N * M, 21);
  const Vec prior_x = randn(N * K, 22), prior_w = randn(K * M, 23), prior_y = randn(N * M, 24);
  SECTION("matmul") {
    Vec y0(N * M, kNaN), y1 = prior_y;
    matmul_forward(y0.data(), x.data(), w.data(), N, K, M, GradMode::Overwrite);
    matmul_forward(y1.data(), x.data(), w.data(), N, K, M, GradMode::Accumulate);
    require_close("matmul y +=", y1, plus(prior_y, y0), 1e-13, 1e-13);
    Vec dx0(N * K, kNaN), dw0(K * M, 0.0), dx1 = prior_x, dw1 = prior_w;
    matmul_backward(dx0.data(), dw0.data(), dy.data(), x.data(), w.data(), N, K, M,
                    GradMode::Overwrite);
    matmul_backward(dx1.data(), dw1.data(), dy.data(), x.data(), w.data(), N, K, M,
                    GradMode::Accumulate);
    require_close("matmul dx +=", dx1, plus(prior_x, dx0), 1e-13, 1e-13);
    require_close("matmul dw +=", dw1, plus(prior_w, dw0), 1e-13, 1e-13);
    Vec dw2 = prior_w;
    matmul_backward<double>(nullptr, dw2.data(), dy.data(), x.data(), w.data(), N, K, M,
                            GradMode::Overwrite);
    require_close("matmul dw += without dx", dw2, dw1, 1e-13, 1e-13);
  }
  SECTION("rmsnorm") {
    const Vec xr = randn(N * C, 25), g = randu(C, 26, 0.5, 1.5), dyr = randn(N * C, 27);
    const Vec prior_dx = randn(N * C, 28), prior_dg = randn(C, 29);
    const Vec y = rmsnorm_fwd<double>(xr, g, N, C);
    const double* rstd = y.data() + N * C;
    Vec dx0(N * C, kNaN), dg0(C, 0.0), dx1 = prior_dx, dg1 = prior_dg;
    rmsnorm_backward(dx0.data(), dg0.data(), dyr.data(), xr.data(), rstd, g.data(), N, C,
                     GradMode::Overwrite);
    rmsnorm_backward(dx1.data(), dg1.data(), dyr.data(), xr.data(), rstd, g.data(), N, C,
                     GradMode::Accumulate);
    require_equal("rmsnorm dx +=", dx1, plus(prior_dx, dx0));
    require_close("rmsnorm dg +=", dg1, plus(prior_dg, dg0), 1e-13, 1e-13);
  }
  SECTION("parameter gradients of embedding and short_conv accumulate") {
    const int V = 5, T = 7;
    const auto tokens = random_tokens(N, V, 30);
    const Vec dx = randn(N * C, 31), prior = randn(V * C, 32);
    Vec dt0(V * C, 0.0), dt1 = prior;
    embedding_backward(dt0.data(), dx.data(), tokens.data(), N, C);
    embedding_backward(dt1.data(), dx.data(), tokens.data(), N, C);
    require_close("embedding dtable +=", dt1, plus(prior, dt0), 1e-13, 1e-13);
    const Vec u = randn(T * C, 33), a = randn(3 * C, 34), dyc = randn(T * C, 35),
              prior_a = randn(3 * C, 36);
    Vec du(T * C), da0(3 * C, 0.0), da1 = prior_a;
    short_conv_backward(du.data(), da0.data(), dyc.data(), u.data(), a.data(), 1, T, C);
    short_conv_backward(du.data(), da1.data(), dyc.data(), u.data(), a.data(), 1, T, C);
    require_close("short_conv da +=", da1, plus(prior_a, da0), 1e-13, 1e-13);
  }
}

TEST_CASE("adamw matches the PyTorch formula step by step", "[ops]") {
  const int n = 37, steps = 5;
  const Vec p0 = randn(n, 37);
  std::vector<Vec> grads;
  for (int s = 0; s < steps; ++s) grads.push_back(randn(n, 38 + s, 0.1 * (s + 1)));
  std::vector<uint8_t> mask(n);
  for (int i = 0; i < n; ++i) mask[i] = uint8_t(i % 3 != 0);
  const AdamWArgs args{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  for (const uint8_t* m : {static_cast<const uint8_t*>(nullptr), static_cast<const uint8_t*>(mask.data())}) {
    // torch.optim.AdamW: p *= 1 − lr·wd; m, v update; p −= lr/bc1 · m / (sqrt(v)/sqrt(bc2) + eps)
    Vec p = p0, mom(n, 0.0), var(n, 0.0);
    for (int s = 0; s < steps; ++s) {
      const double bc1 = 1 - std::pow(args.beta1, s + 1), bc2 = 1 - std::pow(args.beta2, s + 1);
      for (int i = 0; i < n; ++i) {
        const double g = grads[s][i];
        if (!m || m[i]) p[i] *= 1 - args.lr * args.weight_decay;
        mom[i] = args.beta1 * mom[i] + (1 - args.beta1) * g;
        var[i] = args.beta2 * var[i] + (1 - args.beta2) * g * g;
        p[i] -= args.lr / bc1 * mom[i] / (std::sqrt(var[i]) / std::sqrt(bc2) + args.eps);
      }
    }
    const std::string what = m ? "adamw with mask" : "adamw without mask";
    require_close(what, adamw_run<double>(p0, grads, m, args), p, 1e-12, 1e-15);
    check_float_vs_double(what, adamw_run<float>(p0, grads, m, args), p);
  }
}

TEST_CASE("adamw clips the gradient to norm `clip` (sum_squares gives the squared norm)", "[ops]") {
  const int n = 1000;
  const Vec p0 = randn(n, 60), g = randn(n, 61, 0.5);
  double norm_sq = 0;
  sum_squares(&norm_sq, g.data(), n);
  CHECK(norm_sq == Approx(dot(g, g)).epsilon(1e-13));
  const double norm = std::sqrt(norm_sq);
  for (const double clip : {norm / 4, norm * 2}) {  // active, inactive
    AdamWArgs args{.lr = 1e-2, .weight_decay = 0.1};
    args.clip = clip;
    Vec scaled = g;
    for (double& x : scaled) x *= std::min(1.0, clip / norm);  // the clipped gradient
    const Vec want = adamw_run<double>(p0, {scaled}, nullptr, AdamWArgs{.lr = 1e-2, .weight_decay = 0.1});
    Vec p = p0, m(n, 0.0), v(n, 0.0);
    adamw_update(p.data(), m.data(), v.data(), g.data(), nullptr, n, args, &norm_sq);
    require_close(fmt::format("adamw clip {}", clip), p, want, 1e-12, 1e-15);
  }
}

TEST_CASE("loss_mean: mean over rows with a target, scale 1/count", "[ops]") {
  const Vec loss = {1, 2, 3, 4, 5};
  const std::vector<int32_t> targets = {0, -1, 2, -1, 1};
  double mean = kNaN, scale = kNaN;
  loss_mean(&mean, &scale, loss.data(), targets.data(), 5);
  CHECK(mean == Approx(3.0));
  CHECK(scale == Approx(1.0 / 3));
  const std::vector<int32_t> none(5, -1);
  loss_mean(&mean, &scale, loss.data(), none.data(), 5);
  CHECK(mean == 0.0);
  CHECK(scale == 0.0);
}

TEST_CASE("gates: bias, log-sigmoid and beta gradients match finite differences", "[ops]") {
  const int N = 7, H = 3;
  Vec z = randn(N * H, 62, 2.0), b = randn(H, 63), dy = randn(N * H, 64);
  Vec zb = z, db(H, 0.0);
  add_bias(zb.data(), b.data(), N, H);
  bias_backward(db.data(), dy.data(), N, H);
  check_gradient("add_bias b", b, db, [&] {
    Vec y = z;
    add_bias(y.data(), b.data(), N, H);
    return dot(y, dy);
  });
  Vec dz(N * H);
  for (const double scale : {1.0, 0.3}) {
    log_sigmoid_backward(dz.data(), dy.data(), z.data(), N * H, scale);
    check_gradient(fmt::format("log_sigmoid z scale {}", scale), z, dz, [&] {
      Vec y(N * H);
      log_sigmoid_forward(y.data(), z.data(), N * H, scale);
      return dot(y, dy);
    });
    Vec y(N * H);
    log_sigmoid_forward(y.data(), z.data(), N * H, scale);
    for (int i = 0; i < N * H; ++i) CHECK(y[i] == Approx(scale * std::log(1 / (1 + std::exp(-z[i])))));
  }
  for (const BetaArgs a : {BetaArgs{2, 0}, BetaArgs{2, 0.3}, BetaArgs{1, 0}, BetaArgs{1, 1.5}}) {
    const auto what = fmt::format("beta z max {} clip {}", a.max, a.clip);
    beta_backward(dz.data(), dy.data(), z.data(), N * H, a);
    check_gradient(what, z, dz, [&] {
      Vec y(N * H);
      beta_forward(y.data(), z.data(), N * H, a);
      return dot(y, dy);
    });
    Vec beta(N * H);
    beta_forward(beta.data(), z.data(), N * H, a);
    const double hi = a.clip > 0 ? std::min(a.max, 2 - a.clip) : a.max;
    for (int i = 0; i < N * H; ++i) {
      INFO(what);
      CHECK((beta[i] > 0 && beta[i] <= hi));
      if (a.max / (1 + std::exp(-z[i])) < hi) CHECK(beta[i] == Approx(a.max / (1 + std::exp(-z[i]))));
    }
  }
}

TEST_CASE("forward in float matches double", "[ops]") {
  const int N = 63, K = 50, M = 8, C = 50, V = 11, T = 7;
  const Vec x = randn(N * K, 40), w = randn(K * M, 41), g = randu(C, 42, 0.5, 1.5);
  check_float_vs_double("matmul", matmul_fwd<float>(x, w, N, K, M), matmul_fwd<double>(x, w, N, K, M));
  check_float_vs_double("rmsnorm", rmsnorm_fwd<float>(x, g, N, C), rmsnorm_fwd<double>(x, g, N, C));
  check_float_vs_double("swiglu", swiglu_fwd<float>(x, N, C / 2), swiglu_fwd<double>(x, N, C / 2));
  const auto tokens = random_tokens(N, V, 43);
  const Vec table = randn(V * C, 44);
  check_float_vs_double("embedding", embedding_fwd<float>(tokens, table, C),
                        embedding_fwd<double>(tokens, table, C));
  auto targets = random_tokens(N, K, 45);
  targets[3] = -1;
  std::vector<int32_t> arg_f, arg_d;
  check_float_vs_double("cross_entropy", cross_entropy_fwd<float>(x, targets, K, &arg_f),
                        cross_entropy_fwd<double>(x, targets, K, &arg_d));
  CHECK(arg_f == arg_d);
  const Vec a = randn(3 * C, 46, 0.7);
  check_float_vs_double("short_conv", short_conv_fwd<float>(x, a, N / T, T, C),
                        short_conv_fwd<double>(x, a, N / T, T, C));
  check_float_vs_double("l2norm", l2norm_fwd<float>(x, N, C), l2norm_fwd<double>(x, N, C));
}

TEST_CASE("matmul matches a naive triple loop on odd non-square shapes", "[ops]") {
  for (auto [N, K, M] : std::array<std::array<int, 3>, 4>{{{7, 50, 3}, {63, 8, 50}, {1, 3, 8}, {131, 301, 67}}}) {
    const Vec x = randn(N * K, 47), w = randn(K * M, 48), dy = randn(N * M, 49);
    const Vec prior_y = randn(N * M, 50), prior_x = randn(N * K, 51), prior_w = randn(K * M, 52);
    Vec y(N * M, 0.0), dx(N * K, 0.0), dw(K * M, 0.0);
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k)
        for (int m = 0; m < M; ++m) {
          y[n * M + m] += x[n * K + k] * w[k * M + m];
          dx[n * K + k] += dy[n * M + m] * w[k * M + m];
          dw[k * M + m] += x[n * K + k] * dy[n * M + m];
        }
    const auto shape = fmt::format(" N={} K={} M={}", N, K, M);
    for (GradMode mode : {GradMode::Overwrite, GradMode::Accumulate}) {
      const bool acc = mode == GradMode::Accumulate;
      Vec y1 = acc ? prior_y : Vec(N * M, kNaN), dx1 = acc ? prior_x : Vec(N * K, kNaN),
          dw1 = prior_w;
      matmul_forward(y1.data(), x.data(), w.data(), N, K, M, mode);
      matmul_backward(dx1.data(), dw1.data(), dy.data(), x.data(), w.data(), N, K, M, mode);
      const std::string tag = (acc ? " accumulate" : " overwrite") + shape;
      require_close("matmul y" + tag, y1, acc ? plus(prior_y, y) : y, 1e-12, 1e-12);
      require_close("matmul dx" + tag, dx1, acc ? plus(prior_x, dx) : dx, 1e-12, 1e-12);
      require_close("matmul dw" + tag, dw1, plus(prior_w, dw), 1e-12, 1e-12);
    }
  }
}

TEST_CASE("results do not depend on the thread count", "[ops]") {
  // Large enough to take the parallel paths (kernels/cpu/eigen.h: kParallelMin = 2^15 elements).
  const int B = 5, T = 128, C = 64, N = B * T, V = 13, K = 300;
  const auto x = cast<float>(randn(N * K, 53)), w = cast<float>(randn(K * C, 54));
  const auto u = cast<float>(randn(N * C, 55)), a = cast<float>(randn(3 * C, 56));
  const auto dy = cast<float>(randn(N * C, 57)), g = cast<float>(randu(C, 58, 0.5, 1.5));
  const auto tokens = random_tokens(N, V, 59);
  auto run = [&] {
    std::vector<float> out(N * K + K * C + N * C + 3 * C + C + N + V * C + N * C, 0.0f);
    float *dx = out.data(), *dw = dx + N * K, *du = dw + K * C, *da = du + N * C, *dg = da + 3 * C,
          *rstd = dg + C, *dtable = rstd + N, *xw = dtable + V * C;
    std::vector<float> y(N * C);
    matmul_forward(xw, x.data(), w.data(), N, K, C);
    matmul_backward(dx, dw, dy.data(), x.data(), w.data(), N, K, C, GradMode::Overwrite);
    short_conv_backward(du, da, dy.data(), u.data(), a.data(), B, T, C);
    rmsnorm_forward(y.data(), rstd, u.data(), g.data(), N, C, kRmsEps);
    rmsnorm_backward(du, dg, dy.data(), u.data(), rstd, g.data(), N, C, GradMode::Accumulate);
    embedding_backward(dtable, dy.data(), tokens.data(), N, C);
    return out;
  };
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = run();
  for (int n_threads : {2, 3}) {
    omp_set_num_threads(n_threads);
    require_equal(fmt::format("gradients with {} threads vs 1", n_threads), run(), one);
  }
  omp_set_num_threads(saved);
}
