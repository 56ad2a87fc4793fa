// The dense ops of the CUDA engine (kernels/cuda/*.cu) against the CPU reference in double:
// forward and backward on odd shapes, GradMode semantics, every output written (device outputs
// start as NaN), bit-identical reruns of the reductions, empty sizes, and replay in a CUDA graph.
//
// Inputs are rounded to float first, so both sides see the same values. Tolerances
// (tests/README.md): relative RMS ≤ 1e-5 forward and ≤ 1e-4 for gradients, and elementwise
// |got − want| ≤ tol·(|want| + RMS(want)) with the same tol. RoPE is also held to relative RMS
// ≤ 1e-6: its table comes from double angles like the CPU's (float angles at t = 1000 would be
// off by ~1e-4).
#include <array>
#include <cstring>
#include <limits>
#include <utility>

#include "kernels/cuda/ops.h"
#include "core/cuda/runtime.h"
#include "kernels/ops.h"
#include "tests/check.h"
#include "tests/cuda_check.h"

using namespace pb;
using namespace pb::test;
using Vec = std::vector<double>;
using FVec = std::vector<float>;
using DBuf = cuda::DeviceBuffer<float>;

namespace {

constexpr double kFwdTol = 1e-5, kGradTol = 1e-4, kRopeTol = 1e-6;
constexpr double kRmsEps = 1e-5, kL2Eps = 1e-3;
constexpr float kNaNf = std::numeric_limits<float>::quiet_NaN();

DBuf dev(const Vec& v) { return to_device(cast<float>(v)); }
FVec host(const DBuf& d) { return to_host(d); }

double rms(const Vec& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return x.empty() ? 0 : std::sqrt(s / double(x.size()));
}

Vec plus(const Vec& a, const Vec& b) {
  Vec c(a.size());
  for (size_t i = 0; i < a.size(); ++i) c[i] = a[i] + b[i];
  return c;
}

// GPU result (float) against the double reference: relative RMS and elementwise, both at tol.
// Results below the smallest normal float (e.g. β = 2σ(−100) ≈ 7e-44) carry fewer than 24 bits,
// so differences under kSubnormal count as equal.
constexpr double kSubnormal = 1.2e-38;
void check_close(const std::string& what, const FVec& got, const Vec& want, double tol) {
  INFO(what);
  CHECK((rel_rms(got, want) <= tol || rms(want) < kSubnormal));
  require_close(what, got, want, tol, std::max(tol * rms(want), kSubnormal));
}
void check_fwd(const std::string& what, const FVec& got, const Vec& want) {
  check_close(what, got, want, kFwdTol);
}
void check_grad(const std::string& what, const FVec& got, const Vec& want) {
  check_close(what, got, want, kGradTol);
}


// Row shapes (N, C): N = 1, 7, 63, 100, 1000 by C = 8, 50, 128, 256, then rows wider than a warp
// handles (one block per row), with and without float4.
std::vector<std::pair<int, int>> row_shapes() {
  std::vector<std::pair<int, int>> s;
  for (int N : {1, 7, 63, 100, 1000})
    for (int C : {8, 50, 128, 256}) s.emplace_back(N, C);
  s.emplace_back(7, 1501);
  s.emplace_back(3, 2048);
  return s;
}

constexpr std::array<GradMode, 2> kModes = {GradMode::Overwrite, GradMode::Accumulate};
const char* mode_name(GradMode m) {
  return m == GradMode::Accumulate ? " accumulate" : " overwrite";
}

}  // namespace

