// Decoding on the CUDA engine: the decoding ops of kernels/cuda/decode.cu (and rope's position
// offset) against the CPU reference in double, on shapes with B·H > 1 and T not a multiple of the
// kernels' 8 warps, decode_attention also on long caches that it splits into several key slices
// (the last one shorter), twice for the same bits; then, for every registered encoding, the CUDA
// decoder's logits at every position against the double CPU model's parallel forward and against
// the CUDA parallel forward; `eval --decode --device cuda` against `eval --device cuda`; and
// `generate --device cuda` against `generate` on the CPU.
//
// Tolerances (tests/README.md): ops at the fp32 forward policy, relative RMS ≤ 1e-5 and
// elementwise |got − want| ≤ 1e-5·(|want| + RMS(want)), kv_append exact, rope 1e-6 like the
// parallel rope. Whole-model logits: relative RMS ≤ 1e-4 per position, the float-vs-parallel
// bound of tests/test_decode.cpp (two layers of weights ×4 amplify fp32 rounding). The CLI rows:
// equal acc, seq_acc and seq_errors, loss within 1e-5 relative, as the parallel `eval --device
// cuda` against `--device cpu` in test_cuda_model.cpp. generate: the same tokens until the first
// that differs, and there the CPU's logits of the two tokens within 1e-4 of each other (a near tie
// that fp32 rounding may break either way); the rest of that line is not compared.
#include <nlohmann/json.hpp>

#include <cmath>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda/runtime.h"
#include "kernels/cuda/ops.h"
#include "kernels/ops.h"
#include "models/decoder.h"
#include "runners/decoding.h"
#include "tests/check.h"
#include "tests/cli.h"
#include "tests/cuda_check.h"

using namespace pb;
using namespace pb::test;
using Vec = std::vector<double>;
using FVec = std::vector<float>;
using DBuf = cuda::DeviceBuffer<float>;

namespace {

constexpr double kFwdTol = 1e-5, kRopeTol = 1e-6, kModelTol = 1e-4;

DBuf dev(const Vec& v) { return to_device(cast<float>(v)); }
FVec host(const DBuf& d) { return to_host(d); }

double rms(const Vec& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return x.empty() ? 0 : std::sqrt(s / double(x.size()));
}
void check_fwd(const std::string& what, const FVec& got, const Vec& want, double tol = kFwdTol) {
  INFO(what);
  CHECK(rel_rms(got, want) <= tol);
  require_close(what, got, want, tol, tol * rms(want));
}

// (B, H, D, Tmax, T): one token, a warp's worth, T = 37 and 300 (not multiples of 8 warps), full
// caches, D not a multiple of 32.
struct Shape {
  int B, H, D, Tmax, T;
};
const Shape kShapes[] = {{1, 1, 8, 4, 1}, {2, 3, 32, 40, 37}, {3, 2, 64, 300, 300}, {2, 2, 50, 9, 8},
                         {1, 4, 128, 129, 129}};
// decode_attention's key splits (decode.cu, split_keys), S slices of L keys: 6 × 251 (last 246),
// 12 × 250 (last 249, cache not full), 9 × 334 (last 329), 3 × 705 (L0 clamped to the largest
// slice, last 703). kShapes' T = 300 at B·H = 6 is 2 × 150; the others are one slice.
const Shape kSplitShapes[] = {{1, 2, 16, 1501, 1501}, {2, 3, 24, 3100, 2999}, {4, 8, 8, 3001, 3001},
                              {32, 4, 8, 2200, 2113}};

std::string name(const Shape& s) {
  return fmt::format(" B={} H={} D={} Tmax={} T={}", s.B, s.H, s.D, s.Tmax, s.T);
}
DecodeArgs args(const Shape& s) { return {s.B, s.H, s.D, s.Tmax, s.T, 1.0 / std::sqrt(double(s.D))}; }

}  // namespace

