// Stacked runs (Runs, kernels/ops.h) in the CUDA dense ops: R = 3 runs in one call against the
// definition of stacking, the CPU reference (float) called once per run on that run's rows and its
// copy of the parameter, with one run. Each run's copy lies `stride` entries after the previous
// one, with no gap and with a gap of 3 (strides that are multiples of 4, where the float4 paths
// run, and strides that are not); the gaps of a gradient buffer must come back untouched. Device outputs start as NaN. Also: with
// one run an op is the unstacked call bit for bit, rows that do not split evenly over the runs are a
// pb::Error, and matmul at precision bf16.
//
// Tolerances as test_cuda_ops.cpp (tests/README.md): relative RMS and elementwise (atol = tol·RMS)
// 1e-5 forward, 1e-4 for gradients; the embedding gather exact; loss_mean's mean 1e-6 relative
// and its scale exact. At precision bf16 matmul's outputs are within 1e-2 relative RMS of the fp32
// reference (the bf16 model's loss bound; one bf16 rounding of both operands gives ≈ 2e-3), and
// with a stride that keeps every run's w 16-byte aligned also above 1e-4, the fp32 bound (else the
// batched GEMM did not compute in bf16). With a misaligned stride cuBLAS may run the batch without
// tensor cores, in fp32 (H200, n = 45, K = 64, M = 40, stride 2563: 7e-8), so there only the bound
// above is checked.
#include <array>
#include <cstring>

#include "kernels/cuda/ops.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "kernels/ops.h"
#include "tests/check.h"
#include "tests/cuda_check.h"

using namespace pb;
using namespace pb::test;
using FVec = std::vector<float>;
using DBuf = cuda::DeviceBuffer<float>;

namespace {

constexpr int R = 3;  // stacked runs
constexpr double kFwdTol = 1e-5, kGradTol = 1e-4, kBf16Tol = 1e-2, kFp32Tol = 1e-4;
constexpr double kRmsEps = 1e-5;
constexpr std::array<int, 2> kPads = {0, 3};  // gap after each parameter copy
constexpr std::array<GradMode, 2> kModes = {GradMode::Overwrite, GradMode::Accumulate};

FVec frand(size_t n, uint64_t seed, double std = 1.0) { return cast<float>(randn(n, seed, std)); }
FVec frandu(size_t n, uint64_t seed, double lo, double hi) {
  return cast<float>(randu(n, seed, lo, hi));
}
DBuf dev(const FVec& v) { return to_device(v); }
FVec host(const DBuf& d) { return to_host(d); }

double rms(const FVec& x) {
  double s = 0;
  for (float v : x) s += double(v) * v;
  return x.empty() ? 0 : std::sqrt(s / double(x.size()));
}

// GPU result against the float reference: relative RMS and elementwise, both at tol.
void check_close(const std::string& what, const FVec& got, const FVec& want, double tol) {
  INFO(what);
  CHECK(rel_rms(got, want) <= tol);
  require_close(what, got, want, tol, tol * rms(want));
}
void check_fwd(const std::string& what, const FVec& got, const FVec& want) {
  check_close(what, got, want, kFwdTol);
}
void check_grad(const std::string& what, const FVec& got, const FVec& want) {
  check_close(what, got, want, kGradTol);
}

const char* mode_name(GradMode m) {
  return m == GradMode::Accumulate ? " accumulate" : " overwrite";
}

}  // namespace