TEST_CASE("cuda matmul matches the reference in both modes, dx optional", "[cuda]") {
  const std::array<std::array<int, 3>, 5> shapes = {
      {{1, 1, 1}, {7, 50, 3}, {131, 301, 67}, {1000, 128, 384}, {63, 256, 8192}}};
  for (auto [N, K, M] : shapes) {
    const auto shape = fmt::format(" N={} K={} M={}", N, K, M);
    const Vec x = randf(N * K, 1), w = randf(K * M, 2), dy = randf(N * M, 3);
    const Vec prior_y = randf(N * M, 4), prior_x = randf(N * K, 5), prior_w = randf(K * M, 6);
    Vec y(N * M), dx(N * K), dw(K * M, 0.0);
    pb::matmul_forward(y.data(), x.data(), w.data(), N, K, M);
    pb::matmul_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), N, K, M,
                        GradMode::Overwrite);
    const DBuf gx = dev(x), gw = dev(w), gdy = dev(dy);
    for (GradMode mode : kModes) {
      const bool acc = mode == GradMode::Accumulate;
      DBuf gy = acc ? dev(prior_y) : poisoned(N * M), gdx = acc ? dev(prior_x) : poisoned(N * K);
      DBuf gdw = dev(prior_w);
      cuda::matmul_forward(gy.data(), gx.data(), gw.data(), N, K, M, mode);
      cuda::matmul_backward(gdx.data(), gdw.data(), gdy.data(), gx.data(), gw.data(), N, K, M,
                            mode);
      const std::string tag = mode_name(mode) + shape;
      check_fwd("matmul y" + tag, host(gy), acc ? plus(prior_y, y) : y);
      check_grad("matmul dx" + tag, host(gdx), acc ? plus(prior_x, dx) : dx);
      check_grad("matmul dw +=" + tag, host(gdw), plus(prior_w, dw));
    }
    DBuf gdw = dev(prior_w);
    cuda::matmul_backward(nullptr, gdw.data(), gdy.data(), gx.data(), gw.data(), N, K, M,
                          GradMode::Overwrite);
    check_grad("matmul dw += without dx" + shape, host(gdw), plus(prior_w, dw));
  }
}

TEST_CASE("cuda rmsnorm forward and backward", "[cuda]") {
  for (auto [N, C] : row_shapes()) {
    const auto shape = fmt::format(" N={} C={}", N, C);
    const Vec x = randf(N * C, 7), g = randuf(C, 8, 0.5, 1.5), dy = randf(N * C, 9);
    const Vec prior_dx = randf(N * C, 10), prior_dg = randf(C, 11);
    Vec y(N * C), rstd(N), dx(N * C), dg(C, 0.0);
    pb::rmsnorm_forward(y.data(), rstd.data(), x.data(), g.data(), N, C, kRmsEps);
    pb::rmsnorm_backward(dx.data(), dg.data(), dy.data(), x.data(), rstd.data(), g.data(), N, C,
                         GradMode::Overwrite);
    const DBuf gx = dev(x), gg = dev(g), gdy = dev(dy);
    DBuf gy = poisoned(N * C), grstd = poisoned(N);
    cuda::rmsnorm_forward(gy.data(), grstd.data(), gx.data(), gg.data(), N, C, kRmsEps);
    check_fwd("rmsnorm y" + shape, host(gy), y);
    check_fwd("rmsnorm rstd" + shape, host(grstd), rstd);
    for (GradMode mode : kModes) {
      const bool acc = mode == GradMode::Accumulate;
      DBuf gdx = acc ? dev(prior_dx) : poisoned(N * C), gdg = dev(prior_dg);
      cuda::rmsnorm_backward(gdx.data(), gdg.data(), gdy.data(), gx.data(), grstd.data(), gg.data(),
                             N, C, mode);
      const std::string tag = mode_name(mode) + shape;
      check_grad("rmsnorm dx" + tag, host(gdx), acc ? plus(prior_dx, dx) : dx);
      check_grad("rmsnorm dg +=" + tag, host(gdg), plus(prior_dg, dg));
    }
  }
}

TEST_CASE("cuda swiglu forward and backward, also for saturated gates", "[cuda]") {
  for (int N : {1, 7, 63, 1000}) {
    for (int F : {8, 50, 128, 256}) {
      const auto shape = fmt::format(" N={} F={}", N, F);
      Vec ab = randf(N * 2 * F, 12, 2.0);
      const std::array<double, 6> extremes = {-100, 100, -30, 30, 0, -15};
      for (size_t i = 0; i < extremes.size(); ++i) ab[i] = extremes[i];  // in a[0] (F ≥ 8)
      const Vec dh = randf(N * F, 13);
      Vec h(N * F), dab(N * 2 * F);
      pb::swiglu_forward(h.data(), ab.data(), N, F);
      pb::swiglu_backward(dab.data(), dh.data(), ab.data(), N, F);
      const DBuf gab = dev(ab), gdh = dev(dh);
      DBuf gh = poisoned(N * F), gdab = poisoned(N * 2 * F);
      cuda::swiglu_forward(gh.data(), gab.data(), N, F);
      cuda::swiglu_backward(gdab.data(), gdh.data(), gab.data(), N, F);
      check_fwd("swiglu h" + shape, host(gh), h);
      check_grad("swiglu dab" + shape, host(gdab), dab);
    }
  }
}

