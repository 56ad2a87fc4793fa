// Stacked runs on the CPU: R runs trained as one model (models/transformer.h) are bit-identical to
// the same runs trained one model each, for every encoding that stacks (walked from the registry
// with its test specs), with and without the k/v convolution; and what cannot stack is refused.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "models/position/position_encoding.h"
#include "stacked_case.h"

using namespace pb;

TEST_CASE("stacked runs: every stacking encoding equals its runs trained alone, bit for bit", "[model][stacked]") {
  int walked = 0;
  for (const auto& e : encodings()) {
    if (!e.info.stacks) continue;
    for (const auto& spec : test_specs(e))
      for (bool kv_conv : {false, true}) {
        INFO(spec << (kv_conv ? " with kv_conv" : ""));
        const test::StackedCase c(spec, kv_conv, {11, 12, 13});
        const auto all = c.train<Cpu32>(3);
        const int64_t n = int64_t(all.params.size()) / 3;
        for (int r = 0; r < 3; ++r) {
          INFO("run " << r);
          const auto alone = c.train<Cpu32>(3, r);
          for (int s = 0; s < 3; ++s) {
            REQUIRE(all.loss[s][r] == alone.loss[s][0]);
            REQUIRE(all.norm[s][r] == alone.norm[s][0]);
          }
          REQUIRE(std::equal(alone.params.begin(), alone.params.end(), all.params.begin() + r * n));
        }
        // the runs differ (their seeds and learning rates), so equality above is not vacuous
        REQUIRE(all.loss[2][0] != all.loss[2][1]);
        ++walked;
      }
  }
  REQUIRE(walked >= 2 * 7);
}

TEST_CASE("stacked runs: refused where they cannot work", "[model][stacked]") {
  ModelConfig cfg{.vocab = 5, .layers = 1, .d_model = 4, .heads = 2, .ffn = 8};
  for (const auto& e : encodings())
    if (!e.info.stacks) {
      cfg.pe = test_spec(e);
      REQUIRE_THROWS_WITH((Transformer<Cpu32>(cfg, std::vector<uint64_t>{1, 2})),
                          Catch::Contains("cannot train stacked runs"));
      REQUIRE_NOTHROW(Transformer<Cpu32>(cfg, std::vector<uint64_t>{1}));
    }
  cfg.pe = "rope";
  Transformer<Cpu32> model(cfg, std::vector<uint64_t>{1, 2});
  const std::vector<int32_t> tok(3 * 4, 1);
  REQUIRE_THROWS_WITH(model.set_batch(tok.data(), tok.data(), 3, 4), Catch::Contains("does not split over 2"));
  TrainStep<Cpu32> step(model);
  REQUIRE_THROWS_WITH(step.launch(AdamWArgs{.lr = 1e-3}), Catch::Contains("1 AdamW arguments for 2"));
  std::vector<float> y(6), x(6), w(4);
  REQUIRE_THROWS_WITH(matmul_forward(y.data(), x.data(), w.data(), 3, 2, 2, GradMode::Overwrite, Runs{2, 4}),
                      Catch::Contains("3 rows do not split evenly over 2"));
}