TEST_CASE("stacked cuda matmul: one batched GEMM is the reference per run", "[cuda][runs]") {
  // rows per run n (not multiples of 16), K, M
  const std::array<std::array<int, 3>, 4> shapes = {
      {{1, 1, 1}, {7, 50, 3}, {45, 64, 40}, {100, 301, 67}}};
  for (auto [n, K, M] : shapes) {
    for (int pad : kPads) {
      const int N = R * n;
      const int64_t S = int64_t(K) * M + pad;  // w (K, M) per run at w + r·S
      const auto shape = fmt::format(" n={} K={} M={} stride={}", n, K, M, S);
      const FVec x = frand(N * K, 1), w = frand(R * S, 2), dy = frand(N * M, 3);
      const FVec prior_y = frand(N * M, 4), prior_dx = frand(N * K, 5), prior_dw = frand(R * S, 6);
      const DBuf gx = dev(x), gw = dev(w), gdy = dev(dy);
      const Runs runs{R, S};
      for (GradMode mode : kModes) {
        const bool acc = mode == GradMode::Accumulate;
        FVec y = acc ? prior_y : FVec(N * M), dx = acc ? prior_dx : FVec(N * K), dw = prior_dw;
        for (int r = 0; r < R; ++r) {
          const int64_t i = int64_t(r) * n;  // the run's first row
          pb::matmul_forward(y.data() + i * M, x.data() + i * K, w.data() + r * S, n, K, M, mode);
          pb::matmul_backward(dx.data() + i * K, dw.data() + r * S, dy.data() + i * M,
                              x.data() + i * K, w.data() + r * S, n, K, M, mode);
        }
        DBuf gy = acc ? dev(prior_y) : poisoned(N * M), gdx = acc ? dev(prior_dx) : poisoned(N * K);
        DBuf gdw = dev(prior_dw);
        cuda::matmul_forward(gy.data(), gx.data(), gw.data(), N, K, M, mode, runs);
        cuda::matmul_backward(gdx.data(), gdw.data(), gdy.data(), gx.data(), gw.data(), N, K, M,
                              mode, runs);
        const std::string tag = mode_name(mode) + shape;
        check_fwd("matmul y" + tag, host(gy), y);
        check_grad("matmul dx" + tag, host(gdx), dx);
        check_grad("matmul dw +=" + tag, host(gdw), dw);
        if (acc) continue;
        DBuf gdw2 = dev(prior_dw);  // without dx: the same dw
        cuda::matmul_backward(nullptr, gdw2.data(), gdy.data(), gx.data(), gw.data(), N, K, M, mode,
                              runs);
        check_grad("matmul dw += without dx" + shape, host(gdw2), dw);
      }
    }
  }
}

TEST_CASE("stacked cuda rmsnorm: each run's gain, dg per run", "[cuda][runs]") {
  // rows per run n by C: warp rows, 64-row dg chunks inside a run (n = 70, 100), block rows
  const std::array<std::pair<int, int>, 5> shapes = {
      {{1, 8}, {7, 50}, {70, 128}, {100, 256}, {5, 1501}}};
  for (auto [n, C] : shapes) {
    for (int pad : kPads) {
      const int N = R * n;
      const int64_t S = C + pad;  // g (C) per run at g + r·S
      const auto shape = fmt::format(" n={} C={} stride={}", n, C, S);
      const FVec x = frand(N * C, 7), g = frandu(R * S, 8, 0.5, 1.5), dy = frand(N * C, 9);
      const FVec prior_dx = frand(N * C, 10), prior_dg = frand(R * S, 11);
      FVec y(N * C), rstd(N);
      for (int r = 0; r < R; ++r) {
        const int64_t i = int64_t(r) * n;
        pb::rmsnorm_forward(y.data() + i * C, rstd.data() + i, x.data() + i * C, g.data() + r * S, n,
                            C, kRmsEps);
      }
      const DBuf gx = dev(x), gg = dev(g), gdy = dev(dy);
      const Runs runs{R, S};
      DBuf gy = poisoned(N * C), grstd = poisoned(N);
      cuda::rmsnorm_forward(gy.data(), grstd.data(), gx.data(), gg.data(), N, C, kRmsEps, runs);
      check_fwd("rmsnorm y" + shape, host(gy), y);
      check_fwd("rmsnorm rstd" + shape, host(grstd), rstd);
      for (GradMode mode : kModes) {
        const bool acc = mode == GradMode::Accumulate;
        FVec dx = acc ? prior_dx : FVec(N * C), dg = prior_dg;
        for (int r = 0; r < R; ++r) {
          const int64_t i = int64_t(r) * n;
          pb::rmsnorm_backward(dx.data() + i * C, dg.data() + r * S, dy.data() + i * C,
                               x.data() + i * C, rstd.data() + i, g.data() + r * S, n, C, mode);
        }
        DBuf gdx = acc ? dev(prior_dx) : poisoned(N * C), gdg = dev(prior_dg);
        cuda::rmsnorm_backward(gdx.data(), gdg.data(), gdy.data(), gx.data(), grstd.data(),
                               gg.data(), N, C, mode, runs);
        const std::string tag = mode_name(mode) + shape;
        check_grad("rmsnorm dx" + tag, host(gdx), dx);
        check_grad("rmsnorm dg +=" + tag, host(gdg), dg);
      }
    }
  }
}