TEST_CASE("cuda embedding: exact gather, scatter-add into the table", "[cuda]") {
  for (int V : {8, 50}) {
    for (int N : {1, 7, 63, 1000}) {
      for (int C : {8, 50, 128, 256}) {
        const auto shape = fmt::format(" V={} N={} C={}", V, N, C);
        const auto tokens = random_tokens(N, V, 14);
        const Vec table = randf(V * C, 15), dx = randf(N * C, 16), prior = randf(V * C, 17);
        Vec x(N * C), dtable(V * C, 0.0);
        pb::embedding_forward(x.data(), tokens.data(), table.data(), N, C);
        pb::embedding_backward(dtable.data(), dx.data(), tokens.data(), N, C);
        const auto gtokens = to_device(tokens);
        const DBuf gtable = dev(table), gdx = dev(dx);
        DBuf gx = poisoned(N * C), gdtable = dev(prior);
        cuda::embedding_forward(gx.data(), gtokens.data(), gtable.data(), N, C);
        cuda::embedding_backward(gdtable.data(), gdx.data(), gtokens.data(), N, C);
        require_close("embedding x" + shape, host(gx), x, 0.0, 0.0);
        check_grad("embedding dtable +=" + shape, host(gdtable), plus(prior, dtable));
      }
    }
  }
}

TEST_CASE("cuda cross_entropy: loss, argmax, gradient, ignored rows, huge logits, ties", "[cuda]") {
  const float scale = 0.37f;
  const std::array<std::pair<int, std::array<int, 4>>, 4> shapes = {{{8, {1, 7, 63, 1000}},
                                                                     {50, {1, 7, 63, 1000}},
                                                                     {1001, {1, 7, 63, 100}},
                                                                     {8192, {1, 7, 63, 100}}}};
  for (const auto& [V, Ns] : shapes) {
    for (int N : Ns) {
      const auto shape = fmt::format(" N={} V={}", N, V);
      Vec logits = randf(N * V, 18, 3.0);
      auto targets = random_tokens(N, V, 19);
      for (int n = 1; n < N; n += 3) targets[n] = -1;
      if (N >= 7) {
        for (int i = 0; i < V; ++i) logits[2 * V + i] = logits[2 * V + i] > 0 ? 1000 : -1000;
        for (int i = 0; i < V; ++i) logits[3 * V + i] = logits[3 * V + i] > 0 ? -1000 : 1000;
        logits[5 * V + V / 2] = logits[5 * V + V - 1] = 50;  // a tie: argmax V/2
        targets[5] = V - 1;
      }
      Vec loss(N), dlogits(N * V);
      std::vector<int32_t> argmax(N);
      pb::cross_entropy_forward(loss.data(), argmax.data(), logits.data(), targets.data(), N, V);
      const double scale_d = scale;
      pb::cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), N, V, &scale_d);

      const DBuf glogits = dev(logits), gscale = to_device(FVec{scale});
      const auto gtargets = to_device(targets);
      DBuf gloss = poisoned(N), gloss2 = poisoned(N), gdlogits = poisoned(N * V);
      auto gargmax = to_device(std::vector<int32_t>(N, -7));
      cuda::cross_entropy_forward(gloss.data(), gargmax.data(), glogits.data(), gtargets.data(), N,
                                  V);
      cuda::cross_entropy_forward(gloss2.data(), nullptr, glogits.data(), gtargets.data(), N, V);
      cuda::cross_entropy_backward(gdlogits.data(), glogits.data(), gtargets.data(), N, V,
                                   gscale.data());
      const FVec got_loss = host(gloss), got_d = host(gdlogits);
      check_fwd("cross_entropy loss" + shape, got_loss, loss);
      require_identical("cross_entropy loss without argmax" + shape, host(gloss2), got_loss);
      INFO("cross_entropy argmax" << shape);
      CHECK(to_host(gargmax) == argmax);
      check_grad("cross_entropy dlogits" + shape, got_d, dlogits);
      int nonzero = 0;
      for (int n = 1; n < N; n += 3)
        for (int i = 0; i < V; ++i) nonzero += got_d[size_t(n) * V + i] != 0.f;
      CHECK(nonzero == 0);
    }
  }
}

