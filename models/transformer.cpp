#include "models/transformer.h"

#include <algorithm>

#include "kernels/error.h"
#include "kernels/ops.h"

namespace pb {

constexpr double kNormEps = 1e-6;

template <class S>
Transformer<S>::Transformer(const ModelConfig& cfg, uint64_t seed) : cfg_(cfg) {
  const int C = cfg.d_model, H = cfg.heads, V = cfg.vocab, F = cfg.ffn;
  if (V < 1) fail("model: vocabulary size must be >= 1, got {}", V);
  if (cfg.layers < 0) fail("model: layers must be >= 0, got {}", cfg.layers);
  if (H < 1 || C < 1 || C % H) fail("model: d_model ({}) must be a positive multiple of heads ({})", C, H);
  if (F < 1) fail("model: MLP width must be >= 1, got {}", F);
  D_ = C / H;
  const int HD = H * D_;
  embed_ = params.add("", {"embed", {V, C}});
  for (int i = 0; i < cfg.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    Layer l;
    l.attn_norm = params.add(p, {"attn_norm", {C}, Init::Ones, false});
    l.wq = params.add(p, {"wq", {C, HD}});
    l.wk = params.add(p, {"wk", {C, HD}});
    l.wv = params.add(p, {"wv", {C, HD}});
    l.wo = params.add(p, {"wo", {HD, C}});
    l.mlp_norm = params.add(p, {"mlp_norm", {C}, Init::Ones, false});
    l.w_up = params.add(p, {"w_up", {C, 2 * F}});   // [gate | up] halves for SwiGLU
    l.w_down = params.add(p, {"w_down", {F, C}});
    l.pe = make_encoding<S>(cfg.pe);
    for (const auto& spec : l.pe->params({C, H, D_})) l.pe_params.push_back(params.add(p + "pe.", spec));
    layers_.push_back(std::move(l));
  }
  final_norm_ = params.add("", {"final_norm", {C}, Init::Ones, false});
  head_ = params.add("", {"head", {C, V}});
  params.allocate_and_init(seed);
}

template <class S>
void Transformer<S>::resize(int B, int T) {
  if (B == B_ && T == T_) return;
  B_ = B, T_ = T;
  const size_t N = size_t(B) * T, C = cfg_.d_model, HD = size_t(cfg_.heads) * D_, F = cfg_.ffn;
  for (auto& l : layers_) {
    for (auto* b : {&l.x, &l.h1, &l.x_mid, &l.h2}) b->resize(N * C);
    for (auto* b : {&l.q, &l.k, &l.v, &l.att}) b->resize(N * HD);
    l.ab.resize(N * 2 * F);
    l.hh.resize(N * F);
    l.rstd1.resize(N);
    l.rstd2.resize(N);
  }
  for (auto* b : {&x_final_, &hf_, &dx_, &dh_}) b->resize(N * C);
  for (auto* b : {&dbuf_, &dq_, &dk_, &dv_}) b->resize(N * HD);
  dab_.resize(N * 2 * F);
  dhh_.resize(N * F);
  rstd_f_.resize(N);
  logits_.resize(N * cfg_.vocab);
  dlogits_.resize(N * cfg_.vocab);
  loss_rows_.resize(N);
  argmax_.resize(N);
}

template <class S>
AttnInputs<S> Transformer<S>::attn_inputs(Layer& l, std::vector<const S*>& p) const {
  p.clear();
  for (auto off : l.pe_params) p.push_back(params.params.data() + off);
  return {B_, T_, {cfg_.d_model, cfg_.heads, D_}, l.h1.data(), l.q.data(), l.k.data(), l.v.data(), p};
}

template <class S>
double Transformer<S>::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  resize(B, T);
  tokens_ = tokens, targets_ = targets;
  const int N = B * T, C = cfg_.d_model, HD = cfg_.heads * D_, F = cfg_.ffn, V = cfg_.vocab;
  const S* P = params.params.data();
  S* x0 = layers_.empty() ? x_final_.data() : layers_[0].x.data();
  embedding_forward(x0, tokens, P + embed_, N, C);  // x = E[token]
  std::vector<const S*> pe_params;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    S* out = i + 1 < layers_.size() ? layers_[i + 1].x.data() : x_final_.data();
    rmsnorm_forward(l.h1.data(), l.rstd1.data(), l.x.data(), P + l.attn_norm, N, C, kNormEps);
    matmul_forward(l.q.data(), l.h1.data(), P + l.wq, N, C, HD);  // q = h1 Wq
    matmul_forward(l.k.data(), l.h1.data(), P + l.wk, N, C, HD);
    matmul_forward(l.v.data(), l.h1.data(), P + l.wv, N, C, HD);
    l.pe->forward(l.att.data(), attn_inputs(l, pe_params));     // att = attention(q, k, v)
    l.x_mid = l.x;
    matmul_forward(l.x_mid.data(), l.att.data(), P + l.wo, N, HD, C, GradMode::Accumulate);  // x_mid = x + att Wo
    rmsnorm_forward(l.h2.data(), l.rstd2.data(), l.x_mid.data(), P + l.mlp_norm, N, C, kNormEps);
    matmul_forward(l.ab.data(), l.h2.data(), P + l.w_up, N, C, 2 * F);  // [a | b] = h2 W_up
    swiglu_forward(l.hh.data(), l.ab.data(), N, F);                    // hh = silu(a) ⊙ b
    std::copy(l.x_mid.begin(), l.x_mid.end(), out);
    matmul_forward(out, l.hh.data(), P + l.w_down, N, F, C, GradMode::Accumulate);  // out = x_mid + hh W_down
  }
  rmsnorm_forward(hf_.data(), rstd_f_.data(), x_final_.data(), P + final_norm_, N, C, kNormEps);
  matmul_forward(logits_.data(), hf_.data(), P + head_, N, C, V);  // logits = hf W_head
  cross_entropy_forward(loss_rows_.data(), argmax_.data(), logits_.data(), targets, N, V);
  n_targets_ = 0;
  double total = 0;
  for (int n = 0; n < N; ++n)
    if (targets[n] >= 0) ++n_targets_, total += loss_rows_[n];
  return n_targets_ ? total / n_targets_ : 0.0;
}

