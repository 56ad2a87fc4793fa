// Token-by-token decoding (models/decoder.h): for every registered encoding (walked from the
// registry with its test spec), the decoded logits equal the parallel forward's at every position;
// PaTH's in-place key update against brute-force Householder products; `eval --decode` equals
// `eval` on trained runs; `generate` and its refusals.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <Eigen/Dense>
#include <sstream>

#include "check.h"
#include "cli.h"
#include "core/device.h"
#include "core/io.h"
#include "models/decoder.h"
#include "kernels/ops.h"
#include "runners/decoding.h"

using namespace pb;

namespace {

// A model of encoding `spec` with random weights: init × 4 plus N(0, 0.3²) everywhere, so gates,
// β, biases and tables (zero or small at init) are far from trivial.
template <class E>
Transformer<E> random_model(const ModelConfig& cfg) {
  Transformer<E> model(cfg, 7);
  const std::vector<double> noise = test::randn(model.params.params.size(), 8, 0.3);
  for (size_t i = 0; i < noise.size(); ++i)
    model.params.params[i] = typename E::Scalar(4 * model.params.params[i] + noise[i]);
  return model;
}

// The largest relative RMS error over positions of the decoded logits against the parallel forward's.
template <class E>
double decode_error(Transformer<E>& model, int B, int T) {
  const int V = model.config().vocab;
  std::vector<int32_t> tokens(size_t(B) * T), targets(tokens.size(), -1);  // (B, T)
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 5 + i / 3) % V);
  model.forward(tokens.data(), targets.data(), B, T);
  const auto* full = model.logits();  // (B, T, V)
  Decoder<E> dec(model, B, T);
  std::vector<int32_t> column(B);
  double worst = 0;
  for (int t = 0; t < T; ++t) {
    for (int b = 0; b < B; ++b) column[b] = tokens[size_t(b) * T + t];
    const auto* got = dec.step(column.data());  // (B, V)
    std::vector<double> a, want;
    for (int b = 0; b < B; ++b)
      for (int v = 0; v < V; ++v) a.push_back(got[b * V + v]), want.push_back(full[(size_t(b) * T + t) * V + v]);
    worst = std::max(worst, test::rel_rms(a, want));
  }
  return worst;
}

nlohmann::json last_json_line(const std::string& out) {
  const size_t end = out.find_last_not_of('\n');
  const size_t start = out.rfind('\n', end);
  return nlohmann::json::parse(out.substr(start == std::string::npos ? 0 : start + 1, end + 1));
}

// A trained 2-layer flip-flop run of encoding `spec` in `dir`.
void train_small(const std::string& spec, const std::string& dir) {
  TrainConfig c;
  c.task = "flipflop:len=24", c.pe = spec;
  c.layers = 2, c.d_model = 16, c.heads = 2, c.steps = 60, c.batch = 8, c.lr = 3e-3, c.warmup = 5;
  c.eval_n = 16, c.threads = 2, c.out = dir;
  resolve(c);
  REQUIRE(run_training(c) == 0);
}

}  // namespace

TEST_CASE("every position encoding: decoded logits equal the parallel forward's (double)", "[decode]") {
  for (const auto& entry : encodings())
    for (const std::string& spec : test_specs(entry))
      for (const int layers : {1, 2}) {
        const bool kv_conv = layers == 2;  // the k and v convolutions' state, with two layers
        DYNAMIC_SECTION(spec << " layers=" << layers << " kv_conv=" << kv_conv) {
          auto model = random_model<Cpu64>({11, layers, 24, 3, 32, spec, kv_conv});
          CHECK(decode_error(model, 3, 21) <= 1e-9);
          CHECK(decode_error(model, 1, 1) <= 1e-9);
        }
      }
}

// The two algorithms round differently (PaTH's blockwise UT transform against the decoder's key
// updates one token at a time), and so does the instruction set Eigen is built for: path_fox's
// random gates reach 1.7e-4 on an AVX-512 machine, below 1e-4 on the machines before it. A wrong
// cache or state is of order 1, and the double test above holds every encoding to 1e-9.
TEST_CASE("every position encoding: decoded logits agree with the parallel forward in float", "[decode]") {
  for (const auto& entry : encodings())
    for (const std::string& spec : test_specs(entry)) {
      DYNAMIC_SECTION(spec) {
        auto model = random_model<Cpu32>({11, 2, 24, 3, 32, spec});
        CHECK(decode_error(model, 2, 33) <= 1e-3);
      }
    }
}