TEST_CASE("cuda loss_mean: mean over rows with a target and 1 / count", "[cuda]") {
  for (int N : {1, 1000, 49152}) {
    const Vec loss = randuf(N, 20, 0.0, 10.0);
    for (bool all_ignored : {false, true}) {
      auto targets = random_tokens(N, 7, 21);
      for (int n = 1; n < N; n += 3) targets[n] = -1;
      if (all_ignored) targets.assign(N, -1);
      double mean = kNaNf, scale = kNaNf;
      pb::loss_mean(&mean, &scale, loss.data(), targets.data(), N);
      const DBuf gloss = dev(loss);
      const auto gtargets = to_device(targets);
      DBuf gmean = poisoned(1), gscale = poisoned(1);
      cuda::loss_mean(gmean.data(), gscale.data(), gloss.data(), gtargets.data(), N);
      INFO("N=" << N << (all_ignored ? " all rows ignored" : ""));
      CHECK(host(gmean)[0] == Approx(mean).epsilon(1e-6).margin(0));
      CHECK(host(gscale)[0] == float(scale));
    }
  }
}

TEST_CASE("cuda short_conv forward and backward across sequence and chunk boundaries", "[cuda]") {
  const std::array<std::array<int, 3>, 7> shapes = {{{2, 1, 8},
                                                     {3, 2, 50},
                                                     {2, 7, 128},
                                                     {1, 63, 256},
                                                     {4, 100, 50},
                                                     {3, 33, 256},
                                                     {2, 1000, 128}}};
  for (auto [B, T, C] : shapes) {
    const auto shape = fmt::format(" B={} T={} C={}", B, T, C);
    const int n = B * T * C;
    const Vec u = randf(n, 22), a = randf(3 * C, 23, 0.7), dy = randf(n, 24),
              prior_da = randf(3 * C, 25);
    Vec y(n), du(n), da(3 * C, 0.0);
    pb::short_conv_forward(y.data(), u.data(), a.data(), B, T, C);
    pb::short_conv_backward(du.data(), da.data(), dy.data(), u.data(), a.data(), B, T, C);
    const DBuf gu = dev(u), ga = dev(a), gdy = dev(dy);
    DBuf gy = poisoned(n), gdu = poisoned(n), gda = dev(prior_da);
    cuda::short_conv_forward(gy.data(), gu.data(), ga.data(), B, T, C);
    cuda::short_conv_backward(gdu.data(), gda.data(), gdy.data(), gu.data(), ga.data(), B, T, C);
    check_fwd("short_conv y" + shape, host(gy), y);
    check_grad("short_conv du" + shape, host(gdu), du);
    check_grad("short_conv da +=" + shape, host(gda), plus(prior_da, da));
  }
}

TEST_CASE("cuda l2norm forward and backward", "[cuda]") {
  for (auto [N, D] : row_shapes()) {
    const auto shape = fmt::format(" N={} D={}", N, D);
    const Vec x = randf(N * D, 26, 0.3), dy = randf(N * D, 27);
    Vec y(N * D), dx(N * D);
    pb::l2norm_forward(y.data(), x.data(), N, D, kL2Eps);
    pb::l2norm_backward(dx.data(), dy.data(), x.data(), N, D, kL2Eps);
    const DBuf gx = dev(x), gdy = dev(dy);
    DBuf gy = poisoned(N * D), gdx = poisoned(N * D);
    cuda::l2norm_forward(gy.data(), gx.data(), N, D, kL2Eps);
    cuda::l2norm_backward(gdx.data(), gdy.data(), gx.data(), N, D, kL2Eps);
    check_fwd("l2norm y" + shape, host(gy), y);
    check_grad("l2norm dx" + shape, host(gdx), dx);
  }
}

