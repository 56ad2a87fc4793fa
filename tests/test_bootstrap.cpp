// The bootstrap module: the exact binomial sampler (moments within 5 standard errors, exact pmf by
// chi-square), multinomial resampling of histograms, histogram metrics by hand, and the nested
// bootstrap's determinism, degenerate cases, agreement with the Wald interval and seed spread.
// [.bench] times nested_bootstrap at its intended size.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <ctime>

#include "core/error.h"
#include "runners/bootstrap.h"

using pb::HistMetric;
using pb::SeqHist;

namespace {

pb::Rng test_rng(uint64_t seed) { return pb::Rng(seed, pb::stream_id("test_bootstrap"), 0); }

struct Moments {
  double mean = 0, var = 0;
};

Moments moments(const std::vector<double>& x) {
  Moments m;
  for (double v : x) m.mean += v;
  m.mean /= double(x.size());
  for (double v : x) m.var += (v - m.mean) * (v - m.mean);
  m.var /= double(x.size() - 1);
  return m;
}

// Binomial central moments: variance n p q, fourth n p q (1 + 3 (n-2) p q).
double binom_mu4(double n, double p) { return n * p * (1 - p) * (1 + 3 * (n - 2) * p * (1 - p)); }

double binom_pmf(int64_t n, double p, int64_t k) {
  const double lc = std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(double(n - k) + 1.0);
  return std::exp(lc + k * std::log(p) + double(n - k) * std::log1p(-p));
}

// Pearson chi-square of `draws` Binomial(n, p) samples against the pmf; cells with expected
// count < 5 are pooled into their neighbour towards the mode. Returns {statistic, degrees of freedom}.
std::pair<double, int> binomial_chi2(int64_t n, double p, int draws, uint64_t seed) {
  std::vector<double> observed(size_t(n + 1)), expected(size_t(n + 1));
  pb::Rng rng = test_rng(seed);
  for (int i = 0; i < draws; ++i) observed[size_t(pb::binomial(rng, n, p))] += 1;
  for (int64_t k = 0; k <= n; ++k) expected[size_t(k)] = draws * binom_pmf(n, p, k);
  std::vector<std::pair<double, double>> cells;  // (observed, expected)
  double o = 0, e = 0;
  for (int64_t k = 0; k <= n; ++k) {  // left to right; the last cell absorbs a small tail
    o += observed[size_t(k)], e += expected[size_t(k)];
    if (e >= 5) cells.push_back({o, e}), o = e = 0;
  }
  cells.back().first += o, cells.back().second += e;
  double chi2 = 0;
  for (auto [co, ce] : cells) chi2 += (co - ce) * (co - ce) / ce;
  return {chi2, int(cells.size()) - 1};
}

// One seed of `n` sequences with one scored target each, `wrong` of them wrong.
SeqHist bernoulli_seed(int64_t n, int64_t wrong) { return {{1, 1, wrong}, {0, 1, n - wrong}}; }

}  // namespace

TEST_CASE("binomial: mean and variance match n p and n p (1-p) within 5 standard errors", "[bootstrap]") {
  struct Case {
    int64_t n;
    double p;
  };
  // Inversion (n p < 16), Knuth splitting, and p > 1/2 through symmetry.
  const Case cases[] = {{1000000, 0.3}, {327680, 1e-5}, {50, 0.5},     {1000, 0.7},
                        {100, 0.1},     {40, 0.45},     {10000000, 0.5}, {20, 0.95}};
  const int draws = 40000;
  for (const Case& c : cases) {
    INFO("n = " << c.n << ", p = " << c.p);
    pb::Rng rng = test_rng(uint64_t(c.n) + 7);
    std::vector<double> x(draws);
    for (double& v : x) {
      const int64_t k = pb::binomial(rng, c.n, c.p);
      REQUIRE(k >= 0);
      REQUIRE(k <= c.n);
      v = double(k);
    }
    const Moments m = moments(x);
    const double var = double(c.n) * c.p * (1 - c.p);
    CHECK(std::abs(m.mean - double(c.n) * c.p) < 5 * std::sqrt(var / draws));
    CHECK(std::abs(m.var - var) < 5 * std::sqrt((binom_mu4(double(c.n), c.p) - var * var) / draws));
  }
}

