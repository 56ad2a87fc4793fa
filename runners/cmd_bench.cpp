#include "runners/commands.h"

namespace pb {

void add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks (print figures, never pass/fail)");
  bench->require_subcommand(1);
  add_bench_gen_command(*bench);
  add_bench_train_command(*bench);
  add_bench_attention_command(*bench);
  add_bench_decode_command(*bench);
}

}  // namespace pb
