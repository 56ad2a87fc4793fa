// `pathbench bench decode`: the speed of token-by-token decoding (models/decoder.h) on the CPU
// engine against re-running the parallel forward over the whole prefix for each new token, at a
// few sequence lengths T. Per encoding and T, one line on stdout:
//   bench decode pe=.. T=.. batch=.. layers=.. d_model=.. heads=.. decode_tok_s=.. prefix_tok_s=..
//   speedup=.. [key_update_us=.. key_update_share=..]
// decode_tok_s: B / the median time of the decoder's steps at positions T − steps .. T − 1 (the
// cache filled by decoding the positions before). prefix_tok_s: B / the median time of 5 parallel
// forwards over T positions (what producing token T costs without a cache). speedup: their
// ratio, measured in the same run. For PaTH encodings, key_update_us is the time of the
// in-place key update alone (path_key_update over the T − 1 cached keys of each layer and
// sequence, the decoder's step at T), and key_update_share its fraction of a decoding step.
#include <fmt/format.h>
#include <omp.h>

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
#include "models/position/path.h"
#include "runners/commands.h"

namespace pb {
namespace {

struct BenchDecodeOpts {
  std::vector<std::string> pe = {"rope", "path"};
  std::vector<int> lens = {256, 1024, 4096};
  int batch = 1, layers = 2, d_model = 64, heads = 2, ffn = 128, vocab = 16, steps = 32, threads = 0;
};

// The median over `reps` calls of f's wall time, in seconds.
template <class F>
double median_seconds(int reps, F&& f) {
  std::vector<double> s;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(s.begin(), s.begin() + reps / 2, s.end());
  return s[reps / 2];
}

void bench_one(const BenchDecodeOpts& o, const std::string& pe, int T) {
  const ModelConfig cfg{o.vocab, o.layers, o.d_model, o.heads, o.ffn, pe};
  const Transformer<Cpu32> model(cfg, 1);
  Transformer<Cpu32> parallel(cfg, 1);
  const int B = o.batch, steps = std::min(o.steps, T), H = o.heads, D = o.d_model / o.heads;
  std::vector<int32_t> tokens(size_t(B) * T), targets(tokens.size(), -1);  // (B, T)
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i * 7 % o.vocab);
  std::vector<int32_t> column(B);  // (B)
  auto feed = [&](Decoder<Cpu32>& dec, int t) {
    for (int b = 0; b < B; ++b) column[b] = tokens[size_t(b) * T + t];
    dec.step(column.data());
  };
  Decoder<Cpu32> dec(model, B);
  for (int t = 0; t < T - steps; ++t) feed(dec, t);
  int t = T - steps;
  const double step_s = median_seconds(steps, [&] { feed(dec, t++); });
  parallel.forward(tokens.data(), targets.data(), B, T);  // warm-up: buffers allocated
  const double prefix_s = median_seconds(5, [&] { parallel.forward(tokens.data(), targets.data(), B, T); });
  std::string line = fmt::format("bench decode pe={} T={} batch={} layers={} d_model={} heads={} decode_tok_s={:.4g} "
                                 "prefix_tok_s={:.4g} speedup={:.3g}",
                                 pe, T, B, o.layers, o.d_model, H, B / step_s, B / prefix_s, prefix_s / step_s);
  if (encoding_entry(resolve_encoding(pe).name()).info.family == AttentionFamily::Path) {
    Rng rng(1, stream_id("bench decode"), 0);
    std::vector<float> keys(size_t(T) * H * D), w(size_t(H) * D);  // (T, H, D), (H, D)
    for (auto* x : {&keys, &w})
      for (float& v : *x) v = float(rng.normal());
    for (int h = 0; h < H; ++h) {  // unit rows
      double n2 = 0;
      for (int d = 0; d < D; ++d) n2 += double(w[h * D + d]) * w[h * D + d];
      for (int d = 0; d < D; ++d) w[h * D + d] = float(w[h * D + d] / std::sqrt(n2));
    }
    const std::vector<float> beta(H, 1.5f);  // (H)
    const double update_s = median_seconds(steps, [&] {
      for (int l = 0; l < o.layers * B; ++l) path_key_update(keys.data(), w.data(), beta.data(), T - 1, H, D);
    });
    line += fmt::format(" key_update_us={:.4g} key_update_share={:.3f}", update_s * 1e6, update_s / step_s);
  }
  fmt::print("{}\n", line);
  std::fflush(stdout);
}

}  // namespace

void add_bench_decode_command(CLI::App& bench) {
  auto o = std::make_shared<BenchDecodeOpts>();
  auto* cmd = bench.add_subcommand("decode", "Token-by-token decoding vs re-running the prefix (CPU), tokens/s");
  cmd->add_option("--pe", o->pe, "position encoding specs, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--lens", o->lens, "sequence lengths T, comma-separated")->delimiter(',')->capture_default_str();
  cmd->add_option("--batch", o->batch, "sequences decoded together")->capture_default_str();
  cmd->add_option("--layers", o->layers, "layers")->capture_default_str();
  cmd->add_option("--d-model", o->d_model, "model width")->capture_default_str();
  cmd->add_option("--heads", o->heads, "attention heads")->capture_default_str();
  cmd->add_option("--ffn", o->ffn, "SwiGLU hidden width")->capture_default_str();
  cmd->add_option("--steps", o->steps, "decoding steps timed at the end of each length")->capture_default_str();
  cmd->add_option("--threads", o->threads, "OpenMP threads (0: all cores)")->capture_default_str();
  cmd->callback([o] {
    const std::pair<const char*, int> sizes[] = {{"--batch", o->batch},   {"--layers", o->layers},
                                                 {"--d-model", o->d_model}, {"--heads", o->heads},
                                                 {"--ffn", o->ffn},       {"--steps", o->steps}};
    for (const auto& [flag, v] : sizes)
      if (v < 1) fail("{} needs a positive integer, got {}", flag, v);
    for (int T : o->lens)
      if (T < 1 || T > (1 << 20)) fail("--lens: each length must be in [1, 2^20], got {}", T);
    if (o->threads < 0) fail("--threads needs an integer >= 0 (0: all cores), got {}", o->threads);
    if (o->threads > 0) omp_set_num_threads(o->threads);
    for (const auto& pe : o->pe) resolve_encoding(pe);  // every spec checked before the first run
    for (const auto& pe : o->pe)
      for (int T : o->lens) bench_one(*o, pe, T);
  });
}

}  // namespace pb
