#include "runners/commands.h"

namespace pb {

void add_bench_command(CLI::App& app) { app.add_subcommand("bench", "(being written)"); }

}  // namespace pb
