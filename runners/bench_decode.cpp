// `pathbench bench decode`: the speed of token-by-token decoding (models/decoder.h) on the CPU or
// CUDA engine (--device) against re-running the parallel forward over the whole prefix for each
// new token, at a few sequence lengths T. Per encoding and T, one line on stdout:
//   bench decode pe=.. T=.. batch=.. layers=.. d_model=.. heads=.. decode_tok_s=.. prefix_tok_s=..
//   speedup=.. [key_update_us=.. key_update_share=..]
// decode_tok_s: B / the median time of the decoder's steps at positions T − steps .. T − 1 (the
// cache filled by decoding the positions before). prefix_tok_s: B / the median time of 5 parallel
// forwards over T positions (what producing token T costs without a cache). speedup: their
// ratio, measured in the same run; beyond --prefix-max-len the prefix is not timed (it is O(T²)
// per token: minutes at 64K on a CPU) and both read "-". For PaTH encodings, key_update_us is the
// time of the in-place key update alone (path_key_update over the T − 1 cached keys of each layer
// and sequence, the decoder's step at T), and key_update_share its fraction of a decoding step.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "models/decoder.h"
#include "runners/commands.h"
#include "runners/trainer.h"
#if PATHBENCH_HAVE_CUDA
#include "core/cuda/runtime.h"
#endif

namespace pb {
namespace {

struct BenchDecodeOpts {
  std::vector<std::string> pe;  // empty: every registered encoding
  std::vector<int> lens = {256, 1024};
  std::string device = "cpu";
  int batch = 1, layers = 2, d_model = 64, heads = 2, ffn = 128, vocab = 16, steps = 32, threads = 0;
  int prefix_max_len = 1 << 20;  // the prefix is timed at T ≤ this only
};

// The median over `reps` calls of f's wall time, in seconds, each until E's queued work is done.
template <class E, class F>
double median_seconds(int reps, F&& f) {
  std::vector<double> s;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
#if PATHBENCH_HAVE_CUDA
    if constexpr (E::on_device) cuda::synchronize();
#endif
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(s.begin(), s.begin() + reps / 2, s.end());
  return s[reps / 2];
}

template <class E>
void bench_one(const BenchDecodeOpts& o, const std::string& pe, int T) {
  const ModelConfig cfg{o.vocab, o.layers, o.d_model, o.heads, o.ffn, pe};
  const Transformer<E> model(cfg, 1);
  Transformer<E> parallel(cfg, 1);
  const int B = o.batch, steps = std::min(o.steps, T), H = o.heads, D = o.d_model / o.heads;
  std::vector<int32_t> tokens(size_t(B) * T), targets(tokens.size(), -1);  // (B, T)
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i * 7 % o.vocab);
  std::vector<int32_t> column(B);  // (B)
  auto feed = [&](Decoder<E>& dec, int t) {
    for (int b = 0; b < B; ++b) column[b] = tokens[size_t(b) * T + t];
    dec.step(column.data());
  };
  Decoder<E> dec(model, B, T);
  for (int t = 0; t < T - steps; ++t) feed(dec, t);
  int t = T - steps;
  const double step_s = median_seconds<E>(steps, [&] { feed(dec, t++); });
  std::string prefix = "prefix_tok_s=- speedup=-";
  if (T <= o.prefix_max_len) {
    parallel.forward(tokens.data(), targets.data(), B, T);  // warm-up: buffers allocated
    const double prefix_s =
        median_seconds<E>(5, [&] { parallel.forward(tokens.data(), targets.data(), B, T); });
    prefix = fmt::format("prefix_tok_s={:.4g} speedup={:.3g}", B / prefix_s, prefix_s / step_s);
  }
  std::string line = fmt::format("bench decode pe={} T={} batch={} layers={} d_model={} heads={} decode_tok_s={:.4g} {}",
                                 pe, T, B, o.layers, o.d_model, H, B / step_s, prefix);
  if (encoding_info(pe).family == AttentionFamily::Path) {
    Rng rng(1, stream_id("bench decode"), 0);
    std::vector<float> keys(size_t(B) * H * T * D), w(size_t(B) * H * D);  // (B, H, T, D), (B, H, D)
    for (auto* x : {&keys, &w})
      for (float& v : *x) v = float(rng.normal());
    for (int bh = 0; bh < B * H; ++bh) {  // unit rows
      double n2 = 0;
      for (int d = 0; d < D; ++d) n2 += double(w[bh * D + d]) * w[bh * D + d];
      for (int d = 0; d < D; ++d) w[bh * D + d] = float(w[bh * D + d] / std::sqrt(n2));
    }
    const std::vector<float> beta(size_t(B) * H, 1.5f);  // (B, H)
    typename E::template Buffer<float> keys_e(keys.size()), w_e(w.size()), beta_e(beta.size());
    E::upload(keys_e.data(), keys.data(), keys.size());
    E::upload(w_e.data(), w.data(), w.size());
    E::upload(beta_e.data(), beta.data(), beta.size());
    const DecodeArgs args{B, H, D, T, T, 1.0 / std::sqrt(double(D))};
    const double update_s = median_seconds<E>(steps, [&] {
      for (int l = 0; l < o.layers; ++l) E::path_key_update(keys_e.data(), w_e.data(), beta_e.data(), args);
    });
    line += fmt::format(" key_update_us={:.4g} key_update_share={:.3f}", update_s * 1e6, update_s / step_s);
  }
  fmt::print("{}\n", line);
  std::fflush(stdout);
}

}  // namespace

