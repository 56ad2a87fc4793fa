// Attention at precision BF16 (runtime.h, `--precision bf16`): the fp32 entry points of
// softmax_attention.cu and path_attention.cu call these when precision() == Precision::BF16. Each
// has the fp32 op's signature and semantics: it rounds q, k, v (and in the backward dout and o) to
// bf16, runs the bf16 tensor-core op of attention_bf16.h, and widens o / dq / dk / dv back to fp32,
// as PyTorch's bf16 autocast would around its attention. lse, w, β, log_f and their gradients are
// fp32 throughout and are passed through untouched. o, saved by the forward as the widened bf16
// result, rounds back to the same bf16 bits in the backward.
//
// The bf16 tensors live in scratch arena 1, because the bf16 ops use arena 0 themselves; like
// every arena it is sized by the first (eager) call and never allocates in a graph replay.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention_bf16.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"

namespace pb::cuda {
namespace {

constexpr int kArena = 1;  // runtime.h: precision wrappers

// The bf16 kernels take head dims 32, 64 and 128 only.
void check_head_dim(int D, const char* op) {
  if (D != 32 && D != 64 && D != 128)
    throw std::invalid_argument(std::string(op) + " at precision bf16: head dim (d_model / heads) must be 32, 64 or 128, got " +
                                std::to_string(D));
}

// `count` bf16 tensors of n elements each in one scratch region, each 256-byte aligned.
class Bf16Tensors {
 public:
  Bf16Tensors(int count, int64_t n) : stride_((size_t(n) * sizeof(bf16_bits) + 255) / 256 * 256) {
    base_ = static_cast<char*>(scratch(stride_ * size_t(count), kArena));
  }
  bf16_bits* next() { return reinterpret_cast<bf16_bits*>(base_ + stride_ * used_++); }

 private:
  size_t stride_;
  char* base_ = nullptr;
  int used_ = 0;
};

int64_t numel(const AttnShape& s) { return int64_t(s.B) * s.T * s.H * s.D; }
bool empty(const AttnShape& s) { return int64_t(s.B) * s.T * s.H == 0; }

}  // namespace

void softmax_attention_forward_mixed(float* o, float* lse, const float* q, const float* k,
                                     const float* v, const float* log_f,
                                     const SoftmaxAttentionArgs& args) {
  const AttnShape& s = args.shape;
  if (empty(s)) return;
  check_head_dim(s.D, "softmax attention");
  const int64_t n = numel(s);
  Bf16Tensors t(4, n);
  bf16_bits *q16 = t.next(), *k16 = t.next(), *v16 = t.next(), *o16 = t.next();
  to_bf16(q16, q, n);
  to_bf16(k16, k, n);
  to_bf16(v16, v, n);
  flash_attention_bf16_forward(o16, lse, q16, k16, v16, log_f, args);
  from_bf16(o, o16, n);
}

void softmax_attention_backward_mixed(float* dq, float* dk, float* dv, float* dlog_f,
                                      const float* dout, const float* o, const float* lse,
                                      const float* q, const float* k, const float* v,
                                      const float* log_f, const SoftmaxAttentionArgs& args) {
  const AttnShape& s = args.shape;
  if (empty(s)) return;
  check_head_dim(s.D, "softmax attention");
  const int64_t n = numel(s);
  Bf16Tensors t(8, n);
  bf16_bits *dout16 = t.next(), *o16 = t.next(), *q16 = t.next(), *k16 = t.next(), *v16 = t.next();
  bf16_bits *dq16 = t.next(), *dk16 = t.next(), *dv16 = t.next();
  to_bf16(dout16, dout, n);
  to_bf16(o16, o, n);
  to_bf16(q16, q, n);
  to_bf16(k16, k, n);
  to_bf16(v16, v, n);
  flash_attention_bf16_backward(dq16, dk16, dv16, dlog_f, dout16, o16, lse, q16, k16, v16, log_f,
                                args);
  from_bf16(dq, dq16, n);
  from_bf16(dk, dk16, n);
  from_bf16(dv, dv16, n);
}

void path_attention_forward_mixed(float* o, float* lse, const float* q, const float* k,
                                  const float* v, const float* w, const float* beta,
                                  const float* log_f, const PathAttentionArgs& args) {
  const AttnShape& s = args.shape;
  if (empty(s)) return;
  check_head_dim(s.D, "path attention");
  const int64_t n = numel(s);
  Bf16Tensors t(4, n);
  bf16_bits *q16 = t.next(), *k16 = t.next(), *v16 = t.next(), *o16 = t.next();
  to_bf16(q16, q, n);
  to_bf16(k16, k, n);
  to_bf16(v16, v, n);
  path_attention_bf16_forward(o16, lse, q16, k16, v16, w, beta, log_f, args);
  from_bf16(o, o16, n);
}

void path_attention_backward_mixed(float* dq, float* dk, float* dv, float* dw, float* dbeta,
                                   float* dlog_f, const float* dout, const float* o,
                                   const float* lse, const float* q, const float* k,
                                   const float* v, const float* w, const float* beta,
                                   const float* log_f, const PathAttentionArgs& args) {
  const AttnShape& s = args.shape;
  if (empty(s)) return;
  check_head_dim(s.D, "path attention");
  const int64_t n = numel(s);
  Bf16Tensors t(8, n);
  bf16_bits *dout16 = t.next(), *o16 = t.next(), *q16 = t.next(), *k16 = t.next(), *v16 = t.next();
  bf16_bits *dq16 = t.next(), *dk16 = t.next(), *dv16 = t.next();
  to_bf16(dout16, dout, n);
  to_bf16(o16, o, n);
  to_bf16(q16, q, n);
  to_bf16(k16, k, n);
  to_bf16(v16, v, n);
  path_attention_bf16_backward(dq16, dk16, dv16, dw, dbeta, dlog_f, dout16, o16, lse, q16, k16, v16,
                               w, beta, log_f, args);
  from_bf16(dq, dq16, n);
  from_bf16(dk, dk16, n);
  from_bf16(dv, dv16, n);
}

}  // namespace pb::cuda