TEST_CASE("cuda kv_append and decode_gate write the new token's row", "[cuda][decode]") {
  for (const Shape& s : kShapes) {
    const DecodeArgs a = args(s);
    const size_t cache = size_t(s.B) * s.H * s.Tmax * s.D, row = size_t(s.B) * s.H * s.D;
    const size_t BH = size_t(s.B) * s.H;
    Vec kc = randf(cache, 1), vc = randf(cache, 2), G = randf(BH * s.Tmax, 3), G_sum = randf(BH, 4);
    const Vec k = randf(row, 5), v = randf(row, 6), log_f = randf(BH, 7);
    DBuf gkc = dev(kc), gvc = dev(vc), gG = dev(G), gk = dev(k), gv = dev(v), glf = dev(log_f);
    auto gsum = to_device(G_sum);
    kv_append(kc.data(), vc.data(), k.data(), v.data(), a);
    decode_gate(G.data(), G_sum.data(), log_f.data(), a);
    cuda::kv_append(gkc.data(), gvc.data(), gk.data(), gv.data(), a);
    cuda::decode_gate(gG.data(), gsum.data(), glf.data(), a);
    CHECK(host(gkc) == cast<float>(kc));
    CHECK(host(gvc) == cast<float>(vc));
    check_fwd(std::string("G") + name(s), host(gG), G);
    const Vec got_sum = to_host(gsum);
    for (size_t i = 0; i < BH; ++i) CHECK(got_sum[i] == G_sum[i]);
  }
}

TEST_CASE("cuda decode_attention matches the reference with and without gate and bias", "[cuda][decode]") {
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.insert(shapes.end(), std::begin(kSplitShapes), std::end(kSplitShapes));
  for (const Shape& s : shapes)
    for (const bool gate : {false, true})
      for (const bool bias : {false, true}) {
        const DecodeArgs a = args(s);
        const size_t cache = size_t(s.B) * s.H * s.Tmax * s.D, row = size_t(s.B) * s.H * s.D;
        const int stride = s.Tmax + 3;
        const Vec q = randf(row, 11), kc = randf(cache, 12), vc = randf(cache, 13);
        Vec G = randf(size_t(s.B) * s.H * s.Tmax, 14, 3.0), table = randf(size_t(s.H) * stride, 15);
        Vec o(row);
        decode_attention(o.data(), q.data(), kc.data(), vc.data(), gate ? G.data() : nullptr, a,
                         bias ? table.data() : nullptr, stride);
        DBuf go = poisoned(row), gq = dev(q), gkc = dev(kc), gvc = dev(vc), gG = dev(G), gb = dev(table);
        auto run = [&] {
          cuda::decode_attention(go.data(), gq.data(), gkc.data(), gvc.data(), gate ? gG.data() : nullptr, a,
                                 bias ? gb.data() : nullptr, stride);
          return host(go);
        };
        const FVec got = run();
        const std::string what = fmt::format("decode_attention gate={} bias={}{}", gate, bias, name(s));
        check_fwd(what, got, o);
        INFO(what);
        CHECK(run() == got);  // deterministic: the partials are combined in a fixed order
      }
}

TEST_CASE("cuda path_key_update and decode_stick_breaking match the reference", "[cuda][decode]") {
  for (const Shape& s : kShapes) {
    const DecodeArgs a = args(s);
    const size_t cache = size_t(s.B) * s.H * s.Tmax * s.D, row = size_t(s.B) * s.H * s.D;
    Vec kc = randf(cache, 21);
    const Vec vc = randf(cache, 22), q = randf(row, 23, 3.0);  // large logits: sticks break early
    const Vec w = round_to_float(unit_rows(randn(row, 24), s.D));
    const Vec beta = round_to_float(randu(size_t(s.B) * s.H, 25, 0, 2));
    DBuf gkc = dev(kc), gvc = dev(vc), gq = dev(q), gw = dev(w), gbeta = dev(beta), go = poisoned(row);
    Vec o(row);
    decode_stick_breaking(o.data(), q.data(), kc.data(), vc.data(), a);
    cuda::decode_stick_breaking(go.data(), gq.data(), gkc.data(), gvc.data(), a);
    check_fwd("decode_stick_breaking" + name(s), host(go), o);
    path_key_update(kc.data(), w.data(), beta.data(), a);
    cuda::path_key_update(gkc.data(), gw.data(), gbeta.data(), a);
    check_fwd("path_key_update" + name(s), host(gkc), kc);
  }
}