template <class S>
void Transformer<S>::backward() {
  const int N = B_ * T_, C = cfg_.d_model, HD = cfg_.heads * D_, F = cfg_.ffn, V = cfg_.vocab;
  const S* P = params.params.data();
  S* G = params.grads.data();
  const double scale = n_targets_ ? 1.0 / n_targets_ : 0.0;
  cross_entropy_backward(dlogits_.data(), logits_.data(), targets_, N, V, scale);
  matmul_backward(dh_.data(), G + head_, dlogits_.data(), hf_.data(), P + head_, N, C, V, GradMode::Overwrite);
  rmsnorm_backward(dx_.data(), G + final_norm_, dh_.data(), x_final_.data(), rstd_f_.data(),
                   P + final_norm_, N, C, GradMode::Overwrite);  // dx = ∂L/∂x_final
  std::vector<const S*> pe_params;
  std::vector<S*> pe_grads;
  for (size_t i = layers_.size(); i-- > 0;) {
    Layer& l = layers_[i];
    // MLP branch: out = x_mid + swiglu(h2 W_up) W_down
    matmul_backward(dhh_.data(), G + l.w_down, dx_.data(), l.hh.data(), P + l.w_down, N, F, C, GradMode::Overwrite);
    swiglu_backward(dab_.data(), dhh_.data(), l.ab.data(), N, F);
    matmul_backward(dh_.data(), G + l.w_up, dab_.data(), l.h2.data(), P + l.w_up, N, C, 2 * F, GradMode::Overwrite);
    rmsnorm_backward(dx_.data(), G + l.mlp_norm, dh_.data(), l.x_mid.data(), l.rstd2.data(),
                     P + l.mlp_norm, N, C, GradMode::Accumulate);  // dx = ∂L/∂x_mid
    // Attention branch: x_mid = x + attention(h1 Wq, h1 Wk, h1 Wv) Wo
    matmul_backward(dbuf_.data(), G + l.wo, dx_.data(), l.att.data(), P + l.wo, N, HD, C, GradMode::Overwrite);
    std::fill(dh_.begin(), dh_.end(), S(0));
    pe_grads.clear();
    for (auto off : l.pe_params) pe_grads.push_back(G + off);
    const AttnGrads<S> g{l.att.data(), dbuf_.data(), dh_.data(), dq_.data(), dk_.data(), dv_.data(), pe_grads};
    l.pe->backward(g, attn_inputs(l, pe_params));
    matmul_backward(dh_.data(), G + l.wq, dq_.data(), l.h1.data(), P + l.wq, N, C, HD, GradMode::Accumulate);
    matmul_backward(dh_.data(), G + l.wk, dk_.data(), l.h1.data(), P + l.wk, N, C, HD, GradMode::Accumulate);
    matmul_backward(dh_.data(), G + l.wv, dv_.data(), l.h1.data(), P + l.wv, N, C, HD, GradMode::Accumulate);
    rmsnorm_backward(dx_.data(), G + l.attn_norm, dh_.data(), l.x.data(), l.rstd1.data(),
                     P + l.attn_norm, N, C, GradMode::Accumulate);  // dx = ∂L/∂x
  }
  embedding_backward(G + embed_, dx_.data(), tokens_, N, C);
}

template class Transformer<float>;
template class Transformer<double>;

}  // namespace pb