TEST_CASE("stacked cuda embedding: each run's table, scatter into it", "[cuda][runs]") {
  const int V = 50;
  for (int n : {1, 7, 63}) {
    for (int C : {8, 50, 128}) {
      for (int pad : kPads) {
        const int N = R * n;
        const int64_t S = int64_t(V) * C + pad;  // table (V, C) per run at table + r·S
        const auto shape = fmt::format(" n={} C={} stride={}", n, C, S);
        const auto tokens = random_tokens(N, V, 14);
        const FVec table = frand(R * S, 15), dx = frand(N * C, 16), prior = frand(R * S, 17);
        FVec x(N * C), dtable = prior;
        for (int r = 0; r < R; ++r) {
          const int64_t i = int64_t(r) * n;
          pb::embedding_forward(x.data() + i * C, tokens.data() + i, table.data() + r * S, n, C);
          pb::embedding_backward(dtable.data() + r * S, dx.data() + i * C, tokens.data() + i, n, C);
        }
        const auto gtokens = to_device(tokens);
        const DBuf gtable = dev(table), gdx = dev(dx);
        DBuf gx = poisoned(N * C), gdtable = dev(prior);
        cuda::embedding_forward(gx.data(), gtokens.data(), gtable.data(), N, C, Runs{R, S});
        cuda::embedding_backward(gdtable.data(), gdx.data(), gtokens.data(), N, C, Runs{R, S});
        require_close("embedding x" + shape, host(gx), x, 0.0, 0.0);
        check_grad("embedding dtable +=" + shape, host(gdtable), dtable);
      }
    }
  }
}

TEST_CASE("stacked cuda loss: loss_mean and the gradient's scale per run", "[cuda][runs]") {
  // rows per run n, vocabulary V; one run has every row ignored (mean and scale 0)
  const std::array<std::pair<int, int>, 5> shapes = {
      {{1, 8}, {7, 50}, {63, 1001}, {100, 8}, {1000, 64}}};
  for (auto [n, V] : shapes) {
    const int N = R * n;
    const auto shape = fmt::format(" n={} V={}", n, V);
    const FVec logits = frand(N * V, 18, 3.0), loss = frandu(N, 20, 0.0, 10.0);
    auto targets = random_tokens(N, V, 19);
    for (int i = 1; i < N; i += 3) targets[i] = -1;
    for (int i = n; i < 2 * n; ++i) targets[i] = -1;  // run 1: no row with a target
    FVec mean(R), scale(R), dlogits(N * V);
    for (int r = 0; r < R; ++r) {
      const int64_t i = int64_t(r) * n;
      pb::loss_mean(mean.data() + r, scale.data() + r, loss.data() + i, targets.data() + i, n);
    }
    FVec fake_scale = {0.37f, 0.f, 1.25f};  // distinct per run, so a row reading another's shows
    for (int r = 0; r < R; ++r) {
      const int64_t i = int64_t(r) * n;
      pb::cross_entropy_backward(dlogits.data() + i * V, logits.data() + i * V, targets.data() + i,
                                 n, V, fake_scale.data() + r);
    }
    const DBuf glogits = dev(logits), gloss = dev(loss), gfake = dev(fake_scale);
    const auto gtargets = to_device(targets);
    DBuf gmean = poisoned(R), gscale = poisoned(R), gdlogits = poisoned(N * V);
    cuda::loss_mean(gmean.data(), gscale.data(), gloss.data(), gtargets.data(), N, Runs{R, 0});
    cuda::cross_entropy_backward(gdlogits.data(), glogits.data(), gtargets.data(), N, V,
                                 gfake.data(), Runs{R, 0});
    const FVec got_mean = host(gmean), got_scale = host(gscale);
    for (int r = 0; r < R; ++r) {
      INFO("loss_mean run " << r << shape);
      CHECK(got_mean[r] == Approx(mean[r]).epsilon(1e-6).margin(0));
      CHECK(got_scale[r] == scale[r]);
    }
    CHECK(got_mean[1] == 0.f);
    CHECK(got_scale[1] == 0.f);
    check_grad("cross_entropy dlogits" + shape, host(gdlogits), dlogits);
  }
  // N = 0: every run's mean and scale are 0
  DBuf gmean = poisoned(R), gscale = poisoned(R);
  cuda::loss_mean(gmean.data(), gscale.data(), nullptr, nullptr, 0, Runs{R, 0});
  CHECK(host(gmean) == FVec(R, 0.f));
  CHECK(host(gscale) == FVec(R, 0.f));
}