TEST_CASE("cuda sum_squares: double accumulation, unaligned input, non-finite entries", "[cuda]") {
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(3) * (1 << 20) + 5}) {
    INFO("n=" << n);
    const Vec x = randf(n, 28);
    const DBuf gx = dev(x);
    DBuf out = poisoned(1);
    for (int64_t start : {0, 1}) {  // start 1: not 16-byte aligned, the scalar path
      INFO("start=" << start);
      double want = 0;
      pb::sum_squares(&want, x.data() + start, n - start);
      cuda::sum_squares(out.data(), gx.data() + start, n - start);
      CHECK(host(out)[0] == Approx(want).epsilon(1e-6).margin(0));
    }
    for (float bad : {kNaNf, std::numeric_limits<float>::infinity()}) {
      FVec xb = cast<float>(x);
      xb[n / 2] = bad;
      const DBuf gxb = to_device(xb);
      cuda::sum_squares(out.data(), gxb.data(), n);
      const float s = host(out)[0];
      CHECK((std::isnan(bad) ? std::isnan(s) : std::isinf(s)));
    }
  }
}

TEST_CASE("cuda adamw matches the reference over several steps, clip off, inactive, active",
          "[cuda]") {
  const int steps = 5;
  for (int n : {1001, 100003}) {
    const Vec p0 = randf(n, 29);
    std::vector<Vec> grads;
    for (int s = 0; s < steps; ++s) grads.push_back(randf(n, 30 + s, 0.1 * (s + 1)));
    std::vector<uint8_t> mask(n);
    for (int i = 0; i < n; ++i) mask[i] = uint8_t(i % 3 != 0);
    // ‖g‖ ≈ 0.1·(s + 1)·sqrt(n) ≥ 3: clip 1e6 never acts, clip 1 always does.
    for (double clip : {0.0, 1e6, 1.0}) {
      for (bool masked : {false, true}) {
        const auto what = fmt::format(" n={} clip={} mask={}", n, clip, masked);
        AdamWArgs args{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
        args.clip = clip;
        Vec p = p0, m(n, 0.0), v(n, 0.0);
        DBuf gp = dev(p0), gm = dev(m), gv = dev(v), gnorm = poisoned(1);
        const auto gmask = to_device(mask);
        for (int s = 0; s < steps; ++s) {
          args.step = s + 1;
          double norm_sq = 0;
          pb::sum_squares(&norm_sq, grads[s].data(), n);
          pb::adamw_update(p.data(), m.data(), v.data(), grads[s].data(),
                           masked ? mask.data() : nullptr, n, args, &norm_sq);
          const DBuf gg = dev(grads[s]);
          cuda::sum_squares(gnorm.data(), gg.data(), n);
          cuda::adamw_update(gp.data(), gm.data(), gv.data(), gg.data(),
                             masked ? gmask.data() : nullptr, n, args,
                             clip > 0 ? gnorm.data() : nullptr);
        }
        check_fwd("adamw params" + what, host(gp), p);
        check_fwd("adamw m" + what, host(gm), m);
        check_fwd("adamw v" + what, host(gv), v);
      }
    }
  }
}

TEST_CASE("cuda gates: bias and its gradient", "[cuda]") {
  for (int N : {1, 7, 63, 1000, 49152}) {
    for (int H : {1, 4, 7, 16}) {
      const auto shape = fmt::format(" N={} H={}", N, H);
      const Vec z = randf(N * H, 31), b = randf(H, 32), dz = randf(N * H, 33), prior = randf(H, 34);
      Vec zb = z, db = prior;
      pb::add_bias(zb.data(), b.data(), N, H);
      pb::bias_backward(db.data(), dz.data(), N, H);
      DBuf gz = dev(z), gdb = dev(prior);
      const DBuf gb = dev(b), gdz = dev(dz);
      cuda::add_bias(gz.data(), gb.data(), N, H);
      cuda::bias_backward(gdb.data(), gdz.data(), N, H);
      check_fwd("add_bias" + shape, host(gz), zb);
      check_grad("bias_backward db +=" + shape, host(gdb), db);
    }
  }
}

TEST_CASE("cuda gates: log-sigmoid and beta, forward and backward, in place", "[cuda]") {
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(100003)}) {
    Vec z = randf(n, 35, 3.0);
    const std::array<double, 7> extremes = {-100, 100, -30, 30, 0, -15, 2.5};
    for (size_t i = 0; i < extremes.size() && i < size_t(n); ++i) z[i] = extremes[i];
    const Vec dy = randf(n, 36);
    const DBuf gz = dev(z), gdy = dev(dy);
    // backward out of place into NaN, and in place (dz == dy): identical
    auto backward = [&](const std::string& what, const Vec& want, auto&& op) {
      DBuf out = poisoned(n), inplace = dev(dy);
      op(out.data(), gdy.data());
      op(inplace.data(), inplace.data());
      const FVec got = host(out);
      check_grad(what, got, want);
      require_identical(what + " in place", host(inplace), got);
    };
    const auto size = fmt::format(" n={}", n);
    for (double scale : {1.0, 0.25}) {
      const auto what = fmt::format("{} scale={}", size, scale);
      Vec y(n), dz(n);
      pb::log_sigmoid_forward(y.data(), z.data(), n, scale);
      pb::log_sigmoid_backward(dz.data(), dy.data(), z.data(), n, scale);
      DBuf gy = poisoned(n);
      cuda::log_sigmoid_forward(gy.data(), gz.data(), n, scale);
      check_fwd("log_sigmoid y" + what, host(gy), y);
      backward("log_sigmoid dz" + what, dz,
               [&](float* d, const float* g) { cuda::log_sigmoid_backward(d, g, gz.data(), n, scale); });
    }
    for (const BetaArgs a : {BetaArgs{2, 0}, BetaArgs{2, 0.1}, BetaArgs{1, 0}}) {
      const auto what = fmt::format("{} max={} clip={}", size, a.max, a.clip);
      Vec beta(n), dz(n);
      pb::beta_forward(beta.data(), z.data(), n, a);
      pb::beta_backward(dz.data(), dy.data(), z.data(), n, a);
      DBuf gbeta = poisoned(n);
      cuda::beta_forward(gbeta.data(), gz.data(), n, a);
      check_fwd("beta" + what, host(gbeta), beta);
      backward("beta dz" + what, dz,
               [&](float* d, const float* g) { cuda::beta_backward(d, g, gz.data(), n, a); });
    }
  }
}