TEST_CASE("cuda short_conv_step over a sequence matches short_conv_forward's rows", "[cuda][decode]") {
  for (const auto& [B, C] : {std::pair{1, 8}, std::pair{3, 50}, std::pair{2, 256}}) {
    const int T = 5;
    const Vec u = randf(size_t(B) * T * C, 31), a = randf(size_t(3) * C, 32);  // (B, T, C), (3, C)
    Vec y(u.size());
    short_conv_forward(y.data(), u.data(), a.data(), B, T, C);
    DBuf state = dev(Vec(size_t(B) * 2 * C, 0.0)), ga = dev(a), gy = poisoned(size_t(B) * C);
    for (int t = 0; t < T; ++t) {
      Vec ut(size_t(B) * C), want(ut.size());  // (B, C) token t
      for (int b = 0; b < B; ++b)
        for (int c = 0; c < C; ++c) {
          ut[size_t(b) * C + c] = u[(size_t(b) * T + t) * C + c];
          want[size_t(b) * C + c] = y[(size_t(b) * T + t) * C + c];
        }
      DBuf gu = dev(ut);
      cuda::short_conv_step(gy.data(), state.data(), gu.data(), ga.data(), B, C);
      check_fwd(fmt::format("short_conv_step B={} C={} t={}", B, C, t), host(gy), want);
    }
  }
}

TEST_CASE("cuda rope with a position offset matches the reference", "[cuda][decode]") {
  for (const int offset : {0, 1, 37, 4000}) {
    const RopeArgs r{{3, 2, 2, 16}, 10000.0, offset};
    const Vec x = randf(size_t(3) * 2 * 2 * 16, 41);
    Vec out(x.size());
    rope_forward(out.data(), x.data(), r);
    DBuf gx = dev(x), gout = poisoned(x.size());
    cuda::rope_forward(gout.data(), gx.data(), r);
    check_fwd(fmt::format("rope offset={}", offset), host(gout), out, kRopeTol);
  }
}

TEST_CASE("every encoding: CUDA decoded logits match the parallel forwards at every position",
          "[cuda][decode][model]") {
  const int B = 3, T = 37, V = 11;
  for (const auto& entry : encodings()) {
    if (!entry.info.cuda) continue;
    for (const std::string& spec : test_specs(entry)) {
      for (const int heads : {1, 2}) {  // head dims 64 and 32; k and v convolved at 1 head
        const ModelConfig cfg{V, 2, 64, heads, 96, spec, heads == 1};
        INFO(cfg.pe << " heads " << heads);
        // Weights ×4 plus N(0, 0.3²) noise, as tests/test_decode.cpp, so gates and tables matter.
        Transformer<Cpu64> cpu(cfg, 7);
        const Vec noise = randn(cpu.params.params.size(), 8, 0.3);
        std::vector<float> p(noise.size());
        for (size_t i = 0; i < p.size(); ++i) p[i] = float(4 * cpu.params.params[i] + noise[i]);
        for (size_t i = 0; i < p.size(); ++i) cpu.params.params[i] = p[i];
        Transformer<CudaEngine> gpu(cfg, 7);
        gpu.params.from_host(p);
        std::vector<int32_t> tokens(size_t(B) * T), targets(tokens.size(), -1);  // (B, T)
        for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 5 + i / 3) % V);
        cpu.forward(tokens.data(), targets.data(), B, T);
        gpu.forward(tokens.data(), targets.data(), B, T);
        const auto* want = cpu.logits();  // (B, T, V)
        std::vector<float> par(size_t(B) * T * V), got(size_t(B) * V);
        CudaEngine::download(par.data(), gpu.logits(), par.size());
        Decoder<CudaEngine> dec(gpu, B, T);
        std::vector<int32_t> column(B);
        for (int t = 0; t < T; ++t) {
          for (int b = 0; b < B; ++b) column[b] = tokens[size_t(b) * T + t];
          CudaEngine::download(got.data(), dec.step(column.data()), got.size());
          Vec ref, par_t;
          for (int b = 0; b < B; ++b)
            for (int v = 0; v < V; ++v) {
              ref.push_back(want[(size_t(b) * T + t) * V + v]);
              par_t.push_back(par[(size_t(b) * T + t) * V + v]);
            }
          INFO("position " << t);
          CHECK(rel_rms(got, ref) <= kModelTol);
          CHECK(rel_rms(got, par_t) <= kModelTol);
        }
      }
    }
  }
}

