#include "runners/commands.h"

namespace pb {

void add_gen_command(CLI::App& app) { app.add_subcommand("gen", "(being written)"); }

}  // namespace pb
