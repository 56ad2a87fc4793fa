// Shared by the encodings built on causal softmax attention (nope, rope, alibi, fox).
#pragma once
#include <cmath>

#include "kernels/ops.h"
#include "models/position/position_encoding.h"

namespace pb {

template <class S>
SoftmaxAttentionArgs softmax_args(const AttnInputs<S>& in) {
  return {{in.B, in.T, in.dims.H, in.dims.D}, 1.0 / std::sqrt(double(in.dims.D))};
}

}  // namespace pb