TEST_CASE("cuda rope matches the reference to 1e-6, in place, backward inverts", "[cuda]") {
  const int B = 2, H = 3;
  for (int T : {1, 7, 63, 1000}) {
    for (int D : {8, 10, 32, 64, 128}) {  // D = 10: D/2 odd, the scalar path
      const auto shape = fmt::format(" T={} D={}", T, D);
      const RopeArgs args{{B, T, H, D}, 10000.0};
      const int n = B * T * H * D;
      const Vec x = randf(n, 37), dout = randf(n, 38);
      Vec out(n), din(n);
      pb::rope_forward(out.data(), x.data(), args);
      pb::rope_backward(din.data(), dout.data(), args);
      const DBuf gx = dev(x), gdout = dev(dout);
      DBuf gout = poisoned(n), gdin = poisoned(n), inplace = dev(x);
      cuda::rope_forward(gout.data(), gx.data(), args);
      cuda::rope_forward(inplace.data(), inplace.data(), args);
      cuda::rope_backward(gdin.data(), gdout.data(), args);
      const FVec got = host(gout);
      check_fwd("rope out" + shape, got, out);
      check_grad("rope din" + shape, host(gdin), din);
      CHECK(rel_rms(got, out) <= kRopeTol);
      CHECK(rel_rms(host(gdin), din) <= kRopeTol);
      require_identical("rope in place" + shape, host(inplace), got);
      cuda::rope_backward(inplace.data(), inplace.data(), args);
      check_fwd("rope backward ∘ forward" + shape, host(inplace), x);
    }
  }
}

