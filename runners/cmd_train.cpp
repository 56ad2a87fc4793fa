// `pathbench train`: one training run into --out DIR (docs/run-format.md), which it locks
// (runners/run_dir.h; docs/guarantees.md); with --resume, the interrupted run in DIR continued
// from its checkpoint (runners/resume.h).
#include <filesystem>

#include "runners/commands.h"
#include "runners/resume.h"
#include "runners/run_dir.h"
#include "runners/trainer.h"

namespace pb {

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train one model on one task and evaluate it");
  auto cfg = std::make_shared<TrainConfig>();
  auto overwrite = std::make_shared<bool>(false);
  auto resume = std::make_shared<bool>(false);
  add_train_options(*cmd, *cfg);
  cmd->add_option("--out", cfg->out, "run directory")->type_name("DIR")->required();
  auto* overwrite_flag = cmd->add_flag(
      "--overwrite", *overwrite,
      "replace the finished run in --out, or train in a directory that holds other files (they are left alone)");
  cmd->add_flag("--resume", *resume,
                "continue the interrupted run in --out from its last checkpoint (resume.safetensors); the options "
                "must give the run's config")
      ->excludes(overwrite_flag);
  cmd->callback([cfg, overwrite, resume] {
    resolve(*cfg);
    check_before_writing(*cfg);  // a bad device, --gpus or --data is refused before --out is touched
    if (*resume && !std::filesystem::is_directory(cfg->out)) fail("--resume: '{}' is not a directory", cfg->out);
    RunLock lock;  // held by the process that writes the run directory
    if (cfg->proc_id <= 0) lock = RunLock::take(cfg->out, "pathbench train");
    if (*resume) {
      const ResumePoint point = read_resume(*cfg);
      if (const int rc = run_training(*cfg, {}, &point)) std::exit(rc);
    } else {
      if (lock.held() && !lock.handed_down()) prepare_run_dir(cfg->out, *overwrite);
      if (const int rc = run_training(*cfg)) std::exit(rc);
    }
  });
}

}  // namespace pb
