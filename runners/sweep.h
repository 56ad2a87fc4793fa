// Sweep files: `[sweep]` (name, task, seeds), `[base]` (options of every run) and `[grid]` (lists
// whose Cartesian product gives the runs). Keys are the long options of `pathbench train` with
// dashes written as underscores; `task.KEY` / `pe.KEY` append `KEY=value` to the task / encoding
// spec. Expansion order: the [grid] key named by `[sweep] outer` if any, then seeds (an interrupted
// sweep completes whole seeds first), then the task list of [sweep] if it is one, then the other
// [grid] keys in file order, the last varying fastest.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "runners/train_config.h"

namespace pb {

// Value kind of a train option, from its CLI11 type name: 'i' integer, 'f' number, 's' string.
using OptionKinds = std::map<std::string, char>;  // long name with dashes -> kind

struct SweepRun {
  std::vector<std::string> args;  // train options, e.g. {"--task", "flipflop:len=8", "--seed", "0"}
  std::string label;              // the varying values, e.g. "seed=0 pe=path layers=2"
  std::map<std::string, std::string> values;  // every list's key (seed, [grid] keys) -> this run's value
  size_t rank = 0;                // its outer value and seed as one index, in run order
};

struct Sweep {
  std::string name;               // directory name under --out
  std::vector<SweepRun> runs;     // in expansion order
  // [sweep] depth_search = "SPLIT:METRIC>=X" (a StopRule; `layers` must be a [grid] key): a run
  // starts only while no shallower run of its configuration (every value but layers equal) has
  // finished meeting the rule. "" when the sweep has none.
  std::string depth_search;
};

// Parses and expands a sweep file; `path` names it in errors ("FILE:LINE: ..."). Options the sweep
// sets itself (--seed via seeds, --out, --threads) are not valid keys.
Sweep parse_sweep(std::string_view text, const std::string& path, const OptionKinds& options);

// The value options of `pathbench train` (add_train_options) and their kinds.
OptionKinds train_option_kinds();

// The config of `pathbench train ARGS`: ARGS parsed by add_train_options and resolved.
TrainConfig config_of(const std::vector<std::string>& args);
// Its run id.
inline std::string run_id_of(const std::vector<std::string>& args) { return run_id(config_of(args)); }

// `--shard i/n`: the indices i, i+n, i+2n, ... below n_runs (a pb::Error if `shard` is malformed).
std::vector<size_t> shard_indices(size_t n_runs, std::string_view shard);

// `--only KEY=V[,V...]`, repeatable: the indices (in run order) of the runs that have one of the
// listed values of every filter's KEY (a seed or [grid] key; numbers compare by value, so lr=3e-4
// matches 0.0003). A pb::Error names a malformed filter, a KEY that is no such key, and a value no
// run has (a typo would otherwise select nothing).
std::vector<size_t> select_runs(const Sweep& sweep, const std::vector<std::string>& only);

}  // namespace pb
