// Fixtures shared by the collect/table tests (test_results.cpp) and the figure tests
// (test_plot.cpp): the subcommands run in-process, and hand-made CSVs.
#pragma once

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/io.h"
#include "runners/commands.h"
#include "runners/csv.h"

namespace pb::test {

// Runs `pathbench <args>` in-process through the subcommands and returns what it printed on stdout.
inline std::string cli(std::vector<std::string> args) {
  CLI::App app;
  pb::add_collect_command(app);
  pb::add_table_command(app);
  pb::add_plot_command(app);
  std::fflush(stdout);
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / fmt::format("pb_test_sweep_{}_stdout", ::getpid());
  const int saved = ::dup(1);
  std::FILE* f = std::fopen(out.c_str(), "w");
  ::dup2(::fileno(f), 1);
  auto restore = [&] {
    std::fflush(stdout);
    ::dup2(saved, 1);
    ::close(saved);
    std::fclose(f);
  };
  std::reverse(args.begin(), args.end());
  try {
    app.parse(args);
  } catch (...) {
    restore();
    throw;
  }
  restore();
  const std::string printed = pb::read_file(out.string());
  std::filesystem::remove(out);
  return printed;
}

// A hand-made evals.csv: pe × layers × lr × seed on split val (and a second split).
inline std::string evals_csv() {
  pb::Csv c;
  c.header = {"sweep", "run_id", "task", "len", "pe", "pe_name", "layers", "lr", "seed", "split", "n", "acc"};
  auto add = [&](const std::string& pe, int layers, const std::string& lr, int seed, double acc,
                 const std::string& split = "val", int len = 8) {
    c.rows.push_back({"s", fmt::format("{}{}{}{}{}", pe, layers, lr, seed, len), fmt::format("flipflop:len={}", len),
                      std::to_string(len), pe, pe, std::to_string(layers), lr, std::to_string(seed), split, "1000",
                      fmt::format("{}", acc)});
  };
  for (int seed : {0, 1}) {
    add("rope", 1, "0.001", seed, seed ? 0.7 : 0.5);
    add("rope", 2, "0.001", seed, 0.8);
    add("path", 1, "0.001", seed, seed ? 1.0 : 0.9);
    add("path", 2, "0.001", seed, 1.0);
    add("rope", 1, "0.01", seed, seed ? 0.6 : 0.4);   // worse than lr 0.001
    add("rope", 2, "0.01", seed, 0.9);                 // better than lr 0.001
    add("path", 1, "0.01", seed, 0.2);
    add("path", 2, "0.01", seed, 0.3);
    add("rope", 1, "0.001", seed, 0.999, "val_sparse");
  }
  return pb::write_csv(c);
}

// The error-rate example of the bootstrap tests: rope 0.1 and 0.3 over 10,000 reads in 1,000
// sequences per seed, path without an error, fox 0 and 0.002 (an interval reaching 0); with
// seqstats.csv beside evals.csv.
inline std::string bootstrap_csvs(const std::filesystem::path& d) {
  pb::Csv e, q;
  e.header = {"run_id", "task", "pe", "layers", "seed", "split", "n", "n_seqs", "acc", "error_rate"};
  q.header = {"sweep", "run_id", "task", "split", "bins"};
  const std::vector<std::array<std::string, 4>> runs = {
      {"r0", "rope", "0.1", "0:10:500 2:10:500"}, {"r1", "rope", "0.3", "2:10:500 4:10:500"},
      {"p0", "path", "0", "0:10:1000"},           {"p1", "path", "0", "0:10:1000"},
      {"f0", "fox", "0", "0:10:1000"},            {"f1", "fox", "0.002", "0:10:990 2:10:10"}};
  for (const auto& [id, pe, rate, bins] : runs) {
    e.rows.push_back({id, "flipflop:len=8", pe, "1", id.substr(1), "val", "10000", "1000",
                      fmt::format("{}", 1 - std::stod(rate)), rate});
    q.rows.push_back({"s", id, "flipflop:len=8", "val", bins});
  }
  pb::write_file_atomic((d / "seqstats.csv").string(), pb::write_csv(q));
  const std::string csv = (d / "evals.csv").string();
  pb::write_file_atomic(csv, pb::write_csv(e));
  return csv;
}
}  // namespace pb::test
