// `pathbench train`: one training run into --out DIR (docs/run-format.md), which it locks
// (runners/run_dir.h; docs/guarantees.md).
#include "runners/commands.h"
#include "runners/run_dir.h"
#include "runners/trainer.h"

namespace pb {

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train one model on one task and evaluate it");
  auto cfg = std::make_shared<TrainConfig>();
  auto overwrite = std::make_shared<bool>(false);
  add_train_options(*cmd, *cfg);
  cmd->add_option("--out", cfg->out, "run directory")->type_name("DIR")->required();
  cmd->add_flag("--overwrite", *overwrite,
                "replace the finished run in --out, or train in a directory that holds other files (they are "
                "left alone)");
  cmd->callback([cfg, overwrite] {
    resolve(*cfg);
    check_before_writing(*cfg);  // a bad device, --gpus or --data is refused before --out is touched
    RunLock lock;
    if (cfg->proc_id <= 0) {  // the process that writes the run directory
      lock = RunLock::take(cfg->out, "pathbench train");
      if (!lock.handed_down()) prepare_run_dir(cfg->out, *overwrite);
    }
    if (const int rc = run_training(*cfg)) std::exit(rc);
  });
}

}  // namespace pb
