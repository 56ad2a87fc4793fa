// Shared by `table` and `plot`: the fixed order and style of the encodings, the order of column
// values, row filters, aggregation over seeds (mean ± sd) with the best over a column, and the
// nested bootstrap interval of a cell from seqstats.csv.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "runners/bootstrap.h"
#include "runners/csv.h"

namespace pb {

// The encodings' legend order is the registry's, their colour and marker their entry's PlotStyle;
// an entry without one, or a name not registered, gets a colour and marker derived from a hash of
// the name (the same on every machine); unregistered names come last.
struct EncodingStyle {
  std::string colour;  // "#rrggbb"
  int sides;           // marker: 0 circle, else a regular polygon
  double rotation;     // degrees (square vs diamond, triangle up vs down)
  std::string dash;    // stroke-dasharray of its lines ("" solid)
};
EncodingStyle encoding_style(std::string_view pe_name);
// The styles of the series `pes` of one figure: encoding_style for the first spec of each name;
// a later spec of the same name (an ablation: "path:conv=0" after "path") a darker or lighter
// shade of its colour, another marker and a dashed line, so that every series can be told apart.
std::vector<EncodingStyle> encoding_styles(const std::vector<std::string>& pes);
// SVG attributes of a line in `style`: stroke, stroke-width and, when dashed, stroke-dasharray.
std::string stroke(const EncodingStyle& style, double width);

// Value order of a column: encodings (pe, pe_name) in the fixed order, numbers numerically, then
// text with the numbers inside it compared as numbers ("rope:base=500" before "rope:base=10000",
// "group=a5,len=8" before "group=a5,len=12"), equal such texts by their characters.
bool value_less(std::string_view column, const std::string& a, const std::string& b);

// Display labels of column values: for spec columns (pe, task, train_task) each spec's name with
// only the parameters that tell it apart from the other specs of that name ("path" and
// "path:conv=0" for "path:w_rank=32,block=64" and "path:w_rank=32,block=64,conv=0"); the values
// themselves when those labels would not be distinct.
std::vector<std::string> labels(std::string_view column, const std::vector<std::string>& values);

// Rows whose `COL=VALUE` conditions all hold; a pb::Error for a malformed condition or an unknown
// column (listing the columns).
std::vector<size_t> select_rows(const Csv& csv, const std::vector<std::string>& where);

// Distinct values of `column` over `rows`, in value order.
std::vector<std::string> distinct(const Csv& csv, const std::vector<size_t>& rows, const std::string& column);

struct Stat {
  double mean = 0, sd = 0;  // sd: sample standard deviation (0 for one seed)
  double min = 0, max = 0;  // over seeds
  size_t n = 0;             // seeds
  std::string best;         // the chosen value of the best-over column ("" if none)
};

using Key = std::vector<std::string>;  // values of the key columns
struct KeyLess {
  std::vector<std::string> columns;
  bool operator()(const Key& a, const Key& b) const;
};
using Cells = std::map<Key, Stat, KeyLess>;

// Groups `rows` by `keys`, averages `metric` over the seed column within each group and, when
// `best_over` names a column, keeps for each group the value of that column with the best mean
// (highest, or lowest when `lower_is_better`). Rows with an empty metric are skipped. Two rows of
// one group with the same seed are a pb::Error naming the columns that tell them apart.
Cells aggregate(const Csv& csv, const std::vector<size_t>& rows, const std::vector<std::string>& keys,
                const std::string& metric, const std::string& best_over, bool lower_is_better);

// The choice of `table --best-over`, made on one selection split and applied to every column: per
// group (values of the `group` columns), the value of `best_over` with the best mean `metric` over
// seeds on the rows `select`. Values whose means are equal tie (a saturated metric: 0 errors at
// several learning rates); `tie_break` (a column, lower is better; "" for none) picks among them,
// and `ties` lists them all, in value order. `values` lists every value compared: a choice at
// either end of three or more is one the grid does not bracket.
struct Choice {
  std::string value;
  double mean = 0, tie = 0;         // of the metric and of the tie-break column, for `value`
  std::vector<std::string> ties;    // every value whose metric mean equals `mean`
  std::string seeds;                // set when the values were compared on some of their seeds only
  std::vector<std::string> values;  // every value compared, in value order
};
std::map<Key, Choice, KeyLess> choose(const Csv& csv, const std::vector<size_t>& select,
                                      const std::vector<std::string>& group, const std::string& metric,
                                      const std::string& best_over, bool lower_is_better, const std::string& tie_break);

// `--best-over KEY --select-on SPLIT` of table and plot: with `where`, the user's --where filters.
struct BestOver {
  std::string key, select_on;
  std::vector<std::string> where;
};
// The rows of `rows` that hold the choice of `choose`: per group of `keys` other than the split,
// the value of o.key with the best mean metric on split o.select_on (in runs.csv, the column
// <metric>_<select_on>), ties broken by the lower mean loss there when the CSV has one. `note`
// gets the choices, with every tied value, and marks a choice at the lowest or highest of three or
// more values compared (the optimum may lie beyond the grid). `name` names the CSV in errors.
std::vector<size_t> chosen_rows(const Csv& csv, const std::string& name, const BestOver& o,
                                const std::string& metric, const std::vector<std::string>& keys,
                                const std::vector<size_t>& rows, bool lower, std::string& note);

double number(const std::string& cell, const std::string& column);  // pb::Error if not a number

// Accuracy columns (acc, seq_acc, acc_<split>, seq_acc_<split>): at most 1, higher is better.
bool is_accuracy(const std::string& column);

// `x` to `digits` significant digits, and more while an x short of `top` (a perfect score: 1, or
// 100 in %) would read as `top`: 99.999, not 100. `top` 0: no such rule.
std::string significant(double x, int digits, double top = 0);

// The rows of each group of `keys` that have a `metric` value, one per seed, in seed order: the
// order the nested bootstrap draws seeds in.
std::map<Key, std::vector<size_t>, KeyLess> cell_rows(const Csv& csv, const std::vector<size_t>& rows,
                                                      const std::vector<std::string>& keys, const std::string& metric);

// The per-sequence error counts of the final evaluations (seqstats.csv), by (run_id, task, split).
using SeqStats = std::map<std::tuple<std::string, std::string, std::string>, SeqHist>;
// seqstats.csv in the directory of `evals_csv`; empty when there is none; an error when only
// seqstats.csv.gz is (not unpacked).
SeqStats seqstats_beside(const std::string& evals_csv);
// The counts of row `r` of an evals.csv; nullptr when seqstats has none (or the CSV lacks run_id,
// task or split), or when their scored targets do not sum to the row's n (a row of a part of the
// evaluation, as in distances.csv).
const SeqHist* row_hist(const Csv& csv, const SeqStats& stats, size_t r);

constexpr int kBootstrapReplicates = 2000;

// A cell's 95% nested bootstrap interval (seeds, then sequences within each seed;
// kBootstrapReplicates replicates, seeded by a hash of the cell's run ids) of metric `m`, from the
// counts of `rows` (one per seed, in seed order; each must have counts). `wrong` and `total` count
// the wrong and the scored targets (for seq_acc: the sequences with an error and with a scored
// target) over all seeds; when wrong == 0 no bootstrap is drawn and the cell is the bound
// "no error in total": error rate < 3/total (the one-sided 95% bound), `ci` left at [0, 0].
struct CellInterval {
  Interval ci;
  int64_t wrong = 0, total = 0;
  bool no_error() const { return wrong == 0 && total > 0; }
  double bound() const { return 3.0 / double(total); }
};
CellInterval cell_interval(const Csv& csv, const SeqStats& stats, const std::vector<size_t>& rows, HistMetric m);

}  // namespace pb
