// The smallest depth that solves a task, from the runs of a depth sweep: what `table --min-layers`
// prints and `plot --figure min-depth` draws (docs/sweeps.md, table). The rules, in one place:
// - the adaptive depth search runs a configuration (seed, row, column, --best-over value) only up
//   to the first depth that meets its rule; a configuration whose deepest run reaches the
//   threshold on the split the search reads (val) counts at every deeper depth of its cell with
//   that run's rows (fill_skipped_depths);
// - walking up from the shallowest depth, a depth decides a cell only when every seed of the
//   table has a value there, for every --best-over value, or when the seeds present rule it out
//   whatever the pending ones reach (the metric is an accuracy, at most 1: under "mean", the
//   present seeds' sum plus 1 per pending seed stays below threshold × seeds; under "all", a
//   present seed is below the threshold), and with --best-over under every value chosen among,
//   since the pending runs could turn the choice to any; the first depth that is neither ends the
//   walk, undecided (under "any", a seed there that passes decides it).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runners/csv.h"
#include "runners/results.h"

namespace pb {

struct DepthFill {
  size_t filled = 0, short_of = 0;  // (configuration, depth) pairs filled; configurations short
};
// Appends to `csv` a copy of a passing configuration's deepest rows at every deeper depth of its
// cell (a row and column of `config`, the rest of `config` and the seed naming the configuration).
// Passing reads `metric` on `search_split`, the split the depth search read (the selection split,
// val), or on `split` where the configuration has no row of that split ("" when the CSV has no
// split column). Configurations that end below `threshold` before their cell's deepest depth
// (pending or failed runs) are counted, not filled.
DepthFill fill_skipped_depths(Csv& csv, const std::vector<size_t>& rows, std::vector<std::string> config,
                              const std::string& metric, const std::string& split, double threshold,
                              const std::string& search_split);

struct MinDepth {
  enum class Kind { passed, none, undecided } kind = Kind::none;
  std::string depth;     // passed: the smallest depth; none: the deepest, D; undecided: the first depth missing
                         // seeds that the present ones do not rule out
  size_t n = 0, of = 0;  // seeds with a value at `depth` (for every --best-over value); seeds of the table
  bool cap = false;      // none: a run at D ended at its step budget (budget-limited, not unsolved)
  std::string cap_below;  // passed: the depth below it when a run there ended at its step budget short
                          // of the threshold (a smaller depth is not ruled out); "" otherwise
  // Whether seeds are still pending: undecided, or none with only a bound from the seeds present.
  bool pending() const { return kind == Kind::undecided || (kind == Kind::none && n < of); }
};
// --best-over's column and the rows it chose among (the same split and selection as the chosen ones).
struct ChoiceRows {
  std::string key;
  std::vector<size_t> candidates;
};
// Per (row value, column value) of `rows` (one row per seed and depth, --best-over already chosen):
// the smallest `layers` whose mean (by "mean"), best ("any") or worst ("all") `metric` over seeds
// reaches `threshold`. With `choice`, a seed counts at a depth only when every value of
// choice->key in its cell has a row there, and seeds pending rule a depth out only under every
// value (choice->candidates' metric): a pending run of a value not chosen could change the
// choice. `cap` and `cap_below` read collect's `stop` column when the CSV has one.
std::map<std::pair<std::string, std::string>, MinDepth> min_depths(const Csv& csv, const std::vector<size_t>& rows,
                                                                   const std::string& row_col,
                                                                   const std::string& col_col,
                                                                   const std::string& metric, const std::string& by,
                                                                   double threshold, const ChoiceRows* choice = nullptr);
// Whose metric the rule `by` reads, for captions: "the mean", "some seed's", "every seed's".
const char* min_depth_who(const std::string& by);
// "2 (n=3)", "2 (n=3; cap at 1)", "> 5 (cap, n=3)", "> 3 (2 of 3 seeds)" (seeds pending, ruled out
// whatever they reach) or "≥ 3 (1 of 3 seeds)".
std::string min_depth_text(const MinDepth& d);
// One seed's depth, for --per-seed: "2", "2 (cap at 1)", "> 5" or "> 5 (cap)".
std::string min_depth_seed_text(const MinDepth& d);

}  // namespace pb
