// Attention at precision BF16 (runtime.h, `--precision bf16`): the fp32 entry points of
// softmax_attention.cu and path_launch.cu call these when precision() == Precision::BF16. Each
// has the fp32 op's signature and semantics: it rounds q, k, v (and in the backward dout and o) to
// bf16, runs the bf16 tensor-core op of attention_bf16.h, and widens o / dq / dk / dv back to fp32,
// as PyTorch's bf16 autocast would around its attention. lse, w, β, log_f and their gradients are
// fp32 throughout and are passed through untouched, and so are the bias table and its
// gradient. o, saved by the forward as the widened bf16
// result, rounds back to the same bf16 bits in the backward.
//
// The bf16 tensors live in scratch arena 1, because the bf16 ops use arena 0 themselves; like
// every arena it is sized by the first (eager) call and never allocates in a graph replay.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention_bf16.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "core/cuda/runtime.h"

namespace pb::cuda {
namespace {

constexpr int kArena = 1;  // runtime.h: precision wrappers

// The bf16 kernels take head dims 32, 64 and 128 only.
void check_head_dim(int D, const char* op) {
  if (D != 32 && D != 64 && D != 128)
    throw std::invalid_argument(std::string(op) + " at precision bf16: head dim (d_model / heads) must be 32, 64 or 128, got " +
                                std::to_string(D));
}

// The bf16 arguments of a forward, in scratch arena 1: q, k, v rounded from fp32, and o.
struct Forward16 {
  bf16_bits *q, *k, *v, *o;
  Forward16(const float* q32, const float* k32, const float* v32, int64_t n) {
    Carver cv{static_cast<char*>(scratch(4 * ((n * sizeof(bf16_bits) + 255) / 256 * 256), kArena))};
    q = cv.take<bf16_bits>(n), k = cv.take<bf16_bits>(n), v = cv.take<bf16_bits>(n), o = cv.take<bf16_bits>(n);
    to_bf16(q, q32, n);
    to_bf16(k, k32, n);
    to_bf16(v, v32, n);
  }
};

// The bf16 arguments of a backward, in scratch arena 1: dout, o, q, k, v rounded from fp32, and
// dq, dk, dv, widened back by `widen`.
struct Backward16 {
  bf16_bits *dout, *o, *q, *k, *v, *dq, *dk, *dv;
  int64_t n;
  Backward16(const float* dout32, const float* o32, const float* q32, const float* k32, const float* v32,
             int64_t n_)
      : n(n_) {
    Carver cv{static_cast<char*>(scratch(8 * ((n * sizeof(bf16_bits) + 255) / 256 * 256), kArena))};
    for (bf16_bits** p : {&dout, &o, &q, &k, &v, &dq, &dk, &dv}) *p = cv.take<bf16_bits>(n);
    to_bf16(dout, dout32, n);
    to_bf16(o, o32, n);
    to_bf16(q, q32, n);
    to_bf16(k, k32, n);
    to_bf16(v, v32, n);
  }
  void widen(float* dq32, float* dk32, float* dv32) const {
    from_bf16(dq32, dq, n);
    from_bf16(dk32, dk, n);
    from_bf16(dv32, dv, n);
  }
};

int64_t numel(const AttnShape& s) { return int64_t(s.B) * s.T * s.H * s.D; }
bool empty(const AttnShape& s) { return int64_t(s.B) * s.T * s.H == 0; }

}  // namespace

void softmax_attention_forward_mixed(float* o, float* lse, const float* q, const float* k,
                                     const float* v, const float* log_f,
                                     const SoftmaxAttentionArgs& args, const float* bias) {
  const AttnShape& s = args.shape;
  if (empty(s)) return;
  check_head_dim(s.D, "softmax attention");
  const Forward16 t(q, k, v, numel(s));
  flash_attention_bf16_forward(t.o, lse, t.q, t.k, t.v, log_f, args, bias);
  from_bf16(o, t.o, numel(s));
}

void softmax_attention_backward_mixed(float* dq, float* dk, float* dv, float* dlog_f,
                                      const float* dout, const float* o, const float* lse,
                                      const float* q, const float* k, const float* v,
                                      const float* log_f, const SoftmaxAttentionArgs& args,
                                      float* dbias, const float* bias) {
  const AttnShape& s = args.shape;
  if (empty(s)) return;
  check_head_dim(s.D, "softmax attention");
  const Backward16 t(dout, o, q, k, v, numel(s));
  flash_attention_bf16_backward(t.dq, t.dk, t.dv, dlog_f, t.dout, t.o, lse, t.q, t.k, t.v, log_f, args,
                                dbias, bias);
  t.widen(dq, dk, dv);
}

void path_attention_forward_mixed(float* o, float* lse, const float* q, const float* k,
                                  const float* v, const float* w, const float* beta,
                                  const float* log_f, const PathAttentionArgs& args) {
  const AttnShape& s = args.shape;
  if (empty(s)) return;
  check_head_dim(s.D, "path attention");
  const Forward16 t(q, k, v, numel(s));
  path_attention_bf16_forward(t.o, lse, t.q, t.k, t.v, w, beta, log_f, args);
  from_bf16(o, t.o, numel(s));
}

void path_attention_backward_mixed(float* dq, float* dk, float* dv, float* dw, float* dbeta,
                                   float* dlog_f, const float* dout, const float* o,
                                   const float* lse, const float* q, const float* k,
                                   const float* v, const float* w, const float* beta,
                                   const float* log_f, const PathAttentionArgs& args) {
  const AttnShape& s = args.shape;
  if (empty(s)) return;
  check_head_dim(s.D, "path attention");
  const Backward16 t(dout, o, q, k, v, numel(s));
  path_attention_bf16_backward(t.dq, t.dk, t.dv, dw, dbeta, dlog_f, t.dout, t.o, lse, t.q, t.k, t.v, w,
                               beta, log_f, args);
  t.widen(dq, dk, dv);
}

}  // namespace pb::cuda
