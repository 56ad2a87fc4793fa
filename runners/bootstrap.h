// Bootstrap confidence intervals for evaluation metrics: per-sequence outcome histograms, their
// metrics, an exact binomial sampler on pb::Rng (identical on every machine), multinomial
// resampling of a histogram, and the nested (seeds, then sequences) percentile bootstrap.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"

namespace pb {

// Sequences of one evaluation grouped by outcome: `count` sequences had `wrong` of their `scored` targets wrong.
struct SeqBin {
  int64_t wrong = 0, scored = 0, count = 0;
};
using SeqHist = std::vector<SeqBin>;

// acc = sum(count * (scored - wrong)) / sum(count * scored);
// error_rate = sum(count * wrong) / sum(count * scored) (both pooled over sequences);
// seq_acc = sum(count where wrong == 0) / sum(count), over sequences with scored > 0.
enum class HistMetric { acc, error_rate, seq_acc };

// Parses "acc" | "error_rate" | "seq_acc"; returns false for anything else.
bool parse_hist_metric(const std::string& name, HistMetric& out);

// The metric of `h`; 0 when there is nothing scored (the denominator is 0).
double hist_metric(const SeqHist& h, HistMetric m);

struct Interval {
  double lo = 0, hi = 0;
};

// Exact binomial draw, n >= 0, p in [0,1] (pb::Error otherwise). Inversion (sequential pmf search)
// when n * min(p, 1-p) < 16, else Knuth's beta splitting (TAOCP vol. 2, 3.4.1): a = 1 + n/2,
// b = n + 1 - a, X ~ Beta(a, b); X >= p -> Binomial(a - 1, p / X), else
// a + Binomial(b - 1, (p - X) / (1 - X)); Beta from two Marsaglia–Tsang Gamma draws; p > 1/2 uses
// n - Binomial(n, 1 - p). Expected cost O(log(n p)) Gamma draws plus at most ~16 pmf steps.
int64_t binomial(Rng& rng, int64_t n, double p);

// Multinomial resample of a histogram's sequences (same total count, same bins in the same order),
// by sequential conditional binomials: count_i ~ Binomial(remaining count, c_i / remaining c).
SeqHist resample(Rng& rng, const SeqHist& h);

// Nested percentile bootstrap of the mean over seeds of a metric. Replicate r (its own
// Rng(rng_seed, stream_id("bootstrap"), r)) draws seeds.size() seeds with replacement, resamples
// each drawn seed's sequences, and averages hist_metric over the drawn seeds. Returns the
// (1-level)/2 and (1+level)/2 quantiles of the sorted replicates x[0..R-1], by linear
// interpolation (type 7): q(t) = x[k] + (h - k) (x[k+1] - x[k]), h = (R - 1) t, k = floor(h).
// A pure function of its arguments. pb::Error when seeds is empty, replicates < 1 or level is
// outside (0, 1).
Interval nested_bootstrap(const std::vector<SeqHist>& seeds, HistMetric m, int replicates, uint64_t rng_seed,
                          double level = 0.95);

}  // namespace pb
