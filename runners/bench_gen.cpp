#include "runners/commands.h"

namespace pb {

void add_bench_gen_command(CLI::App& bench) { bench.add_subcommand("gen", "(being written)"); }

}  // namespace pb
