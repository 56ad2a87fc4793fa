#include "models/transformer.h"

#include "core/error.h"

namespace pb {

template <class E>
Transformer<E>::Transformer(const ModelConfig& cfg, const std::vector<uint64_t>& seeds) : cfg_(cfg) {
  const int C = cfg.d_model, H = cfg.heads, V = cfg.vocab, F = cfg.ffn;
  if (V < 1) fail("model: vocabulary size must be >= 1, got {}", V);
  if (cfg.layers < 0) fail("model: layers must be >= 0, got {}", cfg.layers);
  if (H < 1 || C < 1 || C % H) fail("model: d_model ({}) must be a positive multiple of heads ({})", C, H);
  if (F < 1) fail("model: MLP width must be >= 1, got {}", F);
  if (cfg.target_every < 1) fail("model: target_every must be >= 1, got {}", cfg.target_every);
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
    if (cfg.kv_conv) {  // a[k] multiplies the token k steps back, as PaTH's w_conv
      l.k_conv = params.add(p, {"k_conv", {kShortConvWidth, HD}, Init::Normal, false});
      l.v_conv = params.add(p, {"v_conv", {kShortConvWidth, HD}, Init::Normal, false});
    }
    l.mlp_norm = params.add(p, {"mlp_norm", {C}, Init::Ones, false});
    l.w_up = params.add(p, {"w_up", {C, 2 * F}});   // [gate | up] halves for SwiGLU
    l.w_down = params.add(p, {"w_down", {F, C}});
    l.pe = make_encoding<E>(cfg.pe);
    for (const auto& spec : l.pe->params({C, H, D_})) l.pe_params.push_back(params.add(p + "pe.", spec));
    layers_.push_back(std::move(l));
  }
  final_norm_ = params.add("", {"final_norm", {C}, Init::Ones, false});
  head_ = params.add("", {"head", {C, V}});
  if (seeds.size() > 1 && !encoding_info(cfg.pe).stacks)
    fail("model: encoding '{}' cannot train stacked runs (its EncodingInfo says stacks = false)", cfg.pe);
  params.allocate_and_init(seeds);
  stack_ = {params.runs, params.run_size()};
  loss_.resize(stack_.count);
  scale_.resize(stack_.count);
}

template <class E>
void Transformer<E>::resize(int B, int T) {
  if (B == B_ && T == T_) return;
  B_ = B, T_ = T;
  const int k = cfg_.target_every, P = (T + k - 1) / k;  // head positions per sequence: 0, k, 2k, …
  M_ = int64_t(B) * P;
  const size_t N = size_t(B) * T, M = M_, C = cfg_.d_model, HD = size_t(cfg_.heads) * D_, F = cfg_.ffn;
  for (auto& l : layers_) {
    for (auto* b : {&l.x, &l.h1, &l.x_mid, &l.h2}) b->resize(N * C);
    for (auto* b : {&l.q, &l.k, &l.v, &l.att}) b->resize(N * HD);
    if (cfg_.kv_conv)
      for (auto* b : {&l.k_in, &l.v_in}) b->resize(N * HD);
    l.ab.resize(N * 2 * F);
    l.hh.resize(N * F);
    l.rstd1.resize(N);
    l.rstd2.resize(N);
  }
  for (auto* b : {&x_final_, &dx_, &dh_}) b->resize(N * C);
  hf_.resize(M * C);
  if (k > 1) {
    for (auto* b : {&x_head_, &dx_head_}) b->resize(M * C);
    host_rows_.resize(M);  // head row m = b·P + p is row b·T + p·k of the batch
    for (size_t m = 0; m < M; ++m) host_rows_[m] = int32_t(m / P * T + m % P * k);
    rows_.resize(M);
    E::upload(rows_.data(), host_rows_.data(), M);
  }
  for (auto* b : {&dbuf_, &dq_, &dk_, &dv_}) b->resize(N * HD);
  if (cfg_.kv_conv)
    for (auto* b : {&dk_in_, &dv_in_}) b->resize(N * HD);
  dab_.resize(N * 2 * F);
  dhh_.resize(N * F);
  rstd_f_.resize(M);
  logits_.resize(M * cfg_.vocab);
  dlogits_.resize(M * cfg_.vocab);
  loss_rows_.resize(M);
  argmax_.resize(M);
  tokens_.resize(N);
  targets_.resize(M);
}

template <class E>
AttnInputs<typename E::Scalar> Transformer<E>::attn_inputs(Layer& l, std::vector<const S*>& p) const {
  p.clear();
  for (auto off : l.pe_params) p.push_back(params.params.data() + off);
  return {B_, T_, {cfg_.d_model, cfg_.heads, D_}, l.h1.data(), l.q.data(), l.k.data(), l.v.data(), p, {}, stack_};
}

