// Scalar functions shared by the ops and the encodings, stable for large |z|.
#pragma once
#include <algorithm>
#include <cmath>

namespace pb {

template <class S>
S sigmoid(S z) {  // σ(z) = 1 / (1 + e^(−z))
  return z >= 0 ? S(1) / (S(1) + std::exp(-z)) : std::exp(z) / (S(1) + std::exp(z));
}

template <class S>
S log_sigmoid(S z) {  // log σ(z) = min(z, 0) − log(1 + e^(−|z|))
  return std::min(z, S(0)) - std::log1p(std::exp(-std::abs(z)));
}

}  // namespace pb
