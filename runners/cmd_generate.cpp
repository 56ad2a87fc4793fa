// `pathbench generate`: greedy continuations of prompts by a run's checkpoint, decoded token by
// token (runners/decoding.h) on the CPU engine unless --device cuda, printed one line per prompt for
// inspection: "<prompt> | <continuation>" in the task's token names.
#include <fmt/format.h>

#include <sstream>

#include "core/error.h"
#include "core/io.h"
#include "runners/commands.h"
#include "runners/decoding.h"

namespace pb {

namespace {

constexpr int kMaxNew = 1 << 20;

std::string names(const std::vector<int32_t>& ids, const std::vector<std::string>& vocab) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + vocab[id];
  return s;
}

}  // namespace

void add_generate_command(CLI::App& app) {
  struct Opts {
    std::string run, prompts, device = "auto";
    int max_new = 16;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("generate", "Greedy continuations of prompts, decoded token by token");
  cmd->add_option("--run", o->run, "run directory written by `pathbench train`")->type_name("DIR")->required();
  cmd->add_option("--prompts", o->prompts, "one prompt per line: the task's token names separated by spaces")
      ->type_name("FILE")
      ->required();
  cmd->add_option("--max-new", o->max_new, "tokens to generate after each prompt")->capture_default_str();
  cmd->add_option("--device", o->device, "auto (the CPU engine) | cpu | cuda")->capture_default_str();
  cmd->callback([o] {
    if (o->max_new < 1 || o->max_new > kMaxNew) fail("--max-new must be in [1, {}], got {}", kMaxNew, o->max_new);
    TrainConfig cfg = read_run_config(o->run);
    const auto task = make_task(cfg.task);
    const std::vector<std::string> vocab = task->vocab();
    std::vector<std::vector<int32_t>> prompts;
    std::istringstream lines(read_file(o->prompts));
    int line_no = 0;
    for (std::string line; std::getline(lines, line);)
      prompts.push_back(parse_prompt(line, vocab, fmt::format("{}:{}", o->prompts, ++line_no)));
    if (prompts.empty()) fail("{}: no prompts (one per line)", o->prompts);
    cfg.device = o->device == "auto" ? "cpu" : o->device;
    with_engine(select_device(cfg), [&](auto engine) {
      using E = decltype(engine);
      Transformer<E> model(model_config(cfg, *task), cfg.seed);
      load_checkpoint(model, o->run + "/model.safetensors");
      for (const auto& p : prompts)
        fmt::print("{} | {}\n", names(p, vocab), names(greedy_continuation(model, p, o->max_new), vocab));
    });
  });
}

}  // namespace pb