template <class E>
void Transformer<E>::set_batch(const int32_t* tokens, const int32_t* targets, int B, int T) {
  if (B % stack_.count) fail("model: a batch of {} sequences does not split over {} stacked runs", B, stack_.count);
  resize(B, T);
  E::upload(tokens_.data(), tokens, size_t(B) * T);
  const int k = cfg_.target_every;
  if (k == 1) return E::upload(targets_.data(), targets, size_t(B) * T);
  host_targets_.resize(M_);
  for (int64_t n = 0, m = 0; n < int64_t(B) * T; ++n) {
    if (n % T % k == 0)
      host_targets_[m++] = targets[n];
    else if (targets[n] >= 0)
      fail("model: a target at position {} of a sequence, but the head runs only at multiples of target_every={}",
           n % T, k);
  }
  E::upload(targets_.data(), host_targets_.data(), M_);
}

template <class E>
double Transformer<E>::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  set_batch(tokens, targets, B, T);
  run_forward();
  S loss = 0;
  E::download(&loss, loss_.data(), 1);
  return double(loss);
}

// The head rows' values (M) on the host, spread over the batch's B·T positions (`skipped` between).
template <class E>
template <class X>
const X* Transformer<E>::per_position(std::vector<X>& host, const Buf<X>& rows, X skipped) const {
  const int k = cfg_.target_every;
  if constexpr (!E::on_device)
    if (k == 1) return rows.data();
  std::vector<X> head(M_);
  E::download(head.data(), rows.data(), M_);
  if (k == 1) return (host = std::move(head)).data();
  host.assign(size_t(B_) * T_, skipped);
  for (int64_t m = 0; m < M_; ++m) host[host_rows_[m]] = head[m];
  return host.data();
}

template <class E>
const int32_t* Transformer<E>::predictions() {
  return per_position(host_argmax_, argmax_, int32_t(-1));
}

template <class E>
const typename E::Scalar* Transformer<E>::row_losses() {
  return per_position(host_loss_rows_, loss_rows_, S(0));
}

template <class E>
void Transformer<E>::run_forward() {
  const int B = B_, T = T_, N = B * T, C = cfg_.d_model, HD = cfg_.heads * D_, F = cfg_.ffn, V = cfg_.vocab;
  const S* P = params.params.data();
  S* x0 = layers_.empty() ? x_final_.data() : layers_[0].x.data();
  E::embedding_forward(x0, tokens_.data(), P + embed_, N, C, stack_);  // x = E[token]
  std::vector<const S*> pe_params;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    S* out = i + 1 < layers_.size() ? layers_[i + 1].x.data() : x_final_.data();
    E::rmsnorm_forward(l.h1.data(), l.rstd1.data(), l.x.data(), P + l.attn_norm, N, C, kNormEps, stack_);
    E::matmul_forward(l.q.data(), l.h1.data(), P + l.wq, N, C, HD, GradMode::Overwrite, stack_);  // q = h1 Wq
    const bool kv_conv = cfg_.kv_conv;  // h1 Wk, h1 Wv into k_in, v_in, then convolved into k, v
    E::matmul_forward(kv_conv ? l.k_in.data() : l.k.data(), l.h1.data(), P + l.wk, N, C, HD, GradMode::Overwrite, stack_);
    E::matmul_forward(kv_conv ? l.v_in.data() : l.v.data(), l.h1.data(), P + l.wv, N, C, HD, GradMode::Overwrite, stack_);
    if (kv_conv) {
      E::short_conv_forward(l.k.data(), l.k_in.data(), P + l.k_conv, B, T, HD, stack_);  // k = SiLU(conv3(h1 Wk))
      E::short_conv_forward(l.v.data(), l.v_in.data(), P + l.v_conv, B, T, HD, stack_);  // v likewise
    }
    l.pe->forward(l.att.data(), attn_inputs(l, pe_params));     // att = attention(q, k, v)
    E::copy(l.x_mid.data(), l.x.data(), l.x.size());
    E::matmul_forward(l.x_mid.data(), l.att.data(), P + l.wo, N, HD, C, GradMode::Accumulate, stack_);  // x_mid = x + att Wo
    E::rmsnorm_forward(l.h2.data(), l.rstd2.data(), l.x_mid.data(), P + l.mlp_norm, N, C, kNormEps, stack_);
    E::matmul_forward(l.ab.data(), l.h2.data(), P + l.w_up, N, C, 2 * F, GradMode::Overwrite, stack_);  // [a | b] = h2 W_up
    E::swiglu_forward(l.hh.data(), l.ab.data(), N, F);                    // hh = silu(a) ⊙ b
    E::copy(out, l.x_mid.data(), l.x_mid.size());
    E::matmul_forward(out, l.hh.data(), P + l.w_down, N, F, C, GradMode::Accumulate, stack_);  // out = x_mid + hh W_down
  }
  const int M = int(M_);
  const S* x_head = x_final_.data();
  if (cfg_.target_every > 1)  // x_head = x_final[rows]: the head's rows, gathered as an embedding lookup
    E::embedding_forward(x_head_.data(), rows_.data(), x_final_.data(), M, C), x_head = x_head_.data();
  E::rmsnorm_forward(hf_.data(), rstd_f_.data(), x_head, P + final_norm_, M, C, kNormEps, stack_);
  E::matmul_forward(logits_.data(), hf_.data(), P + head_, M, C, V, GradMode::Overwrite, stack_);  // logits = hf W_head
  E::cross_entropy_forward(loss_rows_.data(), argmax_.data(), logits_.data(), targets_.data(), M, V);
  E::loss_mean(loss_.data(), scale_.data(), loss_rows_.data(), targets_.data(), M, stack_);  // mean over targets
}