TEST_CASE("cuda reductions give identical bits when run twice", "[cuda]") {
  const int N = 49152, C = 256, H = 16, B = 4, T = 1000, Cs = 128;
  const Vec x = randf(N * C, 39), dy = randf(N * C, 40), g = randuf(C, 41, 0.5, 1.5);
  const Vec prior = randf(3 * C, 42), loss = randuf(N, 43, 0.0, 10.0);
  auto targets = random_tokens(N, 7, 44);
  for (int n = 1; n < N; n += 3) targets[n] = -1;
  const DBuf gx = dev(x), gdy = dev(dy), gg = dev(g), gloss = dev(loss);
  const auto gtargets = to_device(targets);
  DBuf rstd(N), dx(size_t(N) * C), du(size_t(B) * T * Cs), out(1), mean(1), scale(1);
  cuda::rmsnorm_forward(dx.data(), rstd.data(), gx.data(), gg.data(), N, C, kRmsEps);
  auto run = [&] {
    DBuf dg = dev(Vec(prior.begin(), prior.begin() + C)),
         da = dev(Vec(prior.begin(), prior.begin() + 3 * Cs));
    DBuf db = dev(Vec(prior.begin(), prior.begin() + H));
    cuda::rmsnorm_backward(dx.data(), dg.data(), gdy.data(), gx.data(), rstd.data(), gg.data(), N,
                           C, GradMode::Overwrite);
    // u (B, T, Cs) and a (3, Cs): prefixes of x and dy
    cuda::short_conv_backward(du.data(), da.data(), gdy.data(), gx.data(), gdy.data(), B, T, Cs);
    cuda::bias_backward(db.data(), gdy.data(), N, H);
    cuda::sum_squares(out.data(), gx.data(), int64_t(3) * (1 << 20) + 5);
    cuda::loss_mean(mean.data(), scale.data(), gloss.data(), gtargets.data(), N);
    FVec all;
    for (const DBuf* b : {&dg, &da, &db, &out, &mean, &scale}) {
      const FVec h = host(*b);
      all.insert(all.end(), h.begin(), h.end());
    }
    return all;
  };
  const FVec first = run();
  for (float v : first) CHECK(std::isfinite(v));
  require_identical("reductions, second run", run(), first);
}

TEST_CASE("cuda ops accept empty sizes", "[cuda]") {
  const RopeArgs rope{{0, 5, 2, 8}, 10000.0};
  const AdamWArgs adam{.lr = 1e-3};
  CHECK_NOTHROW([&] {
    cuda::matmul_forward(nullptr, nullptr, nullptr, 0, 4, 4);
    cuda::matmul_backward(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 4, 4,
                          GradMode::Overwrite);
    cuda::rmsnorm_forward(nullptr, nullptr, nullptr, nullptr, 0, 8, kRmsEps);
    cuda::rmsnorm_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 8,
                           GradMode::Overwrite);
    cuda::swiglu_forward(nullptr, nullptr, 0, 8);
    cuda::swiglu_backward(nullptr, nullptr, nullptr, 0, 8);
    cuda::embedding_forward(nullptr, nullptr, nullptr, 0, 8);
    cuda::embedding_backward(nullptr, nullptr, nullptr, 0, 8);
    cuda::cross_entropy_forward(nullptr, nullptr, nullptr, nullptr, 0, 8);
    cuda::cross_entropy_backward(nullptr, nullptr, nullptr, 0, 8, nullptr);
    cuda::short_conv_forward(nullptr, nullptr, nullptr, 0, 4, 8);
    cuda::short_conv_backward(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 4, 8);
    cuda::l2norm_forward(nullptr, nullptr, 0, 8, kL2Eps);
    cuda::l2norm_backward(nullptr, nullptr, nullptr, 0, 8, kL2Eps);
    cuda::adamw_update(nullptr, nullptr, nullptr, nullptr, nullptr, 0, adam, nullptr);
    cuda::add_bias(nullptr, nullptr, 0, 4);
    cuda::bias_backward(nullptr, nullptr, 0, 4);
    cuda::log_sigmoid_forward(nullptr, nullptr, 0, 1.0);
    cuda::log_sigmoid_backward(nullptr, nullptr, nullptr, 0, 1.0);
    cuda::beta_forward(nullptr, nullptr, 0, BetaArgs{2, 0.1});
    cuda::beta_backward(nullptr, nullptr, nullptr, 0, BetaArgs{2, 0.1});
    cuda::rope_forward(nullptr, nullptr, rope);
    cuda::rope_backward(nullptr, nullptr, rope);
    cuda::synchronize();
  }());
  // The outputs that stay defined: empty sums are 0, an empty product overwrites with 0.
  DBuf out = poisoned(1), mean = poisoned(1), scale = poisoned(1), y = poisoned(3 * 5);
  cuda::sum_squares(out.data(), nullptr, 0);
  cuda::loss_mean(mean.data(), scale.data(), nullptr, nullptr, 0);
  cuda::matmul_forward(y.data(), nullptr, nullptr, 3, 0, 5);
  CHECK(host(out) == FVec{0.f});
  CHECK(host(mean) == FVec{0.f});
  CHECK(host(scale) == FVec{0.f});
  CHECK(host(y) == FVec(3 * 5, 0.f));
}

