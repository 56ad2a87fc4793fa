#include "models/decoder.h"

#include "core/error.h"

namespace pb {

template <class E>
Decoder<E>::Decoder(const Transformer<E>& model, int B, int Tmax) : model_(model), B_(B) {
  if (B < 1) fail("decoder: batch must be >= 1, got {}", B);
  if (model.runs() > 1) fail("decoder: a model of {} stacked runs decodes one run at a time; copy one out", model.runs());
  const ModelConfig& cfg = model.cfg_;
  const size_t C = cfg.d_model, HD = size_t(cfg.heads) * model.D_, F = cfg.ffn;
  for (const auto& l : model.layers_)
    attn_.push_back(l.pe->decoder({cfg.d_model, cfg.heads, model.D_}, B, Tmax));
  tokens_.resize(B);
  for (auto* b : {&x_, &h_, &x_mid_}) b->resize(B * C);
  rstd_.resize(B);
  for (auto* b : {&q_, &k_, &v_, &att_}) b->resize(B * HD);
  if (cfg.kv_conv) {
    k_in_.resize(B * HD);
    v_in_.resize(B * HD);
    conv_state_.resize(model.layers_.size() * 2 * B * 2 * HD);
    E::zero(conv_state_.data(), conv_state_.size());
  }
  ab_.resize(B * 2 * F);
  hh_.resize(B * F);
  logits_.resize(size_t(B) * cfg.vocab);
}

// The forward of Transformer::run_forward on the B rows of one position; the attention is each
// layer's decoder over the cached positions.
template <class E>
const typename E::Scalar* Decoder<E>::step(const int32_t* tokens) {
  const auto& m = model_;
  const int B = B_, C = m.cfg_.d_model, H = m.cfg_.heads, HD = H * m.D_, F = m.cfg_.ffn, V = m.cfg_.vocab;
  for (int b = 0; b < B; ++b)
    if (tokens[b] < 0 || tokens[b] >= V) fail("decoder: token {} is outside the vocabulary [0, {})", tokens[b], V);
  const S* P = m.params.params.data();
  E::upload(tokens_.data(), tokens, B);
  E::embedding_forward(x_.data(), tokens_.data(), P + m.embed_, B, C);  // x = E[token]
  std::vector<const S*> pe_params;
  for (size_t i = 0; i < m.layers_.size(); ++i) {
    const auto& l = m.layers_[i];
    E::rmsnorm_forward(h_.data(), rstd_.data(), x_.data(), P + l.attn_norm, B, C, kNormEps);
    E::matmul_forward(q_.data(), h_.data(), P + l.wq, B, C, HD);  // q = h1 Wq
    const bool kv_conv = m.cfg_.kv_conv;  // h1 Wk, h1 Wv into k_in, v_in, then convolved into k, v
    E::matmul_forward(kv_conv ? k_in_.data() : k_.data(), h_.data(), P + l.wk, B, C, HD);
    E::matmul_forward(kv_conv ? v_in_.data() : v_.data(), h_.data(), P + l.wv, B, C, HD);
    if (kv_conv) {  // k = SiLU(conv3(h1 Wk)), v likewise, each with its state (B, 2, H·D)
      S* state = conv_state_.data() + i * 2 * B * 2 * HD;
      E::short_conv_step(k_.data(), state, k_in_.data(), P + l.k_conv, B, HD);
      E::short_conv_step(v_.data(), state + B * 2 * HD, v_in_.data(), P + l.v_conv, B, HD);
    }
    pe_params.clear();
    for (auto off : l.pe_params) pe_params.push_back(P + off);
    attn_[i]->step(att_.data(), {B, t_, {C, H, m.D_}, h_.data(), q_.data(), k_.data(), v_.data(), pe_params});
    E::copy(x_mid_.data(), x_.data(), x_.size());
    E::matmul_forward(x_mid_.data(), att_.data(), P + l.wo, B, HD, C, GradMode::Accumulate);  // x_mid = x + att Wo
    E::rmsnorm_forward(h_.data(), rstd_.data(), x_mid_.data(), P + l.mlp_norm, B, C, kNormEps);
    E::matmul_forward(ab_.data(), h_.data(), P + l.w_up, B, C, 2 * F);  // [a | b] = h2 W_up
    E::swiglu_forward(hh_.data(), ab_.data(), B, F);                   // hh = silu(a) ⊙ b
    E::copy(x_.data(), x_mid_.data(), x_mid_.size());
    E::matmul_forward(x_.data(), hh_.data(), P + l.w_down, B, F, C, GradMode::Accumulate);  // x = x_mid + hh W_down
  }
  E::rmsnorm_forward(h_.data(), rstd_.data(), x_.data(), P + m.final_norm_, B, C, kNormEps);
  E::matmul_forward(logits_.data(), h_.data(), P + m.head_, B, C, V);  // logits = hf W_head
  ++t_;
  return logits_.data();
}

template class Decoder<Cpu32>;
template class Decoder<Cpu64>;
#if PATHBENCH_HAVE_CUDA
template class Decoder<CudaEngine>;
#endif

}  // namespace pb
