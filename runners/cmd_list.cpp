#include "runners/commands.h"

namespace pb {

void add_list_command(CLI::App& app) { app.add_subcommand("list", "(being written)"); }

}  // namespace pb