// After token t, the cache holds H_t ⋯ H_{j+1} k_j for j < t and k_t itself (no H_t on it).
TEST_CASE("path_key_update: the cache holds the Householder products of the parallel definition", "[decode][path]") {
  using Mat = Eigen::MatrixXd;
  const int T = 9, H = 2, D = 5;
  const std::vector<double> k = test::randn(size_t(T) * H * D, 1);  // (T, H, D)
  const std::vector<double> w = test::unit_rows(test::randn(size_t(T) * H * D, 2), D);
  std::vector<double> beta = test::randu(size_t(T) * H, 3, 0, 2);  // (T, H)
  beta[5] = 1e-6, beta[6] = 2 - 1e-6;
  std::vector<double> cache(size_t(H) * T * D);  // (1, H, T, D)
  for (int t = 0; t < T; ++t) {
    const DecodeArgs args{1, H, D, T, t + 1, 1.0};
    path_key_update(cache.data(), w.data() + size_t(t) * H * D, beta.data() + size_t(t) * H, args);
    kv_append(cache.data(), cache.data(), k.data() + size_t(t) * H * D, k.data() + size_t(t) * H * D, args);
    for (int j = 0; j <= t; ++j)
      for (int h = 0; h < H; ++h) {
        Mat P = Mat::Identity(D, D);  // H_t ⋯ H_{j+1}
        for (int s = j + 1; s <= t; ++s) {
          const Eigen::Map<const Eigen::VectorXd> ws(w.data() + (size_t(s) * H + h) * D, D);
          P = (Mat::Identity(D, D) - beta[size_t(s) * H + h] * ws * ws.transpose()) * P;
        }
        const Eigen::VectorXd want = P * Eigen::Map<const Eigen::VectorXd>(k.data() + (size_t(j) * H + h) * D, D);
        const Eigen::Map<const Eigen::VectorXd> got(cache.data() + (size_t(h) * T + j) * D, D);
        INFO("t=" << t << " j=" << j << " h=" << h);
        CHECK((got - want).norm() <= 1e-12 * want.norm());
      }
  }
}

// Evaluated as trained (60 steps: predictions still close to constant) and with the checkpoint
// replaced by random weights (varied predictions at every position).
TEST_CASE("eval --decode gives the accuracies of eval on trained runs, for every encoding", "[decode][cli]") {
  const auto same_eval = [](const std::string& run) {
    for (const char* split : {"val", "val_dense"}) {
      const auto par = test::run_pathbench(fmt::format("eval --run {} --split {} --n 48", run, split));
      const auto dec = test::run_pathbench(fmt::format("eval --run {} --split {} --n 48 --decode", run, split));
      INFO(split << "\n" << par.err << dec.err);
      REQUIRE(par.code == 0);
      REQUIRE(dec.code == 0);
      const auto p = last_json_line(par.out), d = last_json_line(dec.out);
      INFO(p.dump() << "\n" << d.dump());
      CHECK(d["decode"] == true);
      CHECK(d["acc"] == p["acc"]);
      CHECK(d["seq_acc"] == p["seq_acc"]);
      CHECK(d["seq_errors"] == p["seq_errors"]);
      CHECK(d["by_distance"] == p["by_distance"]);
      CHECK(d["n"] == p["n"]);
      CHECK(std::abs(d["loss"].get<double>() - p["loss"].get<double>()) <= 1e-5 * p["loss"].get<double>());
    }
  };
  for (const auto& entry : encodings()) {
    const std::string spec = test_spec(entry);
    DYNAMIC_SECTION(spec) {
      const test::TempDir tmp("decode_eval");
      const std::string run = tmp.file("run");
      train_small(spec, run);
      same_eval(run);
      const TrainConfig cfg = read_run_config(run);
      auto model = random_model<Cpu32>(model_config(cfg, *make_task(cfg.task)));
      save_checkpoint(model, run + "/model.safetensors");
      same_eval(run);
    }
  }
}

TEST_CASE("generate: greedy continuations equal those of re-running the parallel forward", "[decode][cli]") {
  const test::TempDir tmp("generate");
  const std::string run = tmp.file("run");
  train_small("path_fox:block=3,w_rank=4", run);
  const TrainConfig cfg = read_run_config(run);
  const auto task = make_task(cfg.task);
  Transformer<Cpu32> model(model_config(cfg, *task), cfg.seed);
  load_checkpoint(model, run + "/model.safetensors");
  const std::vector<std::string> lines = {"w 1 i i r", "w 0", "i 1 w 0 i i r i r w 1 r"};
  write_file_atomic(tmp.file("prompts.txt"), lines[0] + "\n" + lines[1] + "\n" + lines[2] + "\n");
  const auto r = test::run_pathbench(fmt::format("generate --run {} --prompts {} --max-new 7", run, tmp.file("prompts.txt")));
  INFO(r.err);
  REQUIRE(r.code == 0);
  std::istringstream out(r.out);
  const std::vector<std::string> vocab = task->vocab();
  for (const auto& prompt_text : lines) {
    std::string line;
    REQUIRE(std::getline(out, line));
    std::vector<int32_t> seq = parse_prompt(prompt_text, vocab, "prompt");
    const size_t prompt_len = seq.size();
    for (int i = 0; i < 7; ++i) {  // greedy by the parallel forward over the whole sequence so far
      std::vector<int32_t> targets(seq.size(), -1);
      model.forward(seq.data(), targets.data(), 1, int(seq.size()));
      seq.push_back(model.predictions()[seq.size() - 1]);
    }
    std::string want = prompt_text + " |";
    for (size_t i = prompt_len; i < seq.size(); ++i) want += " " + vocab[seq[i]];
    CHECK(line == want);
    CHECK(greedy_continuation(model, parse_prompt(prompt_text, vocab, "prompt"), 7) ==
          std::vector<int32_t>(seq.begin() + prompt_len, seq.end()));
  }
  std::string extra;
  CHECK_FALSE(std::getline(out, extra));
}