TEST_CASE("cli: eval --decode --device cuda gives eval --device cuda's numbers", "[cuda][decode][cli]") {
  for (const char* pe :
       {"rope", "fox", "path_fox:block=3,w_rank=4", "sba", "t5:num_buckets=6,max_distance=8"}) {
    INFO(pe);
    const TempDir tmp("cuda_decode_cli");
    const std::string run = tmp.file("run");
    REQUIRE(run_pathbench(fmt::format("train --task flipflop:len=24 --pe {} --layers 2 --d-model 32 "
                                      "--heads 2 --steps 40 --batch 8 --eval-n 16 --device cpu --out {}",
                                      pe, run)).code == 0);
    auto eval = [&](const std::string& extra) {
      const auto r = run_pathbench("eval --run " + run + " --split val --n 48 --device cuda" + extra);
      INFO(r.err);
      REQUIRE(r.code == 0);
      return nlohmann::json::parse(r.out);
    };
    const auto par = eval(""), dec = eval(" --decode");
    CHECK(dec["decode"] == true);
    CHECK(dec["acc"] == par["acc"]);
    CHECK(dec["seq_acc"] == par["seq_acc"]);
    CHECK(dec["seq_errors"] == par["seq_errors"]);
    CHECK(dec["by_distance"] == par["by_distance"]);
    const double loss = par["loss"].get<double>();
    CHECK(std::abs(dec["loss"].get<double>() - loss) <= 1e-5 * loss);
  }
}

TEST_CASE("cli: bench decode --device cuda prints a line per encoding and length", "[cuda][decode][cli]") {
  const auto r = run_pathbench("bench decode --device cuda --pe path,sba --lens 40,77 --steps 4");
  INFO(r.err);
  REQUIRE(r.code == 0);
  for (const char* want : {"bench decode pe=path T=40 ", "bench decode pe=path T=77 ",
                           "bench decode pe=sba T=40 ", "bench decode pe=sba T=77 "})
    CHECK(r.out.find(want) != std::string::npos);
  CHECK(r.out.find("key_update_us=") != std::string::npos);
}

TEST_CASE("cli: generate --device cuda continues prompts as generate on the CPU", "[cuda][decode][cli]") {
  for (const char* pe : {"rope", "path", "path_fox:block=3,w_rank=4", "sba"}) {
    INFO(pe);
    const TempDir tmp("cuda_generate");
    const std::string run = tmp.file("run"), prompts = tmp.file("prompts.txt");
    REQUIRE(run_pathbench(fmt::format("train --task flipflop:len=24 --pe {} --layers 2 --d-model 32 --heads 2 "
                                      "--steps 60 --batch 8 --lr 3e-3 --eval-n 16 --device cpu --out {}",
                                      pe, run)).code == 0);
    const std::vector<std::string> lines = {"w 1 i i r", "w 0", "i 1 w 0 i i r i r w 1 r"};
    write_file_atomic(prompts, lines[0] + "\n" + lines[1] + "\n" + lines[2] + "\n");
    const auto gen = [&](const char* device) {
      const auto r = run_pathbench(fmt::format("generate --run {} --prompts {} --max-new 9 --device {}", run,
                                               prompts, device));
      INFO(r.err);
      REQUIRE(r.code == 0);
      return r.out;
    };
    std::istringstream cpu_out(gen("cpu")), gpu_out(gen("cuda"));
    const TrainConfig cfg = read_run_config(run);
    const auto task = make_task(cfg.task);
    Transformer<Cpu32> model(model_config(cfg, *task), cfg.seed);
    load_checkpoint(model, run + "/model.safetensors");
    const std::vector<std::string> vocab = task->vocab();
    for (const auto& prompt : lines) {
      std::string want_line, got_line;
      REQUIRE(std::getline(cpu_out, want_line));
      REQUIRE(std::getline(gpu_out, got_line));
      std::istringstream want_words(want_line.substr(want_line.find('|') + 1)),
          got_words(got_line.substr(got_line.find('|') + 1));
      CHECK(got_line.substr(0, got_line.find('|')) == prompt + " ");
      std::vector<int32_t> seq = parse_prompt(prompt, vocab, "prompt");
      for (std::string want, got; want_words >> want;) {
        REQUIRE(got_words >> got);
        if (got != want) {  // allowed only at a near tie of the CPU's logits
          std::vector<int32_t> targets(seq.size(), -1);
          model.forward(seq.data(), targets.data(), 1, int(seq.size()));
          const float* row = model.logits() + (seq.size() - 1) * vocab.size();  // (V)
          const auto id = [&](const std::string& w) { return size_t(std::find(vocab.begin(), vocab.end(), w) - vocab.begin()); };
          INFO(prompt << ": CPU " << want << ", CUDA " << got);
          CHECK(std::abs(row[id(want)] - row[id(got)]) <= 1e-4 * (1 + std::abs(row[id(want)])));
          break;
        }
        seq.push_back(parse_prompt(want, vocab, "token")[0]);
      }
    }
  }
}
