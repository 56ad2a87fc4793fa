// One function per subcommand; each lives in runners/cmd_<name>.cpp and adds its options and
// callback to the app. Callbacks throw pb::Error for bad input; main() prints it on one line.
#pragma once
#include <CLI/CLI.hpp>

namespace pb {

void add_list_command(CLI::App& app);
void add_gen_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_bench_gen_command(CLI::App& bench);  // `bench gen`, in runners/bench_gen.cpp

}  // namespace pb
