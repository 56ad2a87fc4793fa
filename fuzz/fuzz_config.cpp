// A run's config.json as `pathbench eval` reads it (runners/cmd_eval.cpp, train_config.cpp): JSON
// parse, config_from_json, the task of the run and the evaluation sizes of its splits, then the
// model's position encoding.
#include <nlohmann/json.hpp>

#include "fuzz/fuzz.h"
#include "models/position/position_encoding.h"
#include "runners/train_config.h"
#include "tasks/task.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pb;
  fuzz::expect_error([&] {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(fuzz::as_text(data, size));
    } catch (const nlohmann::json::exception& e) {
      fail("not valid JSON: {}", e.what());  // as cmd_eval
    }
    const TrainConfig cfg = config_from_json(j, "config.json");
    const auto task = make_task(cfg.task);
    for (const auto& split : task->splits()) final_eval_n(cfg, split);
    make_encoding<Cpu32>(cfg.pe);
  });
  return 0;
}
