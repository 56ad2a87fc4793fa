// `pathbench gen`: writes n examples of a task split to a binary (training's --data) or jsonl
// file. Every input is checked before any file is created, and the output appears atomically.
#include <fmt/format.h>

#include <chrono>
#include <memory>

#include "core/error.h"
#include "core/spec.h"
#include "runners/commands.h"
#include "tasks/dataset_file.h"

namespace pb {

namespace {

struct GenOptions {
  std::string task, split = "train", n, seed, format = "bin", out, threads = "0";
};

int64_t flag_int(const std::string& flag, const std::string& text, int64_t lo, std::string_view what) {
  int64_t v = 0;
  if (!parse_int(text, v) || v < lo) fail("{} needs {}, got '{}'", flag, what, text);
  return v;
}

void run_gen(const GenOptions& o) {
  const auto task = make_task(o.task);
  const int split = task->split_index(o.split);
  const uint64_t n = static_cast<uint64_t>(flag_int("--n", o.n, 1, "a positive integer"));
  const int threads = static_cast<int>(flag_int("--threads", o.threads, 0, "an integer >= 0 (0: all cores)"));
  const uint64_t seed = o.seed.empty() ? (split == 0 ? 0 : kEvalSeed)
                                       : static_cast<uint64_t>(flag_int("--seed", o.seed, 0, "an integer >= 0"));
  const auto t0 = std::chrono::steady_clock::now();
  if (o.format == "bin") write_dataset_bin(o.out, *task, seed, split, n, threads);
  else write_dataset_jsonl(o.out, *task, seed, split, n, threads);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(stderr, "pathbench: wrote {} examples ({} tokens) of {} split {} seed {} to {} in {:.2f} s\n", n,
             n * task->seq_len(), task->spec().canonical(), o.split, seed, o.out, s);
}

}  // namespace

void add_gen_command(CLI::App& app) {
  auto o = std::make_shared<GenOptions>();
  auto* cmd = app.add_subcommand("gen", "Generate a task split into a dataset file (bin or jsonl)");
  cmd->add_option("--task", o->task, "task spec NAME[:key=value,...], e.g. flipflop:len=512")
      ->type_name("SPEC")
      ->required();
  cmd->add_option("--split", o->split, "split name (train first; eval splits per task)")->capture_default_str();
  cmd->add_option("--n", o->n, "number of examples")->type_name("INT")->required();
  cmd->add_option("--seed", o->seed, "RNG seed (default: 0 for train, pb::kEvalSeed for eval splits)")
      ->type_name("INT");
  cmd->add_option("--format", o->format, "bin (compact, for --data) or jsonl (+ FILE.meta.json)")
      ->check(CLI::IsMember({"bin", "jsonl"}))
      ->capture_default_str();
  cmd->add_option("--out", o->out, "output file (written atomically)")->type_name("FILE")->required();
  cmd->add_option("--threads", o->threads, "OpenMP threads (0: all cores); output is identical for any")
      ->type_name("INT")
      ->capture_default_str();
  cmd->callback([o] { run_gen(*o); });
}

}  // namespace pb