TEST_CASE("generate and eval --decode refuse bad input with one line", "[decode][cli]") {
  const test::TempDir tmp("decode_refusals");
  const std::string run = tmp.file("run");
  train_small("rope", run);
  const auto prompts = [&](const std::string& name, const std::string& text) {
    write_file_atomic(tmp.file(name), text);
    return tmp.file(name);
  };
  test::check_refused(fmt::format("generate --run {} --prompts {}", run, prompts("bad.txt", "w 1\nw 7 r\n")),
                      "bad.txt:2: unknown token '7'; the task's tokens: w r i 0 1");
  test::check_refused(fmt::format("generate --run {} --prompts {}", run, prompts("blank.txt", "w 1\n\nr\n")),
                      "blank.txt:2: empty prompt");
  test::check_refused(fmt::format("generate --run {} --prompts {}", run, prompts("none.txt", "")), "no prompts");
  test::check_refused(fmt::format("generate --run {} --prompts {} --max-new 0", run, prompts("ok.txt", "w 1 r\n")),
                      "--max-new must be in [1,");
  test::check_refused(fmt::format("generate --run {} --prompts {}", run, tmp.file("missing.txt")), "missing.txt");
  test::check_refused(fmt::format("generate --run {}/nothing --prompts {}", run, prompts("ok.txt", "w 1 r\n")),
                      "config.json");
  if (cuda_device_count() == 0) {  // with a GPU, tests/test_cuda_decode.cpp runs them
    test::check_refused(fmt::format("eval --run {} --decode --device cuda", run), "--device cuda: ");
    test::check_refused(fmt::format("generate --run {} --prompts {} --device cuda", run, prompts("ok.txt", "w 1 r\n")),
                        "--device cuda: ");
  }
  test::check_refused(fmt::format("generate --run {} --prompts {} --device tpu", run, prompts("ok.txt", "w 1 r\n")),
                      "--device must be auto, cpu or cuda, got 'tpu'");
  test::check_refused("bench decode --device tpu", "--device must be auto, cpu or cuda, got 'tpu'");
  test::check_refused("bench decode --prefix-max-len 0", "--prefix-max-len needs a positive integer, got 0");
}

TEST_CASE("bench decode times the prefix only up to --prefix-max-len", "[decode][cli]") {
  const auto r = test::run_pathbench("bench decode --device cpu --pe rope --lens 6,9 --steps 2 --threads 1 "
                                     "--prefix-max-len 8");
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Matchers::Contains("pe=rope T=6 batch=1 layers=2 d_model=64 heads=2 decode_tok_s="));
  CHECK_THAT(r.out, Catch::Matchers::Matches("(.|\\n)*T=6 [^\\n]*prefix_tok_s=[0-9][^\\n]*speedup=[0-9](.|\\n)*"));
  CHECK_THAT(r.out, Catch::Matchers::Matches("(.|\\n)*T=9 [^\\n]*prefix_tok_s=- speedup=-(.|\\n)*"));
}

TEST_CASE("bench decode times every registered encoding by default", "[decode][cli]") {
  const auto r = test::run_pathbench("bench decode --device cpu --lens 6 --steps 2 --threads 1");
  INFO(r.err);
  REQUIRE(r.code == 0);
  for (const auto& e : encodings())
    CHECK_THAT(r.out, Catch::Matchers::Contains(fmt::format("bench decode pe={} T=6 ", e.schema.name)));
}

// Decoding rotates one token by rope_forward at its position: the same bits as the parallel
// rotation of the whole sequence, whose table is built from the same double angles.
TEST_CASE("rope_forward with an offset rotates rows as at those positions", "[decode][rope]") {
  const int B = 2, T = 7, H = 3, D = 8, offset = 5, L = offset + T;
  const std::vector<double> x = test::randn(size_t(B) * L * H * D, 4);  // (B, L, H, D)
  std::vector<double> full(x.size()), tail(size_t(B) * T * H * D), want(tail.size()), got(tail.size());
  rope_forward(full.data(), x.data(), RopeArgs{{B, L, H, D}, 10000.0});
  const size_t row = size_t(H) * D;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (size_t i = 0; i < row; ++i) {
        tail[(size_t(b) * T + t) * row + i] = x[(size_t(b) * L + offset + t) * row + i];
        want[(size_t(b) * T + t) * row + i] = full[(size_t(b) * L + offset + t) * row + i];
      }
  rope_forward(got.data(), tail.data(), RopeArgs{{B, T, H, D}, 10000.0, offset});
  CHECK(got == want);
}