TEST_CASE("stacked cuda short_conv: each run's filter by sequence, da per run", "[cuda][runs]") {
  // sequences per run b, T, C: backward chunks across sequence boundaries inside a run
  const std::array<std::array<int, 3>, 5> shapes = {
      {{1, 1, 8}, {1, 7, 50}, {2, 33, 128}, {1, 100, 8}, {2, 70, 256}}};
  for (auto [b, T, C] : shapes) {
    for (int pad : kPads) {
      const int B = R * b, n = B * T * C;
      const int64_t S = 3 * int64_t(C) + pad, TC = int64_t(T) * C;  // a (3, C) per run at a + r·S
      const auto shape = fmt::format(" b={} T={} C={} stride={}", b, T, C, S);
      const FVec u = frand(n, 22), a = frand(R * S, 23, 0.7), dy = frand(n, 24),
                 prior_da = frand(R * S, 25);
      FVec y(n), du(n), da = prior_da;
      for (int r = 0; r < R; ++r) {
        const int64_t i = int64_t(r) * b * TC;  // the run's first sequence
        pb::short_conv_forward(y.data() + i, u.data() + i, a.data() + r * S, b, T, C);
        pb::short_conv_backward(du.data() + i, da.data() + r * S, dy.data() + i, u.data() + i,
                                a.data() + r * S, b, T, C);
      }
      const DBuf gu = dev(u), ga = dev(a), gdy = dev(dy);
      DBuf gy = poisoned(n), gdu = poisoned(n), gda = dev(prior_da);
      cuda::short_conv_forward(gy.data(), gu.data(), ga.data(), B, T, C, Runs{R, S});
      cuda::short_conv_backward(gdu.data(), gda.data(), gdy.data(), gu.data(), ga.data(), B, T, C,
                                Runs{R, S});
      check_fwd("short_conv y" + shape, host(gy), y);
      check_grad("short_conv du" + shape, host(gdu), du);
      check_grad("short_conv da +=" + shape, host(gda), da);
    }
  }
}

TEST_CASE("stacked cuda bias: add_bias and bias_backward per run", "[cuda][runs]") {
  // rows per run n by H: 64-row chunks inside a run, H over one block of threads
  const std::array<std::pair<int, int>, 4> shapes = {{{1, 1}, {7, 3}, {100, 16}, {1000, 130}}};
  for (auto [n, H] : shapes) {
    for (int pad : kPads) {
      const int N = R * n;
      const int64_t S = H + pad;  // b (H) per run at b + r·S
      const auto shape = fmt::format(" n={} H={} stride={}", n, H, S);
      const FVec z = frand(N * H, 31), b = frand(R * S, 32), dz = frand(N * H, 33),
                 prior_db = frand(R * S, 34);
      FVec zb = z, db = prior_db;
      for (int r = 0; r < R; ++r) {
        const int64_t i = int64_t(r) * n;
        pb::add_bias(zb.data() + i * H, b.data() + r * S, n, H);
        pb::bias_backward(db.data() + r * S, dz.data() + i * H, n, H);
      }
      const DBuf gb = dev(b), gdz = dev(dz);
      DBuf gz = dev(z), gdb = dev(prior_db);
      cuda::add_bias(gz.data(), gb.data(), N, H, Runs{R, S});
      cuda::bias_backward(gdb.data(), gdz.data(), N, H, Runs{R, S});
      check_fwd("add_bias z" + shape, host(gz), zb);
      check_grad("bias_backward db +=" + shape, host(gdb), db);
    }
  }
}

