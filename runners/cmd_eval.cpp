// `pathbench eval`: evaluates a run's checkpoint, on its own task or at another `len` of it (length
// generalisation; any other change of the spec is refused). Prints one JSON line per split on
// stdout and appends the rows to the run's eval.jsonl. --decode evaluates token by token with the
// KV cache (runners/decoding.h, CPU engine), its rows marked "decode": true.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <type_traits>

#include "core/error.h"
#include "core/io.h"
#include "runners/commands.h"
#include "runners/decoding.h"
#include "runners/trainer.h"

namespace pb {

void add_eval_command(CLI::App& app) {
  struct Opts {
    std::string run, split, task, device = "auto";
    int n = 0;
    bool decode = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("eval", "Evaluate a trained run (optionally on another task spec)");
  cmd->add_option("--run", o->run, "run directory written by `pathbench train`")
      ->type_name("DIR")
      ->required();
  cmd->add_option("--split", o->split, "one split (default: every eval split)");
  cmd->add_option("--task", o->task, "the run's task spec with another len (default: the run's)")->type_name("SPEC");
  cmd->add_option("--n", o->n, "examples per split (default: the run's --eval-n, or its --eval-sizes entry)");
  cmd->add_option("--device", o->device, "auto | cpu | cuda")->capture_default_str();
  cmd->add_flag("--decode", o->decode, "decode token by token with a KV cache (CPU engine; same results as the parallel forward)");
  cmd->callback([o] {
    TrainConfig cfg = read_run_config(o->run);
    const auto task = make_task(o->task.empty() ? cfg.task : o->task);
    check_eval_task(make_task(cfg.task)->spec(), task->spec());
    if (o->n < 0 || o->n > kMaxEvalN) fail("--n must be in [1, {}], got {}", kMaxEvalN, o->n);
    if (o->decode && o->device == "cuda") fail("--decode runs on the CPU engine: use --device cpu or auto");
    cfg.device = o->decode ? "cpu" : o->device;
    TrainConfig at_eval = cfg;  // the run's config checked like a new one, at the evaluated length
    at_eval.task = task->spec().canonical();
    resolve(at_eval);
    const std::string device = select_device(cfg);
    std::vector<int> splits;
    if (!o->split.empty()) splits.push_back(task->split_index(o->split));
    for (int s = 1; o->split.empty() && s < int(task->splits().size()); ++s) splits.push_back(s);
    with_engine(device, [&](auto engine) {
      using E = decltype(engine);
      Transformer<E> model(model_config(cfg, *task), cfg.seed);
      load_checkpoint(model, o->run + "/model.safetensors");
      for (int s : splits) {
        const int n = o->n ? o->n : final_eval_n(cfg, task->splits()[s]);
        const int batch = eval_batch_size(cfg, *task);
        EvalResult r;
        if constexpr (std::is_same_v<E, Cpu32>)
          r = o->decode ? evaluate_decoding(model, *task, s, n, batch) : evaluate(model, *task, s, n, batch);
        else
          r = evaluate(model, *task, s, n, batch);
        auto row = r.to_json(true);
        row["step"] = cfg.steps, row["split"] = r.split, row["task"] = task->spec().canonical();
        row["len"] = task->seq_len();
        if (o->decode) row["decode"] = true;
        append_line(o->run + "/eval.jsonl", row.dump());
        fmt::print("{}\n", row.dump());
      }
    });
  });
}

}  // namespace pb
