// SwiGLU gate: h = silu(a) ⊙ b with ab = [a | b] per row, silu(a) = a · σ(a).
#include "kernels/cpu/eigen.h"
#include "kernels/ops.h"

namespace pb {

template <class S>
void swiglu_forward(S* h, const S* ab, int N, int F) {
#pragma omp parallel for schedule(static) if (int64_t(N) * F >= kParallelMin)
  for (int n = 0; n < N; ++n) {
    const S* a = ab + int64_t(n) * 2 * F;  // (F)
    const S* b = a + F;                    // (F)
    S* hn = h + int64_t(n) * F;            // (F)
    for (int f = 0; f < F; ++f) hn[f] = a[f] * sigmoid(a[f]) * b[f];
  }
}

// da = dh · b · σ(a)(1 + a(1 − σ(a))),  db = dh · silu(a)
template <class S>
void swiglu_backward(S* dab, const S* dh, const S* ab, int N, int F) {
#pragma omp parallel for schedule(static) if (int64_t(N) * F >= kParallelMin)
  for (int n = 0; n < N; ++n) {
    const S* a = ab + int64_t(n) * 2 * F;  // (F)
    const S* b = a + F;                    // (F)
    const S* dhn = dh + int64_t(n) * F;    // (F)
    S* da = dab + int64_t(n) * 2 * F;      // (F)
    S* db = da + F;                        // (F)
    for (int f = 0; f < F; ++f) {
      const S s = sigmoid(a[f]);
      da[f] = dhn[f] * b[f] * s * (S(1) + a[f] * (S(1) - s));
      db[f] = dhn[f] * a[f] * s;
    }
  }
}

template void swiglu_forward<float>(float*, const float*, int, int);
template void swiglu_forward<double>(double*, const double*, int, int);
template void swiglu_backward<float>(float*, const float*, const float*, int, int);
template void swiglu_backward<double>(double*, const double*, const double*, int, int);

}  // namespace pb