void add_bench_decode_command(CLI::App& bench) {
  auto o = std::make_shared<BenchDecodeOpts>();
  auto* cmd = bench.add_subcommand("decode", "Token-by-token decoding vs re-running the prefix, tokens/s");
  cmd->add_option("--pe", o->pe, "position encoding specs, comma-separated (default: every registered encoding)")
      ->delimiter(',');
  cmd->add_option("--lens", o->lens, "sequence lengths T, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--batch", o->batch, "sequences decoded together")->capture_default_str();
  cmd->add_option("--layers", o->layers, "layers")->capture_default_str();
  cmd->add_option("--d-model", o->d_model, "model width")->capture_default_str();
  cmd->add_option("--heads", o->heads, "attention heads")->capture_default_str();
  cmd->add_option("--ffn", o->ffn, "SwiGLU hidden width")->capture_default_str();
  cmd->add_option("--steps", o->steps, "decoding steps timed at the end of each length")->capture_default_str();
  cmd->add_option("--prefix-max-len", o->prefix_max_len, "time the prefix (O(T²) per token) only at T up to this")
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "OpenMP threads (0: all cores)")->capture_default_str();
  cmd->add_option("--device", o->device, "auto | cpu | cuda (fp32)")->capture_default_str();
  cmd->callback([o] {
    const std::pair<const char*, int> sizes[] = {{"--batch", o->batch},   {"--layers", o->layers},
                                                 {"--d-model", o->d_model}, {"--heads", o->heads},
                                                 {"--ffn", o->ffn},       {"--steps", o->steps},
                                                 {"--prefix-max-len", o->prefix_max_len}};
    for (const auto& [flag, v] : sizes)
      if (v < 1) fail("{} needs a positive integer, got {}", flag, v);
    for (int T : o->lens)
      if (T < 1 || T > (1 << 20)) fail("--lens: each length must be in [1, 2^20], got {}", T);
    if (o->threads < 0) fail("--threads needs an integer >= 0 (0: all cores), got {}", o->threads);
    TrainConfig engine;  // fp32 on either engine
    engine.device = o->device, engine.threads = o->threads;
    const std::string device = select_device(engine);
    if (o->pe.empty())
      for (const auto& e : encodings()) o->pe.push_back(e.schema.name);
    for (const auto& pe : o->pe) resolve_encoding(pe);  // every spec checked before the first run
    with_engine(device, [&](auto e) {
      for (const auto& pe : o->pe)
        for (int T : o->lens) bench_one<decltype(e)>(*o, pe, T);
    });
  });
}

}  // namespace pb
