// `pathbench eval`: evaluates a run's checkpoint, on its own task or at another `len` of it (length
// generalisation; any other change of the spec is refused). Prints one JSON line per split on
// stdout and appends the rows to the run's eval.jsonl. --decode evaluates token by token with the
// KV cache (runners/decoding.h; on the CPU engine unless --device cuda), its rows marked
// "decode": true; --errors lists the sequences the (parallel) evaluation got wrong: where and what
// it answered, not the sequences themselves, which `pathbench gen --task TASK --split SPLIT --n
// INDEX+1` regenerates (the evaluation's split is the generator's, sequence by sequence). It holds
// the run's lock (runners/run_dir.h) while it reads the checkpoint and appends to eval.jsonl.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/io.h"
#include "runners/commands.h"
#include "runners/csv.h"
#include "runners/decoding.h"
#include "runners/run_dir.h"
#include "runners/trainer.h"

namespace pb {

namespace {

// The sequences of `wrong` as CSV rows: split, example index, the task spec (canonical), the
// counts of wrong and scored targets, the positions of the wrong ones and the tokens predicted
// there (the task's vocabulary names, space-separated, in the same order).
void add_error_rows(Csv& csv, const Task& task, const std::string& split, const std::vector<WrongSequence>& wrong) {
  const auto vocab = task.vocab();
  auto names = [&](const std::vector<int32_t>& ids) {
    std::string s;
    for (const int32_t id : ids) {
      if (!s.empty()) s += ' ';
      s += id >= 0 && size_t(id) < vocab.size() ? vocab[size_t(id)] : std::to_string(id);
    }
    return s;
  };
  const std::string spec = task.spec().canonical();
  for (const auto& w : wrong) {
    std::string at;
    std::vector<int32_t> answered;  // [wrong] the predictions at `at`
    int64_t n_scored = 0;
    for (size_t t = 0; t < w.input.size(); ++t) {
      if (!w.scored[t]) continue;
      ++n_scored;
      if (w.pred[t] == w.target[t]) continue;
      if (!at.empty()) at += ' ';
      at += std::to_string(t);
      answered.push_back(w.pred[t]);
    }
    csv.rows.push_back({split, std::to_string(w.index), spec, std::to_string(answered.size()),
                        std::to_string(n_scored), at, names(answered)});
  }
}

}  // namespace

void add_eval_command(CLI::App& app) {
  struct Opts {
    std::string run, split, task, device = "auto", errors;
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
  cmd->add_option("--errors", o->errors,
                  "write the sequences with a wrong scored target to this CSV (split, index, task, wrong, "
                  "scored, positions, prediction: the wrong targets' positions and what was predicted there; "
                  "`gen` regenerates the sequences)")
      ->type_name("FILE");
  cmd->add_flag("--decode", o->decode,
                "decode token by token with a KV cache (CPU engine unless --device cuda; same results as the "
                "parallel forward)");
  cmd->callback([o] {
    TrainConfig cfg = read_run_config(o->run);
    const RunLock lock = RunLock::take(o->run, "pathbench eval");  // not while a train or sweep writes it
    const auto task = make_task(o->task.empty() ? cfg.task : o->task);
    check_eval_task(make_task(cfg.task)->spec(), task->spec());
    if (o->n < 0 || o->n > kMaxEvalN) fail("--n must be in [1, {}], got {}", kMaxEvalN, o->n);
    if (o->decode && !o->errors.empty()) fail("--errors lists the parallel evaluation's errors: drop --decode");
    cfg.device = o->decode && o->device == "auto" ? "cpu" : o->device;
    TrainConfig at_eval = cfg;  // the run's config checked like a new one, at the evaluated length
    at_eval.task = task->spec().canonical();
    resolve(at_eval);
    const std::string device = select_device(cfg);
    std::vector<int> splits;
    if (!o->split.empty()) splits.push_back(task->split_index(o->split));
    for (int s = 1; o->split.empty() && s < int(task->splits().size()); ++s) splits.push_back(s);
    Csv errors{{"split", "index", "task", "wrong", "scored", "positions", "prediction"}, {}};
    std::unique_ptr<AtomicOutput> errors_out;  // opened first: a bad path is refused before evaluating
    if (!o->errors.empty()) errors_out = std::make_unique<AtomicOutput>(o->errors);
    with_engine(device, [&](auto engine) {
      using E = decltype(engine);
      Transformer<E> model(model_config(cfg, *task), cfg.seed);
      load_checkpoint(model, o->run + "/model.safetensors");
      for (int s : splits) {
        const int n = o->n ? o->n : final_eval_n(cfg, task->splits()[s]);
        const int batch = eval_batch_size(cfg, *task);
        std::vector<WrongSequence> wrong;
        EvalResult r;
        r = o->decode ? evaluate_decoding(model, *task, s, n, batch)
                      : evaluate(model, *task, s, n, batch, errors_out ? &wrong : nullptr);
        add_error_rows(errors, *task, r.split, wrong);
        auto row = eval_row(r, cfg.steps, *task, true);
        if (o->decode) row["decode"] = true;
        append_line(o->run + "/eval.jsonl", row.dump());
        fmt::print("{}\n", row.dump());
      }
    });
    if (errors_out) {
      const std::string text = write_csv(errors);
      errors_out->write(text.data(), text.size());
      errors_out->commit();
    }
  });
}

}  // namespace pb