TEST_CASE("stacked cuda ops with one run are the unstacked ops, bit for bit", "[cuda][runs]") {
  // Runs{1, stride}: the only run's copy is at the pointer itself, whatever the stride.
  const Runs one{1, 12345};
  const int N = 130, K = 50, M = 24, C = 128, V = 64, H = 16, B = 2, T = 65, Ne = 40;
  const FVec x = frand(N * K, 40), w = frand(K * M, 41), dy = frand(N * M, 42);
  const FVec xc = frand(N * C, 43), g = frandu(C, 44, 0.5, 1.5), dyc = frand(N * C, 45);
  const FVec logits = frand(N * V, 46, 3.0), loss = frandu(N, 47, 0.0, 10.0), sc = {0.37f};
  const FVec a = frand(3 * C, 48, 0.7), zero_kc(K * M, 0.f), zero_c(3 * C, 0.f);
  auto targets = random_tokens(N, V, 49);
  for (int i = 1; i < N; i += 3) targets[i] = -1;
  std::vector<int32_t> tokens(Ne);  // distinct: the embedding's atomics add once per entry
  for (int i = 0; i < Ne; ++i) tokens[i] = int32_t(i * 7 % V);
  const DBuf gx = dev(x), gw = dev(w), gdy = dev(dy), gxc = dev(xc), gg = dev(g), gdyc = dev(dyc);
  const DBuf glogits = dev(logits), gloss = dev(loss), gsc = dev(sc), ga = dev(a);
  const auto gtargets = to_device(targets), gtokens = to_device(tokens);
  // Every op's outputs, called with Runs{1, stride} (stacked) or without a Runs. Inputs of other
  // shapes are prefixes of xc, dyc: the table (V, C), u (B, T, C), the bias (H), dz (N, H).
  auto outputs = [&](bool stacked) {
    const Runs r = stacked ? one : Runs{};
    DBuf y(N * M), dx(N * K), dw = dev(zero_kc), yc(N * C), rstd(N), dxc(N * C);
    DBuf dg = dev(FVec(C, 0.f)), emb(Ne * C), dtable = dev(FVec(V * C, 0.f)), dl(N * V), mean(1),
         scale(1);
    DBuf cy(B * T * C), cdu(B * T * C), cda = dev(zero_c);
    DBuf z = dev(FVec(xc.begin(), xc.begin() + N * H)), db = dev(FVec(H, 0.f));
    cuda::matmul_forward(y.data(), gx.data(), gw.data(), N, K, M, GradMode::Overwrite, r);
    cuda::matmul_backward(dx.data(), dw.data(), gdy.data(), gx.data(), gw.data(), N, K, M,
                          GradMode::Overwrite, r);
    cuda::rmsnorm_forward(yc.data(), rstd.data(), gxc.data(), gg.data(), N, C, kRmsEps, r);
    cuda::rmsnorm_backward(dxc.data(), dg.data(), gdyc.data(), gxc.data(), rstd.data(), gg.data(),
                           N, C, GradMode::Overwrite, r);
    cuda::embedding_forward(emb.data(), gtokens.data(), gxc.data(), Ne, C, r);
    cuda::embedding_backward(dtable.data(), gdyc.data(), gtokens.data(), Ne, C, r);
    cuda::loss_mean(mean.data(), scale.data(), gloss.data(), gtargets.data(), N, r);
    cuda::cross_entropy_backward(dl.data(), glogits.data(), gtargets.data(), N, V, gsc.data(), r);
    cuda::short_conv_forward(cy.data(), gxc.data(), ga.data(), B, T, C, r);
    cuda::short_conv_backward(cdu.data(), cda.data(), gdyc.data(), gxc.data(), ga.data(), B, T, C, r);
    cuda::add_bias(z.data(), gdyc.data(), N, H, r);
    cuda::bias_backward(db.data(), gdyc.data(), N, H, r);
    FVec all;
    for (const DBuf* d : {&y, &dx, &dw, &yc, &rstd, &dxc, &dg, &emb, &dtable, &dl, &mean, &scale,
                          &cy, &cdu, &cda, &z, &db}) {
      const FVec h = host(*d);
      all.insert(all.end(), h.begin(), h.end());
    }
    return all;
  };
  const FVec plain = outputs(false);
  for (float v : plain) CHECK(std::isfinite(v));
  require_identical("Runs{1, stride} vs unstacked", outputs(true), plain);
}

