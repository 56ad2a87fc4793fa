// Histogram metrics, the exact binomial sampler (inversion / Knuth's beta splitting over
// Marsaglia–Tsang Gamma draws, all from pb::Rng), multinomial resampling and the nested bootstrap.
#include "runners/bootstrap.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace pb {
namespace {

// Below this mean n * p (p <= 1/2) the cdf walk of inversion is cheaper than another split.
constexpr double kInversionMean = 16;

// Gamma(a, 1) for a >= 1 (Marsaglia–Tsang 2000): d = a - 1/3, c = 1 / sqrt(9 d), x ~ N(0, 1),
// v = (1 + c x)^3; accept d v when v > 0 and u < 1 - 0.0331 x^4 (squeeze) or
// log u < x^2 / 2 + d (1 - v + log v).
double gamma(Rng& rng, double a) {
  const double d = a - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = rng.normal(), w = 1.0 + c * x;
    if (w <= 0) continue;
    const double v = w * w * w, u = rng.uniform(), x2 = x * x;
    if (u < 1.0 - 0.0331 * x2 * x2) return d * v;
    if (std::log(u) < 0.5 * x2 + d * (1.0 - v + std::log(v))) return d * v;
  }
}

// Beta(a, b) = G_a / (G_a + G_b) with independent Gamma(a, 1), Gamma(b, 1).
double beta(Rng& rng, double a, double b) {
  const double ga = gamma(rng, a);
  return ga / (ga + gamma(rng, b));
}

// Binomial(n, p), p <= 1/2, by walking the cdf: f_0 = (1-p)^n, f_{k+1} = f_k (n-k)/(k+1) p/(1-p);
// returns the first k with u < f_0 + ... + f_k. A u left over by round-off in the pmf sum (f
// reaches 0 past k = n) is redrawn.
int64_t binomial_inversion(Rng& rng, int64_t n, double p) {
  const double odds = p / (1 - p), f0 = std::exp(double(n) * std::log1p(-p));
  for (;;) {
    double u = rng.uniform(), f = f0;
    for (int64_t k = 0; f > 0; ++k) {
      if (u < f) return k;
      u -= f;
      f *= odds * double(n - k) / double(k + 1);
    }
  }
}

// Quantile t of sorted x by linear interpolation (type 7): h = (R-1) t, k = floor(h),
// x[k] + (h - k) (x[k+1] - x[k]).
double quantile(const std::vector<double>& x, double t) {
  const double h = double(x.size() - 1) * t;
  const size_t k = std::min(size_t(h), x.size() - 1);
  if (k + 1 == x.size()) return x[k];
  return x[k] + (h - double(k)) * (x[k + 1] - x[k]);
}

void check_hist(const SeqHist& h, size_t seed) {
  for (const SeqBin& b : h)
    if (b.count < 0 || b.wrong < 0 || b.wrong > b.scored)
      fail("nested_bootstrap: seed {} has a bin with wrong = {}, scored = {}, count = {}; need count >= 0 and "
           "0 <= wrong <= scored",
           seed, b.wrong, b.scored, b.count);
}

}  // namespace

bool parse_hist_metric(const std::string& name, HistMetric& out) {
  if (name == "acc") out = HistMetric::acc;
  else if (name == "error_rate") out = HistMetric::error_rate;
  else if (name == "seq_acc") out = HistMetric::seq_acc;
  else return false;
  return true;
}

double hist_metric(const SeqHist& h, HistMetric m) {
  int64_t num = 0, den = 0;
  for (const SeqBin& b : h) {
    switch (m) {
      case HistMetric::acc: num += b.count * (b.scored - b.wrong), den += b.count * b.scored; break;
      case HistMetric::error_rate: num += b.count * b.wrong, den += b.count * b.scored; break;
      case HistMetric::seq_acc:
        if (b.scored > 0) num += b.wrong == 0 ? b.count : 0, den += b.count;
        break;
    }
  }
  return den > 0 ? double(num) / double(den) : 0.0;
}

int64_t binomial(Rng& rng, int64_t n, double p) {
  if (n < 0 || !(p >= 0 && p <= 1)) fail("binomial: need n >= 0 and p in [0, 1], got n = {}, p = {}", n, p);
  // The draw is base + sign * Binomial(n, p); each split roughly halves n.
  int64_t base = 0, sign = 1;
  for (;;) {
    if (p > 0.5) base += sign * n, sign = -sign, p = 1 - p;
    if (double(n) * p < kInversionMean) return base + sign * binomial_inversion(rng, n, p);
    const int64_t a = 1 + n / 2, b = n + 1 - a;
    const double x = beta(rng, double(a), double(b));  // the a-th smallest of n uniforms
    if (x >= p) {
      n = a - 1, p = p / x;
    } else {
      base += sign * a, n = b - 1, p = (p - x) / (1 - x);
    }
  }
}

SeqHist resample(Rng& rng, const SeqHist& h) {
  int64_t total = 0;  // original count of the bins not yet drawn
  for (const SeqBin& b : h) {
    if (b.count < 0) fail("resample: bin count {} is negative", b.count);
    total += b.count;
  }
  int64_t left = total;  // sequences not yet placed
  SeqHist out = h;
  for (SeqBin& b : out) {
    const int64_t k = b.count == 0 ? 0 : binomial(rng, left, double(b.count) / double(total));
    total -= b.count, left -= k, b.count = k;
  }
  return out;
}

Interval nested_bootstrap(const std::vector<SeqHist>& seeds, HistMetric m, int replicates, uint64_t rng_seed,
                          double level) {
  if (seeds.empty()) fail("nested_bootstrap: no seeds; need at least one histogram");
  if (replicates < 1) fail("nested_bootstrap: replicates = {}; need at least 1", replicates);
  if (!(level > 0 && level < 1)) fail("nested_bootstrap: level = {}; need 0 < level < 1", level);
  for (size_t i = 0; i < seeds.size(); ++i) check_hist(seeds[i], i);
  const uint32_t k = static_cast<uint32_t>(seeds.size());
  std::vector<double> reps(static_cast<size_t>(replicates));
  for (int r = 0; r < replicates; ++r) {
    Rng rng(rng_seed, stream_id("bootstrap"), uint64_t(r));
    double sum = 0;
    for (uint32_t i = 0; i < k; ++i) sum += hist_metric(resample(rng, seeds[rng.below(k)]), m);
    reps[size_t(r)] = sum / k;
  }
  std::sort(reps.begin(), reps.end());
  return {quantile(reps, (1 - level) / 2), quantile(reps, (1 + level) / 2)};
}

}  // namespace pb
