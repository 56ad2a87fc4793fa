// AdamW with decoupled weight decay (PyTorch's torch.optim.AdamW), after gradient-norm clipping
// g ← g · c, c = min(1, clip / ‖g‖) (torch.nn.utils.clip_grad_norm_ without its 1e-6):
//   p ← p − lr·wd·mask·p;  m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²
//   p ← p − lr · m̂ / (sqrt(v̂) + eps),  m̂ = m / (1 − β1^step),  v̂ = v / (1 − β2^step)
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/eigen.h"
#include "kernels/ops.h"

namespace pb {

// Fixed chunks summed in order: the result does not depend on the thread count.
template <class S>
void sum_squares(S* out, const S* x, int64_t n) {
  const int64_t n_chunks = (n + kParallelMin - 1) / kParallelMin;
  std::vector<double> part(n_chunks, 0.0);
#pragma omp parallel for schedule(static) if (n_chunks > 1)
  for (int64_t c = 0; c < n_chunks; ++c)
    for (int64_t i = c * kParallelMin; i < std::min(n, (c + 1) * kParallelMin); ++i) part[c] += double(x[i]) * x[i];
  double s = 0;
  for (double p : part) s += p;
  out[0] = S(s);
}

template <class S>
void adamw_update(S* params, S* m, S* v, const S* grads, const uint8_t* decay_mask, int64_t n,
                  const AdamWArgs& args, const S* grad_norm_sq) {
  const double norm = args.clip > 0 ? std::sqrt(double(grad_norm_sq[0])) : 0.0;
  const S c = S(norm > args.clip ? args.clip / norm : 1.0);                // clip factor
  const S b1 = S(args.beta1), b2 = S(args.beta2), eps = S(args.eps), lr = S(args.lr);
  const S inv_bc1 = S(1 / (1 - std::pow(args.beta1, double(args.step))));  // 1 / (1 − β1^step)
  const S inv_bc2 = S(1 / (1 - std::pow(args.beta2, double(args.step))));  // 1 / (1 − β2^step)
  const S decay = S(args.lr * args.weight_decay);                          // lr·wd
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    const S g = grads[i] * c;
    m[i] = b1 * m[i] + (S(1) - b1) * g;
    v[i] = b2 * v[i] + (S(1) - b2) * g * g;
    const S p = (!decay_mask || decay_mask[i]) ? params[i] * (S(1) - decay) : params[i];
    params[i] = p - lr * (m[i] * inv_bc1) / (std::sqrt(v[i] * inv_bc2) + eps);
  }
}

template void sum_squares<float>(float*, const float*, int64_t);
template void sum_squares<double>(double*, const double*, int64_t);
template void adamw_update<float>(float*, float*, float*, const float*, const uint8_t*, int64_t,
                                  const AdamWArgs&, const float*);
template void adamw_update<double>(double*, double*, double*, const double*, const uint8_t*,
                                   int64_t, const AdamWArgs&, const double*);

}  // namespace pb