TEST_CASE("cuda dense ops replay in a CUDA graph with the eager results", "[cuda]") {
  const int N = 300, C = 128, V = 512, P = 10007;
  const RopeArgs rope{{2, 150, 1, C}, 10000.0};  // (B, T, H, D) over the same N·C entries
  AdamWArgs adam{.lr = 1e-2, .weight_decay = 0.1};
  adam.clip = 1.0;
  const Vec x = randf(N * C, 45), g = randuf(C, 46, 0.5, 1.5), dy = randf(N * C, 47);
  const Vec w = randf(C * V, 48, 0.1), p0 = randf(P, 49), grads = randf(P, 50),
            prior = randf(C, 51);
  auto targets = random_tokens(N, V, 52);
  for (int n = 1; n < N; n += 3) targets[n] = -1;
  const DBuf gx = dev(x), gg = dev(g), gdy = dev(dy), gw = dev(w), ggrads = dev(grads);
  const auto gtargets = to_device(targets);
  DBuf y(N * C), rstd(N), dx(N * C), dg(C), logits(size_t(N) * V), loss(N), dlogits(size_t(N) * V);
  DBuf mean(1), scale(1), norm_sq(1), p(P), m(P), v(P), q(N * C);
  cuda::DeviceBuffer<int32_t> argmax(N);
  auto reset = [&] {  // the state the step mutates
    cuda::copy_to_device(dg.data(), cast<float>(prior).data(), C * sizeof(float));
    cuda::copy_to_device(p.data(), cast<float>(p0).data(), P * sizeof(float));
    cuda::zero_on_device(m.data(), P * sizeof(float));
    cuda::zero_on_device(v.data(), P * sizeof(float));
    cuda::copy_on_device(q.data(), gx.data(), N * C * sizeof(float));
    cuda::synchronize();
  };
  auto step = [&] {
    cuda::rmsnorm_forward(y.data(), rstd.data(), gx.data(), gg.data(), N, C, kRmsEps);
    cuda::matmul_forward(logits.data(), y.data(), gw.data(), N, C, V);
    cuda::cross_entropy_forward(loss.data(), argmax.data(), logits.data(), gtargets.data(), N, V);
    cuda::loss_mean(mean.data(), scale.data(), loss.data(), gtargets.data(), N);
    cuda::cross_entropy_backward(dlogits.data(), logits.data(), gtargets.data(), N, V,
                                 scale.data());
    cuda::rmsnorm_backward(dx.data(), dg.data(), gdy.data(), gx.data(), rstd.data(), gg.data(), N,
                           C, GradMode::Overwrite);
    cuda::sum_squares(norm_sq.data(), ggrads.data(), P);
    cuda::adamw_update(p.data(), m.data(), v.data(), ggrads.data(), nullptr, P, adam,
                       norm_sq.data());
    cuda::rope_forward(q.data(), q.data(), rope);
  };
  auto snapshot = [&] {
    FVec all;
    for (const DBuf* b :
         {&y, &rstd, &logits, &loss, &mean, &scale, &dlogits, &dx, &dg, &norm_sq, &p, &m, &v, &q}) {
      const FVec h = host(*b);
      all.insert(all.end(), h.begin(), h.end());
    }
    return all;
  };
  reset();
  step();
  const FVec eager = snapshot();
  const auto eager_argmax = to_host(argmax);

  reset();
  const uint64_t allocations = cuda::allocation_count();
  cuda::Graph graph;
  graph.begin();
  step();
  graph.end();
  CHECK(cuda::allocation_count() == allocations);
  graph.launch();
  require_identical("graph replay vs eager", snapshot(), eager);
  CHECK(to_host(argmax) == eager_argmax);
}
