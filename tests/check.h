// Shared test helpers: deterministic random tensors, tensor comparison with the first mismatches
// printed, and central finite differences in double precision. Tolerances: tests/README.md.
#pragma once
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.h"

namespace pb::test {

// Values ~ N(0, std²) (or U(lo, hi)), a pure function of (seed, n).
inline std::vector<double> randn(size_t n, uint64_t seed, double std = 1.0) {
  Rng rng(seed, stream_id("test"), 0);
  std::vector<double> x(n);
  for (auto& v : x) v = std * rng.normal();
  return x;
}
inline std::vector<double> randu(size_t n, uint64_t seed, double lo, double hi) {
  Rng rng(seed, stream_id("test-u"), 0);
  std::vector<double> x(n);
  for (auto& v : x) v = lo + (hi - lo) * rng.uniform();
  return x;
}

// n tokens uniform in [0, V).
inline std::vector<int32_t> random_tokens(int n, int V, uint64_t seed) {
  Rng rng(seed, stream_id("tokens"), 0);
  std::vector<int32_t> t(n);
  for (auto& v : t) v = int32_t(rng.below(uint32_t(V)));
  return t;
}

// x with every row of D entries scaled to unit norm (PaTH's w).
inline std::vector<double> unit_rows(std::vector<double> x, int D) {
  for (size_t r = 0; r < x.size(); r += D) {
    double n2 = 0;
    for (int d = 0; d < D; ++d) n2 += x[r + d] * x[r + d];
    for (int d = 0; d < D; ++d) x[r + d] /= std::sqrt(n2);
  }
  return x;
}

template <class T>
std::vector<T> cast(const std::vector<double>& x) {
  return std::vector<T>(x.begin(), x.end());
}

// Relative RMS error ‖a − b‖ / ‖b‖ (b the reference; 0/0 counts as 0).
template <class VA, class VB>  // vectors of any element type and allocator
double rel_rms(const VA& a, const VB& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = double(a[i]) - double(b[i]);
    num += d * d;
    den += double(b[i]) * double(b[i]);
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Elementwise |a − b| ≤ atol + rtol·|b|; on failure prints the first mismatches and fails.
template <class A, class B>
void require_close(const std::string& what, const std::vector<A>& a, const std::vector<B>& b,
                   double rtol, double atol) {
  REQUIRE(a.size() == b.size());
  size_t bad = 0;
  double worst = 0;
  std::string report;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(double(a[i]) - double(b[i]));
    const bool ok = d <= atol + rtol * std::abs(double(b[i])) && std::isfinite(double(a[i]));
    worst = std::max(worst, d);
    if (!ok && bad++ < 5) report += fmt::format("\n  [{}] got {:.10g} want {:.10g}", i, double(a[i]), double(b[i]));
  }
  INFO(what << ": " << bad << " of " << a.size() << " mismatched (max abs diff " << worst << ")" << report);
  CHECK(bad == 0);
}

// Central finite differences of a scalar function of x, checked against `analytic` = dL/dx.
// Checks at most `max_entries` entries spread over x (all when x is small).
// Criterion: |analytic − numeric| ≤ 1e-7 + rtol·max(|analytic|, |numeric|).
// `precise` uses the 4-point stencil (truncation error O(eps⁴) instead of O(eps²)), for functions
// with large third derivatives (e.g. a whole model with PaTH's normalised w).
inline void check_gradient(const std::string& what, std::vector<double>& x,
                           const std::vector<double>& analytic,
                           const std::function<double()>& loss, double rtol = 1e-5,
                           size_t max_entries = 200, double eps = 1e-6, bool precise = false) {
  REQUIRE(x.size() == analytic.size());
  const size_t stride = std::max<size_t>(1, x.size() / max_entries);
  size_t bad = 0, n = 0;
  double worst = 0;
  std::string report;
  for (size_t i = 0; i < x.size(); i += stride, ++n) {
    const double saved = x[i];
    auto at = [&](double h) {
      x[i] = saved + h;
      const double l = loss();
      x[i] = saved;
      return l;
    };
    const double d1 = at(eps) - at(-eps);
    const double num = precise ? (8 * d1 - (at(2 * eps) - at(-2 * eps))) / (12 * eps) : d1 / (2 * eps);
    const double a = analytic[i];
    const double err = std::abs(a - num) / (1e-7 / rtol + std::max(std::abs(a), std::abs(num)));
    worst = std::max(worst, err);
    if (err > rtol && bad++ < 5) report += fmt::format("\n  [{}] analytic {:.10g} numeric {:.10g}", i, a, num);
  }
  INFO("gradient of " << what << ": " << bad << " of " << n << " entries off (worst rel err " << worst << ")" << report);
  CHECK(bad == 0);
}

// Σ x·y: the scalar loss L = ⟨dout, f(...)⟩ whose gradient is the op's backward given dout.
template <class T>
double dot(const std::vector<T>& x, const std::vector<double>& y) {
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += double(x[i]) * y[i];
  return s;
}

}  // namespace pb::test