TEST_CASE("stacked cuda ops refuse rows that do not split evenly over the runs", "[cuda][runs]") {
  const Runs runs{R, 100};
  const GradMode ow = GradMode::Overwrite;
  // N = 10 rows (B = 4 sequences) over 3 runs; nothing is launched, so null buffers do
  CHECK_THROWS_WITH(cuda::matmul_forward(nullptr, nullptr, nullptr, 10, 4, 4, ow, runs),
                    "matmul_forward: 10 rows do not split evenly over 3 stacked runs");
  CHECK_THROWS_AS(cuda::matmul_backward(nullptr, nullptr, nullptr, nullptr, nullptr, 10, 4, 4, ow,
                                        runs),
                  Error);
  CHECK_THROWS_AS(cuda::rmsnorm_forward(nullptr, nullptr, nullptr, nullptr, 10, 8, kRmsEps, runs),
                  Error);
  CHECK_THROWS_AS(cuda::rmsnorm_backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 10,
                                         8, ow, runs),
                  Error);
  CHECK_THROWS_AS(cuda::embedding_forward(nullptr, nullptr, nullptr, 10, 8, runs), Error);
  CHECK_THROWS_AS(cuda::embedding_backward(nullptr, nullptr, nullptr, 10, 8, runs), Error);
  CHECK_THROWS_AS(cuda::cross_entropy_backward(nullptr, nullptr, nullptr, 10, 8, nullptr, runs),
                  Error);
  CHECK_THROWS_AS(cuda::loss_mean(nullptr, nullptr, nullptr, nullptr, 10, runs), Error);
  CHECK_THROWS_AS(cuda::short_conv_forward(nullptr, nullptr, nullptr, 4, 5, 8, runs), Error);
  CHECK_THROWS_AS(cuda::short_conv_backward(nullptr, nullptr, nullptr, nullptr, nullptr, 4, 5, 8,
                                            runs),
                  Error);
  CHECK_THROWS_AS(cuda::add_bias(nullptr, nullptr, 10, 4, runs), Error);
  CHECK_THROWS_AS(cuda::bias_backward(nullptr, nullptr, 10, 4, runs), Error);
  CHECK_THROWS_AS(cuda::loss_mean(nullptr, nullptr, nullptr, nullptr, 9, Runs{0, 0}), Error);
  cuda::synchronize();
}

TEST_CASE("stacked cuda matmul at precision bf16 near the fp32 reference per run",
          "[cuda][runs][bf16]") {
  struct RestorePrecision {  // even when a REQUIRE throws
    cuda::Precision saved = cuda::precision();
    ~RestorePrecision() { cuda::set_precision(saved); }
  };
  REQUIRE(cuda::precision() == cuda::Precision::FP32);
  {
    const RestorePrecision restore;
    cuda::set_precision(cuda::Precision::BF16);
    const std::array<std::array<int, 3>, 2> shapes = {{{45, 64, 40}, {100, 301, 67}}};
    for (auto [n, K, M] : shapes) {
      for (int pad : kPads) {
        const int N = R * n;
        const int64_t S = int64_t(K) * M + pad;
        const auto shape = fmt::format(" n={} K={} M={} stride={}", n, K, M, S);
        const FVec x = frand(N * K, 51), w = frand(R * S, 52), dy = frand(N * M, 53);
        FVec y(N * M), dx(N * K), dw(R * S, 0.f);
        for (int r = 0; r < R; ++r) {
          const int64_t i = int64_t(r) * n;
          pb::matmul_forward(y.data() + i * M, x.data() + i * K, w.data() + r * S, n, K, M);
          pb::matmul_backward(dx.data() + i * K, dw.data() + r * S, dy.data() + i * M,
                              x.data() + i * K, w.data() + r * S, n, K, M, GradMode::Overwrite);
        }
        const DBuf gx = dev(x), gw = dev(w), gdy = dev(dy);
        DBuf gy = poisoned(N * M), gdx = poisoned(N * K), gdw = dev(FVec(R * S, 0.f));
        cuda::matmul_forward(gy.data(), gx.data(), gw.data(), N, K, M, GradMode::Overwrite,
                             Runs{R, S});
        cuda::matmul_backward(gdx.data(), gdw.data(), gdy.data(), gx.data(), gw.data(), N, K, M,
                              GradMode::Overwrite, Runs{R, S});
        auto check_bf16 = [&](const std::string& name, const FVec& got, const FVec& want) {
          const double err = rel_rms(got, want);
          INFO("bf16 matmul " << name << shape << ": relative RMS " << err);
          CHECK(err <= kBf16Tol);
          if (S % 4 == 0) CHECK(err > kFp32Tol);
        };
        check_bf16("y", host(gy), y);
        check_bf16("dx", host(gdx), dx);
        check_bf16("dw", host(gdw), dw);
      }
    }
  }
  CHECK(cuda::precision() == cuda::Precision::FP32);
}
