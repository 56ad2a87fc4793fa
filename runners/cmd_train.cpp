// `pathbench train`: one training run into --out DIR (docs/run-format.md).
#include "runners/commands.h"
#include "runners/trainer.h"

namespace pb {

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train one model on one task and evaluate it");
  auto cfg = std::make_shared<TrainConfig>();
  add_train_options(*cmd, *cfg);
  cmd->add_option("--out", cfg->out, "run directory")->type_name("DIR")->required();
  cmd->callback([cfg] {
    resolve(*cfg);
    if (const int rc = run_training(*cfg)) std::exit(rc);
  });
}

}  // namespace pb