TEST_CASE("binomial: p = 0, p = 1 and n = 0 are exact, bad arguments throw", "[bootstrap]") {
  pb::Rng rng = test_rng(1);
  for (int i = 0; i < 100; ++i) {
    CHECK(pb::binomial(rng, 1000, 0.0) == 0);
    CHECK(pb::binomial(rng, 1000, 1.0) == 1000);
    CHECK(pb::binomial(rng, 0, 0.4) == 0);
    CHECK(pb::binomial(rng, 10000000, 1.0) == 10000000);
  }
  CHECK_THROWS_AS(pb::binomial(rng, -1, 0.5), pb::Error);
  CHECK_THROWS_AS(pb::binomial(rng, 10, 1.5), pb::Error);
  CHECK_THROWS_AS(pb::binomial(rng, 10, std::nan("")), pb::Error);
}

TEST_CASE("binomial: small cases match the exact pmf (chi-square)", "[bootstrap]") {
  struct Case {
    int64_t n;
    double p;
  };
  // Inversion, inversion after symmetry, one or more beta splits, splits after symmetry.
  const Case cases[] = {{10, 0.3}, {20, 0.9}, {50, 0.5}, {40, 0.45}, {200, 0.2}, {300, 0.75}};
  for (const Case& c : cases) {
    const auto [chi2, dof] = binomial_chi2(c.n, c.p, 200000, uint64_t(c.n) * 31);
    INFO("n = " << c.n << ", p = " << c.p << ": chi2 = " << chi2 << " on " << dof << " dof");
    // mean dof, sd sqrt(2 dof): dof + 5 sd is beyond the 0.9999 quantile for these dof.
    CHECK(chi2 < dof + 5 * std::sqrt(2.0 * dof));
  }
}

TEST_CASE("resample: keeps the total and the bins, and bin counts have multinomial means and variances",
          "[bootstrap]") {
  const SeqHist h = {{0, 8, 3000}, {1, 8, 500}, {2, 8, 0}, {3, 8, 40}, {8, 8, 2}, {0, 0, 458}};
  const double total = 4000;
  const int reps = 20000;
  pb::Rng rng = test_rng(2);
  std::vector<std::vector<double>> counts(h.size(), std::vector<double>(reps));
  for (int r = 0; r < reps; ++r) {
    const SeqHist s = pb::resample(rng, h);
    REQUIRE(s.size() == h.size());
    int64_t sum = 0;
    for (size_t i = 0; i < h.size(); ++i) {
      REQUIRE(s[i].wrong == h[i].wrong);
      REQUIRE(s[i].scored == h[i].scored);
      REQUIRE(s[i].count >= 0);
      counts[i][size_t(r)] = double(s[i].count);
      sum += s[i].count;
    }
    REQUIRE(sum == int64_t(total));
  }
  CHECK(counts[2] == std::vector<double>(reps, 0.0));  // an empty bin stays empty
  for (size_t i = 0; i < h.size(); ++i) {
    if (h[i].count == 0) continue;
    INFO("bin " << i);
    const double p = double(h[i].count) / total, var = total * p * (1 - p);
    const Moments m = moments(counts[i]);
    CHECK(std::abs(m.mean - double(h[i].count)) < 5 * std::sqrt(var / reps));
    CHECK(std::abs(m.var - var) < 5 * std::sqrt((binom_mu4(total, p) - var * var) / reps));
  }
}