template <class E>
void Transformer<E>::backward() {
  const int B = B_, T = T_, N = B * T, C = cfg_.d_model, HD = cfg_.heads * D_, F = cfg_.ffn, V = cfg_.vocab;
  const S* P = params.params.data();
  S* G = params.grads.data();
  const int M = int(M_);
  const bool gather = cfg_.target_every > 1;
  E::cross_entropy_backward(dlogits_.data(), logits_.data(), targets_.data(), M, V, scale_.data(), stack_);
  E::matmul_backward(dh_.data(), G + head_, dlogits_.data(), hf_.data(), P + head_, M, C, V, GradMode::Overwrite, stack_);
  E::rmsnorm_backward(gather ? dx_head_.data() : dx_.data(), G + final_norm_, dh_.data(),
                      gather ? x_head_.data() : x_final_.data(), rstd_f_.data(), P + final_norm_, M, C,
                      GradMode::Overwrite, stack_);  // dx = ∂L/∂x_final (its head rows when gathered)
  if (gather) {  // dx = 0 but dx[rows] = dx_head: the lookup's backward (rows are distinct)
    E::zero(dx_.data(), dx_.size());
    E::embedding_backward(dx_.data(), dx_head_.data(), rows_.data(), M, C);
  }
  std::vector<const S*> pe_params;
  std::vector<S*> pe_grads;
  for (size_t i = layers_.size(); i-- > 0;) {
    Layer& l = layers_[i];
    // MLP branch: out = x_mid + swiglu(h2 W_up) W_down
    E::matmul_backward(dhh_.data(), G + l.w_down, dx_.data(), l.hh.data(), P + l.w_down, N, F, C, GradMode::Overwrite, stack_);
    E::swiglu_backward(dab_.data(), dhh_.data(), l.ab.data(), N, F);
    E::matmul_backward(dh_.data(), G + l.w_up, dab_.data(), l.h2.data(), P + l.w_up, N, C, 2 * F, GradMode::Overwrite, stack_);
    E::rmsnorm_backward(dx_.data(), G + l.mlp_norm, dh_.data(), l.x_mid.data(), l.rstd2.data(),
                     P + l.mlp_norm, N, C, GradMode::Accumulate, stack_);  // dx = ∂L/∂x_mid
    // Attention branch: x_mid = x + attention(h1 Wq, h1 Wk, h1 Wv) Wo
    E::matmul_backward(dbuf_.data(), G + l.wo, dx_.data(), l.att.data(), P + l.wo, N, HD, C, GradMode::Overwrite, stack_);
    E::zero(dh_.data(), dh_.size());
    pe_grads.clear();
    for (auto off : l.pe_params) pe_grads.push_back(G + off);
    const AttnGrads<S> g{l.att.data(), dbuf_.data(), dh_.data(), dq_.data(), dk_.data(), dv_.data(), pe_grads};
    l.pe->backward(g, attn_inputs(l, pe_params));
    E::matmul_backward(dh_.data(), G + l.wq, dq_.data(), l.h1.data(), P + l.wq, N, C, HD, GradMode::Accumulate, stack_);
    const S* dk = dk_.data();  // ∂L/∂(h1 Wk), through the conv with kv_conv; dv likewise
    const S* dv = dv_.data();
    if (cfg_.kv_conv) {
      E::short_conv_backward(dk_in_.data(), G + l.k_conv, dk_.data(), l.k_in.data(), P + l.k_conv, B, T, HD, stack_);
      E::short_conv_backward(dv_in_.data(), G + l.v_conv, dv_.data(), l.v_in.data(), P + l.v_conv, B, T, HD, stack_);
      dk = dk_in_.data(), dv = dv_in_.data();
    }
    E::matmul_backward(dh_.data(), G + l.wk, dk, l.h1.data(), P + l.wk, N, C, HD, GradMode::Accumulate, stack_);
    E::matmul_backward(dh_.data(), G + l.wv, dv, l.h1.data(), P + l.wv, N, C, HD, GradMode::Accumulate, stack_);
    E::rmsnorm_backward(dx_.data(), G + l.attn_norm, dh_.data(), l.x.data(), l.rstd1.data(),
                     P + l.attn_norm, N, C, GradMode::Accumulate, stack_);  // dx = ∂L/∂x
  }
  E::embedding_backward(G + embed_, dx_.data(), tokens_.data(), N, C, stack_);
}

template class Transformer<Cpu32>;
template class Transformer<Cpu64>;
#if PATHBENCH_HAVE_CUDA
template class Transformer<CudaEngine>;
#endif

}  // namespace pb
