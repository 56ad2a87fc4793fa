// One function per subcommand; each lives in runners/cmd_<name>.cpp and adds its options and
// callback to the app. Callbacks throw pb::Error for bad input; main() prints it on one line.
#pragma once
#include <CLI/CLI.hpp>

#include "core/error.h"

namespace pb {

// Thrown by a command that stopped cleanly on SIGINT / SIGTERM (a sweep): main() prints the
// message and ends the process by that signal, so the caller sees status 128 + signal.
struct Stopped : Error {
  Stopped(const std::string& message, int sig) : Error(message), signal(sig) {}
  int signal;
};

void add_list_command(CLI::App& app);
void add_gen_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_convert_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_attention_command(CLI::App& app);
void add_bench_train_command(CLI::App& bench);  // `bench train`, in runners/bench_train.cpp
void add_bench_command(CLI::App& app);
void add_bench_gen_command(CLI::App& bench);  // `bench gen`, in runners/bench_gen.cpp
void add_bench_attention_command(CLI::App& bench);  // `bench attention`, in runners/bench_attention.cpp
void add_bench_decode_command(CLI::App& bench);  // `bench decode`, in runners/bench_decode.cpp
void add_sweep_command(CLI::App& app);
void add_collect_command(CLI::App& app);
void add_table_command(CLI::App& app);
void add_plot_command(CLI::App& app);

}  // namespace pb