TEST_CASE("hist_metric: exact values on hand-made histograms, and parse_hist_metric", "[bootstrap]") {
  // 20 sequences of 4 targets: 10 all right, 5 with 1 wrong, 5 all wrong; 25 of 80 targets wrong.
  const SeqHist h = {{0, 4, 10}, {1, 4, 5}, {4, 4, 5}};
  CHECK(pb::hist_metric(h, HistMetric::error_rate) == 25.0 / 80.0);
  CHECK(pb::hist_metric(h, HistMetric::acc) == 55.0 / 80.0);
  CHECK(pb::hist_metric(h, HistMetric::seq_acc) == 0.5);
  // Pooled, not averaged per sequence: 2 of 10 targets wrong, though the two sequences average 0.5;
  // a bin with count 0 adds nothing.
  const SeqHist pooled = {{0, 8, 1}, {3, 3, 0}, {2, 2, 1}};
  CHECK(pb::hist_metric(pooled, HistMetric::error_rate) == 2.0 / 10.0);
  CHECK(pb::hist_metric(pooled, HistMetric::acc) == 8.0 / 10.0);
  // Sequences with nothing scored count for no metric.
  const SeqHist unscored = {{0, 0, 7}, {0, 3, 1}, {1, 3, 1}};
  CHECK(pb::hist_metric(unscored, HistMetric::seq_acc) == 0.5);
  CHECK(pb::hist_metric(unscored, HistMetric::acc) == 5.0 / 6.0);
  for (HistMetric m : {HistMetric::acc, HistMetric::error_rate, HistMetric::seq_acc}) {
    CHECK(pb::hist_metric({}, m) == 0.0);
    CHECK(pb::hist_metric({{0, 0, 5}, {0, 3, 0}}, m) == 0.0);
  }
  HistMetric m = HistMetric::acc;
  CHECK(pb::parse_hist_metric("seq_acc", m));
  CHECK(m == HistMetric::seq_acc);
  CHECK(pb::parse_hist_metric("error_rate", m));
  CHECK(m == HistMetric::error_rate);
  CHECK(pb::parse_hist_metric("acc", m));
  CHECK(m == HistMetric::acc);
  CHECK_FALSE(pb::parse_hist_metric("ACC", m));
  CHECK_FALSE(pb::parse_hist_metric("", m));
  CHECK_FALSE(pb::parse_hist_metric("accuracy", m));
  CHECK(m == HistMetric::acc);  // untouched on failure
}

TEST_CASE("nested_bootstrap: a pure function of its arguments, with lo <= hi", "[bootstrap]") {
  const std::vector<SeqHist> seeds = {bernoulli_seed(5000, 400), bernoulli_seed(5000, 600),
                                      {{0, 4, 3000}, {2, 4, 1000}, {4, 4, 10}}};
  for (HistMetric m : {HistMetric::acc, HistMetric::error_rate, HistMetric::seq_acc}) {
    const pb::Interval a = pb::nested_bootstrap(seeds, m, 500, 11), b = pb::nested_bootstrap(seeds, m, 500, 11);
    const pb::Interval c = pb::nested_bootstrap(seeds, m, 500, 12);
    CHECK(a.lo == b.lo);
    CHECK(a.hi == b.hi);
    CHECK((a.lo != c.lo || a.hi != c.hi));
    CHECK(a.lo <= a.hi);
    const pb::Interval narrow = pb::nested_bootstrap(seeds, m, 500, 11, 0.5);
    CHECK(a.lo <= narrow.lo);
    CHECK(narrow.lo <= narrow.hi);
    CHECK(narrow.hi <= a.hi);
  }
}

TEST_CASE("nested_bootstrap: seeds without errors give [0, 0] error rate and [1, 1] accuracy", "[bootstrap]") {
  const std::vector<SeqHist> seeds = {{{0, 5, 1000}, {0, 9, 20}}, {{0, 1, 300000}}, {{0, 2, 1}}};
  for (auto [m, v] : {std::pair{HistMetric::error_rate, 0.0}, {HistMetric::acc, 1.0}, {HistMetric::seq_acc, 1.0}}) {
    const pb::Interval i = pb::nested_bootstrap(seeds, m, 200, 3);
    CHECK(i.lo == v);
    CHECK(i.hi == v);
  }
}

