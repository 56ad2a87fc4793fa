// RoPE, rotate-half pairing (channel m with m + D/2), angle (offset + t)·base^(-2m/D).
// Derivation: kernels/README.md.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/ops.h"

namespace pb {
namespace {

// cos and sin of the angle (offset + t)·base^(-2m/D), computed in double, stored in S.
template <class S>
struct RopeTable {
  std::vector<S> cos, sin;  // (T, D/2)
};

template <class S>
RopeTable<S> rope_table(int T, int offset, int D, double base) {
  const int half = D / 2;
  RopeTable<S> table{std::vector<S>(size_t(T) * half), std::vector<S>(size_t(T) * half)};
  for (int m = 0; m < half; ++m) {
    // θ_m = base^(-2m/D)
    const double theta = std::pow(base, -2.0 * m / D);
    for (int t = 0; t < T; ++t) {
      const double angle = (offset + t) * theta;
      table.cos[size_t(t) * half + m] = S(std::cos(angle));
      table.sin[size_t(t) * half + m] = S(std::sin(angle));
    }
  }
  return table;
}

// Rotates every pair (m, m + D/2) of every (b, t, h) row by sign·angle(t, m); out may alias in.
template <class S>
void rotate(S* out,       // (B, T, H, D)
            const S* in,  // (B, T, H, D)
            const RopeArgs& args, S sign) {
  const int B = args.shape.B, T = args.shape.T, H = args.shape.H, D = args.shape.D;
  const int half = D / 2;
  const RopeTable<S> table = rope_table<S>(T, args.offset, D, args.base);
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const S* c = table.cos.data() + size_t(t) * half;  // (D/2)
      const S* s = table.sin.data() + size_t(t) * half;  // (D/2)
      for (int h = 0; h < H; ++h) {
        const int64_t row = ((int64_t(b) * T + t) * H + h) * D;
        for (int m = 0; m < half; ++m) {
          const S x1 = in[row + m], x2 = in[row + m + half], sn = sign * s[m];
          // out_m = x_m cos − x_{m+D/2} sin,  out_{m+D/2} = x_{m+D/2} cos + x_m sin
          out[row + m] = x1 * c[m] - x2 * sn;
          out[row + m + half] = x2 * c[m] + x1 * sn;
        }
      }
    }
  }
}

}  // namespace

template <class S>
void rope_forward(S* out, const S* in, const RopeArgs& args) {
  rotate(out, in, args, S(1));
}

// The rotation is orthogonal, so its transpose (the backward) is the rotation by −angle.
template <class S>
void rope_backward(S* din, const S* dout, const RopeArgs& args) {
  rotate(din, dout, args, S(-1));
}

template void rope_forward<float>(float*, const float*, const RopeArgs&);
template void rope_forward<double>(double*, const double*, const RopeArgs&);
template void rope_backward<float>(float*, const float*, const RopeArgs&);
template void rope_backward<double>(double*, const double*, const RopeArgs&);

}  // namespace pb