TEST_CASE("nested_bootstrap: one seed of Bernoulli outcomes gives about the Wald interval", "[bootstrap]") {
  for (auto [n, p] : {std::pair{int64_t(10000), 0.2}, {int64_t(100000), 0.05}, {int64_t(2000), 0.5}}) {
    const pb::Interval i = pb::nested_bootstrap({bernoulli_seed(n, int64_t(p * double(n)))},
                                                HistMetric::error_rate, 4000, 5);
    const double half = 1.96 * std::sqrt(p * (1 - p) / double(n));
    INFO("n = " << n << ", p = " << p << ": [" << i.lo << ", " << i.hi << "], Wald half-width " << half);
    CHECK(std::abs(i.lo - (p - half)) < 0.15 * half);
    CHECK(std::abs(i.hi - (p + half)) < 0.15 * half);
  }
}

TEST_CASE("nested_bootstrap: seeds with different rates give an interval set by the seed spread",
          "[bootstrap]") {
  const int64_t n = 100000;
  const std::vector<SeqHist> seeds = {bernoulli_seed(n, n / 10), bernoulli_seed(n, n / 5),
                                      bernoulli_seed(n, 3 * n / 10)};
  const pb::Interval all = pb::nested_bootstrap(seeds, HistMetric::error_rate, 2000, 9);
  INFO("[" << all.lo << ", " << all.hi << "]");
  double widest_within = 0;
  for (const SeqHist& s : seeds) {
    const pb::Interval one = pb::nested_bootstrap({s}, HistMetric::error_rate, 2000, 9);
    widest_within = std::max(widest_within, one.hi - one.lo);
  }
  CHECK(all.hi - all.lo > 20 * widest_within);
  // Within [0.1, 0.3] up to the within-seed noise (sd sqrt(0.09 / n) < 0.001 at the ends).
  CHECK(all.lo >= 0.1 - 0.003);
  CHECK(all.hi <= 0.3 + 0.003);
  // P(all three draws are the 0.1 seed) = 1/27 > 2.5%, so the ends sit near the extreme seeds.
  CHECK(all.lo < 0.12);
  CHECK(all.hi > 0.28);
}

TEST_CASE("nested_bootstrap: bad arguments throw pb::Error", "[bootstrap]") {
  const std::vector<SeqHist> one = {bernoulli_seed(100, 10)};
  CHECK_THROWS_AS(pb::nested_bootstrap({}, HistMetric::acc, 100, 1), pb::Error);
  CHECK_THROWS_AS(pb::nested_bootstrap(one, HistMetric::acc, 0, 1), pb::Error);
  CHECK_THROWS_AS(pb::nested_bootstrap(one, HistMetric::acc, 100, 1, 1.0), pb::Error);
  CHECK_THROWS_AS(pb::nested_bootstrap(one, HistMetric::acc, 100, 1, 0.0), pb::Error);
  CHECK_THROWS_AS(pb::nested_bootstrap({{{3, 2, 5}}}, HistMetric::acc, 100, 1), pb::Error);
  CHECK_THROWS_AS(pb::nested_bootstrap({{{0, 2, -5}}}, HistMetric::acc, 100, 1), pb::Error);
}

TEST_CASE("bench: nested_bootstrap, 3 seeds x 2000 replicates x 327,680 sequences in 20 bins", "[.bench]") {
  std::vector<SeqHist> seeds;
  for (int s = 0; s < 3; ++s) {
    SeqHist h = {{0, 64, 300000 - 5000 * s}};
    int64_t rest = 327680 - h[0].count;
    for (int w = 1; w < 20; ++w) {  // roughly geometric tail; the last bin takes what is left
      const int64_t c = w == 19 ? rest : rest / 3;
      h.push_back({w, 64, c});
      rest -= c;
    }
    seeds.push_back(h);
  }
  for (HistMetric m : {HistMetric::error_rate, HistMetric::seq_acc}) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    const pb::Interval i = pb::nested_bootstrap(seeds, m, 2000, 1);
    const double cpu = double(std::clock() - c0) / CLOCKS_PER_SEC;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("nested_bootstrap {}: [{:.6f}, {:.6f}] in {:.3f} s wall, {:.3f} s cpu\n",
               m == HistMetric::seq_acc ? "seq_acc" : "error_rate", i.lo, i.hi, wall, cpu);
  }
}
