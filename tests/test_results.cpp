// collect, table and plot, and the CSV format: collect from hand-made run directories, tables
// (selection on one split, seeds, intervals from seqstats.csv) and figures from hand-made CSVs,
// all run in-process through the subcommands.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli.h"
#include "core/io.h"
#include "runners/commands.h"
#include "runners/csv.h"
#include "runners/plot.h"
#include "runners/results.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using pb::test::fresh_dir;

namespace {

// Runs `pathbench <args>` in-process through the subcommands and returns what it printed on stdout.
std::string cli(std::vector<std::string> args) {
  CLI::App app;
  pb::add_collect_command(app);
  pb::add_table_command(app);
  pb::add_plot_command(app);
  std::fflush(stdout);
  const fs::path out = fs::temp_directory_path() / fmt::format("pb_test_sweep_{}_stdout", ::getpid());
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
  fs::remove(out);
  return printed;
}

// A hand-made evals.csv: pe × layers × lr × seed on split val (and a second split).
std::string evals_csv() {
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

// Balanced tags, every '<' closed by '>': enough to catch broken SVG.
bool well_formed(const std::string& xml) {
  std::vector<std::string> stack;
  for (size_t i = xml.find('<'); i != std::string::npos; i = xml.find('<', i + 1)) {
    const size_t end = xml.find('>', i);
    if (end == std::string::npos) return false;
    const std::string tag = xml.substr(i + 1, end - i - 1);
    if (tag[0] == '?' || tag.back() == '/') continue;
    const std::string name = tag.substr(tag[0] == '/', tag.find_first_of(" \n") - (tag[0] == '/'));
    if (tag[0] != '/') stack.push_back(name);
    else if (stack.empty() || stack.back() != name) return false;
    else stack.pop_back();
  }
  return stack.empty();
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t i = s.find(what); i != std::string::npos; i = s.find(what, i + 1)) ++n;
  return n;
}

// The number in attribute `name` of the first element after `from` that has it.
double attr(const std::string& svg, size_t from, const std::string& name) {
  const size_t at = svg.find(" " + name + "=\"", from);
  REQUIRE(at != std::string::npos);
  return std::stod(svg.substr(at + name.size() + 3));
}

// The error-rate example of the bootstrap tests: rope 0.1 and 0.3 over 10,000 reads in 1,000
// sequences per seed, path without an error, fox 0 and 0.002 (an interval reaching 0); with
// seqstats.csv beside evals.csv.
std::string bootstrap_csvs(const fs::path& d) {
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

}  // namespace

TEST_CASE("csv: round trip and quoting", "[sweep]") {
  pb::Csv c;
  c.header = {"a", "b,c", "d"};
  c.rows = {{"1", "say \"hi\"", ""}, {"line\nbreak", "cr\r\nlf", " x "}, {"", "", ""}};
  const std::string text = pb::write_csv(c);
  CHECK(text == "a,\"b,c\",d\r\n1,\"say \"\"hi\"\"\",\r\n\"line\nbreak\",\"cr\r\nlf\", x \r\n,,\r\n");
  const pb::Csv back = pb::parse_csv(text, "t.csv");
  CHECK(back.header == c.header);
  CHECK(back.rows == c.rows);
  const pb::Csv lf = pb::parse_csv("x,y\n1,2\n3,\"4\"", "t.csv");  // LF endings, no final newline
  CHECK(lf.rows == std::vector<std::vector<std::string>>{{"1", "2"}, {"3", "4"}});
  CHECK(lf.column("y") == 1);
  CHECK_THROWS_WITH(lf.column("z"), "no column 'z'; columns: x, y");
}

TEST_CASE("csv: malformed files give the line", "[sweep]") {
  CHECK_THROWS_WITH(pb::parse_csv("a,b\n1,2\n3\n", "f.csv"), "f.csv:3: row has 1 fields, the header has 2");
  CHECK_THROWS_WITH(pb::parse_csv("a,b\n1,\"2\n", "f.csv"), "f.csv:2: unterminated quoted field");
  CHECK_THROWS_WITH(pb::parse_csv("a,b\n1,x\"y\n", "f.csv"), Contains("f.csv:2: quote inside an unquoted field"));
  CHECK_THROWS_WITH(pb::parse_csv("a,b\n1,\"x\"y\n", "f.csv"), Contains("f.csv:2: unexpected 'y' after a closing quote"));
  CHECK_THROWS_WITH(pb::parse_csv("", "f.csv"), "f.csv: empty CSV (expected a header row)");
}

TEST_CASE("table: pivot, best over lr, errors", "[sweep]") {
  const fs::path d = fresh_dir("table");
  const std::string csv = (d / "evals.csv").string();
  pb::write_file_atomic(csv, evals_csv());
  CHECK(cli({"table", csv, "--split", "val", "--where", "lr=0.001"}) ==
        "*acc on val, mean ± sd over seeds (n seeds)*\n\n"
        "| pe \\ layers | 1 | 2 |\n|---|---|---|\n"
        "| rope | 0.600 ± 0.141 (n=2) | 0.800 ± 0.000 (n=2) |\n"
        "| path | 0.950 ± 0.071 (n=2) | 1.000 ± 0.000 (n=2) |\n");
  CHECK(cli({"table", csv, "--split", "val", "--best-over", "lr"}) ==
        "*acc on val, mean ± sd over seeds (n seeds), lr chosen on val*\n\n"
        "| pe \\ layers | 1 | 2 |\n|---|---|---|\n"
        "| rope | 0.600 ± 0.141 (n=2) | 0.900 ± 0.000 (n=2) |\n"
        "| path | 0.950 ± 0.071 (n=2) | 1.000 ± 0.000 (n=2) |\n"
        "\nlr chosen on val by mean acc:\n- pe=rope layers=1: lr = 0.001 (0.6)\n- pe=rope layers=2: lr = 0.01 (0.9)\n"
        "- pe=path layers=1: lr = 0.001 (0.95)\n- pe=path layers=2: lr = 0.001 (1)\n");
  // A pinned column is chosen once: lr picked at layers = 1 is reported at layers = 2 as well, where
  // rope alone would take 0.01 (0.9).
  CHECK_THAT(cli({"table", csv, "--split", "val", "--best-over", "lr", "--select-on", "val,layers=1"}),
             Contains("| rope | 0.600 ± 0.141 (n=2) | 0.800 ± 0.000 (n=2) |\n") &&
                 Contains("lr chosen on val,layers=1 by mean acc:\n- pe=rope: lr = 0.001 (0.6)\n"));
  CHECK_THROWS_WITH(cli({"table", csv, "--split", "val", "--best-over", "lr", "--select-on", "val,layers"}),
                    Contains("--select-on: 'layers' is not COLUMN=VALUE"));
  CHECK_THROWS_WITH(cli({"table", csv, "--split", "val", "--best-over", "lr", "--select-on", "val,depth=1"}),
                    Contains("no column 'depth'"));
  // Chosen on val, reported on every split: val_sparse's better lr (0.01) is not taken.
  pb::Csv c = pb::read_csv(csv);
  c.header.push_back("loss");
  for (auto& r : c.rows) r.push_back(r[7] == "0.001" ? "0.5" : "0.25");  // lr 0.01 has the lower loss
  c.rows.push_back({"s", "x0", "flipflop:len=8", "8", "rope", "rope", "1", "0.01", "0", "val_sparse", "1000", "1", "0"});
  c.rows.push_back({"s", "x1", "flipflop:len=8", "8", "rope", "rope", "1", "0.01", "1", "val_sparse", "1000", "1", "0"});
  pb::write_file_atomic(csv, pb::write_csv(c));
  CHECK_THAT(cli({"table", csv, "--where", "layers=1", "--where", "pe=rope", "--cols", "split", "--best-over", "lr"}),
             Contains("| rope | 0.600 ± 0.141 (n=2) | 0.999 ± 0.000 (n=2) |\n") && Contains("- pe=rope: lr = 0.001 (0.6)"));
  CHECK_THAT(cli({"table", csv, "--where", "layers=1", "--where", "pe=rope", "--cols", "split", "--best-over", "lr",
                  "--select-on", "val_sparse"}),
             Contains("| rope | 0.500 ± 0.141 (n=2) | 1.000 ± 0.000 (n=2) |\n"));
  // A saturated metric: path at 2 layers scores 1 at lr 0.001 and (here) at 0.01; the lower loss picks.
  for (auto& r : c.rows)
    if (r[4] == "path" && r[6] == "2") r[11] = "1";
  pb::write_file_atomic(csv, pb::write_csv(c));
  CHECK_THAT(cli({"table", csv, "--split", "val", "--where", "pe=path", "--best-over", "lr"}),
             Contains("ties broken by the lower mean loss") &&
                 Contains("- pe=path layers=2: lr = 0.01 (1; tied: 0.001, 0.01, mean loss 0.25)"));
  CHECK_THROWS_WITH(cli({"table", csv, "--split", "val", "--best-over", "lr", "--select-on", "test"}),
                    Contains("--select-on test: no rows of that split"));
  pb::write_file_atomic(csv, evals_csv());
  CHECK(cli({"table", csv, "--split", "val_sparse", "--rows", "layers", "--cols", "pe"}) ==
        "*acc on val_sparse, mean ± sd over seeds (n seeds)*\n\n"
        "| layers \\ pe | rope |\n|---|---|\n| 1 | 0.999 ± 0.000 (n=2) |\n");
  CHECK(cli({"table", csv, "--split", "val", "--where", "lr=0.001", "--where", "seed=0", "--metric", "n"}) ==
        "*n on val, mean ± sd over seeds (n seeds)*\n\n| pe \\ layers | 1 | 2 |\n|---|---|---|\n"
        "| rope | 1000 (n=1) | 1000 (n=1) |\n| path | 1000 (n=1) | 1000 (n=1) |\n");
  CHECK_THROWS_WITH(cli({"table", csv, "--split", "val"}),
                    Contains("pe=rope layers=1 has several rows for seed 0 that differ in: lr"));
  CHECK_THROWS_WITH(cli({"table", csv}), Contains("several splits (val, val_sparse); choose one with --split"));
  CHECK_THROWS_WITH(cli({"table", csv, "--split", "val", "--rows", "encoding"}),
                    "no column 'encoding'; columns: sweep, run_id, task, len, pe, pe_name, layers, lr, seed, split, n, acc");
  CHECK_THROWS_WITH(cli({"table", csv, "--split", "test"}), Contains("no rows match"));
  pb::write_file_atomic(csv, "a,b\n1\n");
  CHECK_THROWS_WITH(cli({"table", csv}), Contains("evals.csv:2: row has 1 fields, the header has 2"));
}

TEST_CASE("table: seeds in every cell, min-layers", "[sweep]") {
  const fs::path d = fresh_dir("minlayers");
  const std::string csv = (d / "evals.csv").string();
  pb::Csv c;
  c.header = {"pe", "len", "layers", "seed", "acc"};
  // Seed 0: path reaches 0.9 at 1 layer for len 8 and at 2 for len 16; rope needs 3 for len 8, and
  // for 16 none of its runs (3 layers only) does.
  const std::vector<std::vector<std::string>> rows = {
      {"path:block=64", "8", "1", "0", "0.95"}, {"path:block=64", "8", "2", "0", "0.99"}, {"path:block=64", "16", "1", "0", "0.5"},
      {"path:block=64", "16", "2", "0", "0.91"}, {"rope:base=10000", "8", "1", "0", "0.4"}, {"rope:base=10000", "8", "2", "0", "0.89"},
      {"rope:base=10000", "8", "3", "0", "0.93"}, {"rope:base=10000", "16", "3", "0", "0.6"}};
  c.rows = rows;
  pb::write_file_atomic(csv, pb::write_csv(c));
  CHECK(cli({"table", csv, "--min-layers", "0.9"}) ==
        "*smallest layers where the mean acc ≥ 0.9, n seeds (> D: none up to D layers; cap: a run at D ended at its "
        "step budget, so budget-limited; cap at d: a run at the depth below, d, ended at its step budget short of it, "
        "so a smaller depth is not ruled out; ≥ d (k of n seeds): runs pending at d, undecided; blank: no runs)*\n\n"
        "| pe \\ len | 8 | 16 |\n|---|---|---|\n| rope | 3 (n=1) | > 3 (n=1) |\n| path | 1 (n=1) | 2 (n=1) |\n");
  // With collect's task_len (a word problem's elements, len − 1 with its BOS), columns are labelled by it.
  pb::Csv t = c;
  t.header.push_back("task_len");
  for (auto& row : t.rows) row.push_back(std::to_string(std::stoi(row[1]) - 1));
  pb::write_file_atomic(csv, pb::write_csv(t));
  CHECK_THAT(cli({"table", csv, "--min-layers", "0.9"}), Contains("| pe \\ task_len | 7 | 15 |\n"));
  // With collect's stop column: rope's deepest run at len 16 ended at its budget.
  pb::Csv s = c;
  s.header.push_back("stop");
  for (auto& row : s.rows) row.push_back(row[0] == "rope:base=10000" && row[1] == "16" ? "steps" : "patience 8 (...)");
  pb::write_file_atomic(csv, pb::write_csv(s));
  CHECK_THAT(cli({"table", csv, "--min-layers", "0.9"}), Contains("| rope | 3 (n=1) | > 3 (cap, n=1) |"));
  s.rows.back().back() = "patience 8 (...)";
  pb::write_file_atomic(csv, pb::write_csv(s));
  CHECK_THAT(cli({"table", csv, "--min-layers", "0.9"}), Contains("| rope | 3 (n=1) | > 3 (n=1) |"));
  // A second seed at rope len 8 with 1 and 2 layers: seeds 0 / 1 at 1 layer 0.4 / 0.93, at 2 layers
  // 0.89 / 0.95; at 3 layers seed 0's 0.93 alone, seed 1's run pending.
  c.rows.push_back({"rope:base=10000", "8", "1", "1", "0.93"});
  c.rows.push_back({"rope:base=10000", "8", "2", "1", "0.95"});
  pb::write_file_atomic(csv, pb::write_csv(c));
  CHECK_THAT(cli({"table", csv, "--min-layers", "0.9", "--min-layers-by", "any"}),
             Contains("where some seed's acc ≥ 0.9") && Contains("| rope | 1 (n=2) | ≥ 3 (1 of 2 seeds) |"));
  // The mean passes at 2 layers (0.92). Cells without seed 1 decide nothing: its runs are pending.
  CHECK_THAT(cli({"table", csv, "--min-layers", "0.9"}),
             Contains("| rope | 2 (n=2) | ≥ 3 (1 of 2 seeds) |\n| path | ≥ 1 (1 of 2 seeds) | ≥ 1 (1 of 2 seeds) |"));
  // Every seed: not at 2 layers (0.89); at 3 layers seed 1 counts with its 0.95 at 2 (it passed
  // there, so a depth search would not run 3) and seed 0 passes.
  CHECK_THAT(cli({"table", csv, "--min-layers", "0.9", "--min-layers-by", "all"}),
             Contains("where every seed's acc ≥ 0.9") && Contains("| rope | 3 (n=2) |"));
  CHECK_THAT(cli({"table", csv, "--min-layers", "0.9", "--per-seed"}),
             Contains("| rope | s0 3, s1 1 | s0 > 3 |\n| path | s0 1 | s0 2 |"));
  c.rows = rows;
  c.rows.push_back({"rope:base=10000", "8", "3", "1", "0.95"});
  pb::write_file_atomic(csv, pb::write_csv(c));
  CHECK(cli({"table", csv, "--where", "len=8"}) ==
        "*acc, mean ± sd over seeds (n seeds)*\n\n| pe \\ layers | 1 | 2 | 3 |\n|---|---|---|---|\n"
        "| rope | 0.400 (n=1) | 0.890 (n=1) | 0.940 ± 0.014 (n=2) |\n| path | 0.950 (n=1) | 0.990 (n=1) |  |\n");
}

TEST_CASE("table: nested bootstrap intervals from seqstats.csv, bounds for zero errors, per seed, percent", "[sweep]") {
  const fs::path d = fresh_dir("bootstrap");
  const std::string csv = (d / "evals.csv").string(), seqs = (d / "seqstats.csv").string();
  pb::Csv e, q;
  e.header = {"run_id", "task", "pe", "layers", "seed", "split", "n", "error_rate"};
  q.header = {"sweep", "run_id", "task", "split", "bins"};
  // rope: error rates 0.1 and 0.3 over 10,000 reads in 1,000 sequences; path: no error at all.
  const std::vector<std::array<std::string, 4>> runs = {{"r0", "rope", "0.1", "0:10:500 2:10:500"},
                                                         {"r1", "rope", "0.3", "2:10:500 4:10:500"},
                                                         {"p0", "path", "0", "0:10:1000"},
                                                         {"p1", "path", "0", "0:10:1000"}};
  for (const auto& [id, pe, rate, bins] : runs) {
    e.rows.push_back({id, "flipflop:len=8", pe, "1", id.substr(1), "val", "10000", rate});
    q.rows.push_back({"s", id, "flipflop:len=8", "val", bins});
  }
  pb::write_file_atomic(csv, pb::write_csv(e));
  pb::write_file_atomic(seqs, pb::write_csv(q));
  const std::vector<std::string> args = {"table", csv, "--metric", "error_rate"};
  const std::string t = cli(args);
  CHECK(t == cli(args));  // the interval's resampling is seeded by the cell's runs
  CHECK_THAT(t, Contains("nested bootstrap interval"));
  CHECK_THAT(t, Contains("| path | < 0.00015 (0 of 20000, n=2) |"));  // 3 / 20,000 reads
  // rope: the mean 0.2; the seed resampling spreads the interval to about the two seeds' values.
  const auto at = t.find("| rope | 0.2 [");
  REQUIRE(at != std::string::npos);
  double lo = 0, hi = 0;
  REQUIRE(std::sscanf(t.c_str() + at, "| rope | 0.2 [%lf, %lf] (n=2) |", &lo, &hi) == 2);
  CHECK(lo == Approx(0.1).margin(0.01));
  CHECK(hi == Approx(0.3).margin(0.01));
  CHECK_THAT(cli({"table", csv, "--metric", "error_rate", "--percent"}),
             Contains("| rope | 20 [") && Contains("| path | < 0.015 (0 of 20000, n=2) |"));
  CHECK_THAT(cli({"table", csv, "--metric", "error_rate", "--per-seed"}),
             Contains("| rope | s0 0.1, s1 0.3 |") && Contains("| path | s0 0, s1 0 |"));
  CHECK_THAT(cli({"table", csv, "--metric", "n", "--per-seed"}), Contains("| rope | s0 10000, s1 10000 |"));  // not 1e+04
  // A run without counts: the whole table falls back to mean ± sd.
  q.rows.pop_back();
  pb::write_file_atomic(seqs, pb::write_csv(q));
  CHECK_THAT(cli(args), Contains("mean ± sd over seeds") && Contains("| rope | 0.2 ± 0.14 (n=2) |"));
  q.rows[0][4] = "0:10";
  pb::write_file_atomic(seqs, pb::write_csv(q));
  CHECK_THROWS_WITH(cli(args), Contains("seqstats.csv:2: bins must be 'wrong:scored:sequences ...'"));
}

TEST_CASE("plot: deterministic, well-formed, one series per encoding", "[sweep]") {
  const fs::path d = fresh_dir("plot");
  const std::string csv = (d / "evals.csv").string();
  pb::write_file_atomic(csv, evals_csv());
  const std::string a = (d / "a.svg").string(), b = (d / "b.svg").string();
  cli({"plot", csv, "--figure", "acc-vs-depth", "--split", "val", "-o", a});
  cli({"plot", csv, "--figure", "acc-vs-depth", "--split", "val", "-o", b});
  const std::string svg = pb::read_file(a);
  CHECK(svg == pb::read_file(b));
  CHECK(well_formed(svg));
  CHECK(count(svg, "<g class=\"panel\"") == 1);
  CHECK(count(svg, "<g class=\"series\"") == 2);
  CHECK(count(svg, "data-pe=\"rope\"") == 1);
  CHECK_THAT(svg, Contains("lr chosen per encoding on val, as in table"));
  CHECK_THAT(svg, Contains("± 1 sd over seeds (no seqstats.csv"));
  CHECK(svg.find("data-pe=\"rope\"") < svg.find("data-pe=\"path\""));  // legend/encoding order

  // Error rates on a log axis: zero errors (path, 2 layers) drawn as open markers at 3/N, N the
  // reads of both seeds.
  cli({"plot", csv, "--figure", "error-rate", "--where", "lr=0.001", "-o", a});
  const std::string err = pb::read_file(a);
  CHECK(well_formed(err));
  CHECK(count(err, "<g class=\"panel\"") == 2);  // one per depth
  CHECK(count(err, "<g class=\"series\"") == 4);
  CHECK(count(err, "data-bound=\"1\"") == 1);
  CHECK(attr(err, err.rfind("<g", err.find("data-bound")), "data-y") == Approx(3.0 / 2000));
  CHECK_THAT(err, Contains("upper bound 3/N") && Contains("fill=\"#ffffff\""));

  // Two lengths: one panel each; acc-vs-length puts len on the x axis instead.
  pb::Csv c = pb::parse_csv(evals_csv(), "x");
  for (auto row : pb::parse_csv(evals_csv(), "x").rows) {
    row[1] += "-16", row[2] = "flipflop:len=16", row[3] = "16";
    c.rows.push_back(row);
  }
  pb::write_file_atomic(csv, pb::write_csv(c));
  cli({"plot", csv, "--figure", "acc-vs-depth", "--split", "val", "-o", a});
  CHECK(count(pb::read_file(a), "<g class=\"panel\"") == 2);
  cli({"plot", csv, "--figure", "acc-vs-length", "--split", "val", "-o", a});
  const std::string len = pb::read_file(a);
  CHECK(count(len, "<g class=\"panel\"") == 2);  // one per depth
  CHECK(well_formed(len));

  CHECK_THROWS_WITH(cli({"plot", csv, "--figure", "acc-vs-depth", "-o", a}), Contains("several splits"));
  CHECK_THROWS_WITH(cli({"plot", csv, "--figure", "acc-vs-depth", "--split", "val", "--metric", "seq_acc", "-o", a}),
                    Contains("no column 'seq_acc'; columns: sweep, run_id"));
}

TEST_CASE("plot: panels and rows in numeric order, also inside specs", "[sweep]") {
  CHECK(pb::value_less("pe", "rope:base=500", "rope:base=10000"));
  CHECK(pb::value_less("task", "wordproblem:group=a5,len=8", "wordproblem:group=a5,len=12"));
  CHECK(pb::value_less("task", "flipflop:len=512,p_ignore=0.8", "flipflop:len=512,p_ignore=0.85"));
  CHECK(pb::value_less("split", "val", "val_dense"));
  CHECK_FALSE(pb::value_less("task", "a:len=12", "a:len=12"));
  CHECK(pb::value_less("x", "a:len=08", "a:len=8"));  // equal as numbers: by characters
  const fs::path d = fresh_dir("plot_order");
  const std::string csv = (d / "evals.csv").string(), a = (d / "a.svg").string();
  pb::Csv c = pb::parse_csv(evals_csv(), "x"), lens = c;
  lens.rows.clear();
  for (const char* len : {"12", "4", "16", "8"})
    for (auto row : c.rows) {
      row[1] += std::string("-") + len, row[2] = std::string("flipflop:len=") + len, row[3] = len;
      lens.rows.push_back(row);
    }
  pb::write_file_atomic(csv, pb::write_csv(lens));
  cli({"plot", csv, "--figure", "acc-vs-depth", "--split", "val", "-o", a});
  const std::string svg = pb::read_file(a);
  CHECK(count(svg, "<g class=\"panel\"") == 4);
  const size_t p4 = svg.find(">flipflop:len=4<"), p8 = svg.find(">flipflop:len=8<"),
               p12 = svg.find(">flipflop:len=12<"), p16 = svg.find(">flipflop:len=16<");
  REQUIRE(p16 != std::string::npos);
  CHECK((p4 < p8 && p8 < p12 && p12 < p16));
  CHECK_THAT(cli({"table", csv, "--split", "val", "--where", "lr=0.001", "--where", "layers=1", "--rows", "task",
                  "--cols", "pe"}),
             Contains("| flipflop:len=4 | 0.600") && Contains("| flipflop:len=16 | 0.600"));
  const std::string t = cli({"table", csv, "--split", "val", "--where", "lr=0.001", "--where", "layers=1", "--rows",
                             "task", "--cols", "pe"});
  CHECK(t.find("len=4 |") < t.find("len=8 |"));
  CHECK(t.find("len=8 |") < t.find("len=12 |"));
}

TEST_CASE("plot: the intervals of table, bounds for zero errors, nothing below the axis floor", "[sweep]") {
  const fs::path d = fresh_dir("plot_intervals");
  const std::string csv = bootstrap_csvs(d), a = (d / "a.svg").string(), b = (d / "b.svg").string();
  cli({"plot", csv, "--figure", "error-rate", "-o", a});
  cli({"plot", csv, "--figure", "error-rate", "-o", b});
  const std::string svg = pb::read_file(a);
  CHECK(svg == pb::read_file(b));
  CHECK(well_formed(svg));
  CHECK_THAT(svg, Contains("95% nested bootstrap interval") && Contains("n = 1000 sequences per evaluation; 2 seeds"));
  CHECK_THAT(svg, Contains("flipflop:len=8: error rate (1 − acc) on val"));
  // Each point's interval is the one `table` prints for the same cell.
  const std::string t = cli({"table", csv, "--metric", "error_rate"});
  for (const std::string pe : {"rope", "fox"}) {
    const size_t at = t.find("| " + pe + " | ");
    REQUIRE(at != std::string::npos);
    double mean = 0, lo = 0, hi = 0;
    REQUIRE(std::sscanf(t.c_str() + at + pe.size() + 5, "%lf [%lf, %lf]", &mean, &lo, &hi) == 3);
    const size_t g = svg.find("data-pe=\"" + pe + "\"");
    REQUIRE(g != std::string::npos);
    CHECK(attr(svg, g, "data-y") == Approx(mean).epsilon(1e-3));
    CHECK(attr(svg, g, "data-lo") == Approx(lo).epsilon(1e-3).margin(1e-12));
    CHECK(attr(svg, g, "data-hi") == Approx(hi).epsilon(1e-3));
  }
  // path made no error in 20,000 reads: the bound 3/20,000, as table's "< 0.00015".
  CHECK_THAT(t, Contains("| path | < 0.00015 (0 of 20000, n=2) |"));
  const size_t path = svg.find("data-pe=\"path\"");
  CHECK(attr(svg, path, "data-bound") == 1);
  CHECK(attr(svg, path, "data-y") == Approx(0.00015));
  CHECK_THAT(svg, Contains("upper bound 3/N") && Contains("continues beyond the axis"));
  // Every bar, arrow and circle of the points lies inside the panel's frame.
  const size_t frame = svg.rfind("<rect", svg.find("class=\"frame\""));
  const double top_y = attr(svg, frame, "y"), floor_y = top_y + attr(svg, frame, "height");
  const size_t first = svg.find("<g class=\"series\""), last = svg.find("<g class=\"legend\"");
  size_t checked = 0;
  for (const std::string name : {"y1", "y2", "cy"})
    for (size_t i = svg.find(" " + name + "=\"", first); i < last; i = svg.find(" " + name + "=\"", i + 1)) {
      const double y = attr(svg, i, name);
      CHECK(y <= floor_y + 1e-9);
      CHECK(y >= top_y - 1e-9);
      ++checked;
    }
  CHECK(checked > 10);
  // The geometry: an interval reaching 0 ends at the axis floor without a cap.
  const pb::YAxis axis = pb::log_axis({0.002, 0.0005});
  CHECK(axis.lo == -4);
  const pb::Scale sy{axis.lo, axis.hi, 200, 0};
  const pb::Bar bar = pb::clip_bar(0, 0.01, axis, sy);
  CHECK(bar.y_lo == 200);
  CHECK_FALSE(bar.cap_lo);
  CHECK(bar.cap_hi);
  CHECK(bar.y_hi == Approx(100));
  // Without seqstats.csv: ± 1 sd, and the caption says so; zeros still bounded by 3/N.
  fs::remove(d / "seqstats.csv");
  cli({"plot", csv, "--figure", "error-rate", "-o", a});
  const std::string sd = pb::read_file(a);
  CHECK_THAT(sd, Contains("± 1 sd over seeds (no seqstats.csv") && Contains("data-bound=\"1\""));
  CHECK_THROWS_WITH(cli({"plot", csv, "--figure", "bars", "-o", a}), Contains("--figure bars: unknown"));
  CHECK_THROWS_WITH(cli({"plot", csv, "--figure", "error-rate", "--metric", "loss", "-o", a}),
                    Contains("only --figure curves"));
}

TEST_CASE("plot: learning curves from history.csv, lr chosen on the final evaluation", "[sweep]") {
  const fs::path d = fresh_dir("plot_curves");
  const std::string history = (d / "history.csv").string(), a = (d / "a.svg").string(), b = (d / "b.svg").string();
  pb::Csv h, e;
  h.header = {"run_id", "task", "pe", "d_model", "lr", "seed", "split", "step", "n_seqs", "acc", "loss"};
  e.header = h.header;
  // acc at steps 100 and 200; rope's lr 0.01 ends best, path's lr 0.001.
  for (const std::string pe : {"rope", "path"})
    for (const std::string w : {"128", "64"})
      for (const std::string lr : {"0.001", "0.01"})
        for (int seed : {0, 1}) {
          const bool good = (pe == "rope") == (lr == "0.01");
          const double end = (good ? 0.9 : 0.6) + 0.02 * seed, loss = 1 - end;
          const std::string id = pe + w + lr + std::to_string(seed);
          for (int step : {100, 200})
            h.rows.push_back({id, "flipflop:len=8", pe, w, lr, std::to_string(seed), "val", std::to_string(step),
                              "64", fmt::format("{}", step == 200 ? end : 0.5), fmt::format("{}", loss)});
          h.rows.push_back({id, "flipflop:len=8", pe, w, lr, std::to_string(seed), "val_sparse", "200", "64", "0.5",
                            "1"});
          e.rows.push_back(h.rows[h.rows.size() - 2]);
          e.rows.back()[8] = "1024";
        }
  pb::write_file_atomic(history, pb::write_csv(h));
  CHECK_THROWS_WITH(cli({"plot", history, "--figure", "curves", "-o", a}), Contains("several splits"));
  cli({"plot", history, "--figure", "curves", "--split", "val", "-o", a});
  cli({"plot", history, "--figure", "curves", "--split", "val", "-o", b});
  std::string svg = pb::read_file(a);
  CHECK(svg == pb::read_file(b));
  CHECK(well_formed(svg));
  CHECK(count(svg, "<g class=\"panel\"") == 2);
  CHECK(svg.find(">d_model=64<") < svg.find(">d_model=128<"));
  CHECK(count(svg, "<g class=\"series\"") == 4);
  CHECK(count(svg, "class=\"band\"") == 4);
  CHECK_THAT(svg, Contains("rope (lr 0.01): acc 0.91 at step 200 (min 0.9, max 0.92 over 2 seeds)"));
  CHECK_THAT(svg, Contains("path (lr 0.001): acc 0.91 at step 200"));
  CHECK_THAT(svg, Contains("on val of the last evaluation of each run") && Contains("accuracy on val vs training step"));
  // With evals.csv beside it, the choice is made there (here it prefers the other lr).
  for (auto& row : e.rows) row[9] = row[4] == "0.001" ? "0.99" : "0.1";
  pb::write_file_atomic((d / "evals.csv").string(), pb::write_csv(e));
  cli({"plot", history, "--figure", "curves", "--split", "val", "--metric", "loss", "-o", a});
  svg = pb::read_file(a);
  CHECK_THAT(svg, Contains("rope (lr 0.001): loss") && Contains("path (lr 0.001): loss"));
  CHECK_THAT(svg, Contains("mean acc on val of the final evaluation (evals.csv)"));
  CHECK_THROWS_WITH(cli({"plot", history, "--figure", "curves", "--split", "val", "--metric", "seq_acc", "-o", a}),
                    Contains("no column 'seq_acc'"));
  // rope (d_model 128, lr 0.01) seed 1 stopped at step 100 (acc 0.5): it counts there at step 200.
  fs::remove(d / "evals.csv");
  std::erase_if(h.rows, [](const auto& r) { return r[0] == "rope1280.011" && r[6] == "val" && r[7] == "200"; });
  pb::write_file_atomic(history, pb::write_csv(h));
  cli({"plot", history, "--figure", "curves", "--split", "val", "-o", a});
  CHECK_THAT(pb::read_file(a), Contains("rope (lr 0.01): acc 0.7 at step 200 (min 0.5, max 0.9 over 2 seeds)") &&
                                   Contains("1 runs stopped early"));
}

TEST_CASE("collect: runs.csv, evals.csv and history.csv from run directories", "[sweep]") {
  const fs::path d = fresh_dir("collect");
  const fs::path sweep = d / "runs" / "quick";
  fs::create_directories(sweep / "aaaa");
  fs::create_directories(sweep / "bbbb");
  fs::create_directories(sweep / "cccc");
  pb::write_file_atomic((sweep / "sweep.toml").string(), "");
  pb::write_file_atomic((sweep / "aaaa" / "config.json").string(),
                        R"({"task": "flipflop:len=8,p_ignore=0.8", "pe": "path", "layers": 1, "d_model": 16,
                            "heads": 2, "lr": 0.001, "steps": 20, "batch": 4, "seed": 3, "device": "auto"})");
  pb::write_file_atomic((sweep / "aaaa" / "meta.json").string(), R"({"commit": "abc123", "device": "cpu"})");
  pb::write_file_atomic((sweep / "aaaa" / "result.json").string(),
                        R"({"status": "ok", "error": null, "wall_s": 1.5, "final_loss": 0.25, "steps": 20,
                            "stop": "steps", "eval_s": 0.5, "eval": {"val": {"acc": 0.9, "seq_acc": 0.5}}})");
  pb::write_file_atomic((sweep / "aaaa" / "eval.jsonl").string(),
                        "{\"step\": 10, \"split\": \"val\", \"task\": \"flipflop:len=8,p_ignore=0.8\", \"len\": 8, "
                        "\"acc\": 0.5, \"seq_acc\": 0.1, \"n\": 100, \"n_seqs\": 10}\n"
                        "{\"step\": 20, \"split\": \"val\", \"task\": \"flipflop:len=8,p_ignore=0.8\", \"len\": 8, "
                        "\"acc\": 0.8, \"seq_acc\": 0.4, \"n\": 50, \"n_seqs\": 5}\n"  // periodic, then the final
                        "{\"step\": 20, \"split\": \"val\", \"task\": \"flipflop:len=8,p_ignore=0.8\", \"len\": 8, "
                        "\"acc\": 0.9, \"seq_acc\": 0.5, \"n\": 100, \"n_seqs\": 10, "
                        "\"seq_errors\": [[0, 10, 5], [2, 10, 5]]}\n"
                        "{\"step\": 20, \"split\": \"val\", \"task\": \"flipflop:len=16,p_ignore=0.8\", \"len\": 16, "
                        "\"acc\": 1, \"seq_acc\": 1, \"n\": 200, \"n_seqs\": 10}\n");
  pb::write_file_atomic((sweep / "bbbb" / "config.json").string(), R"({"task": "flipflop"})");  // pending
  pb::write_file_atomic((sweep / "cccc" / "result.json").string(),
                        R"({"status": "failed", "error": "killed by signal 9, \"x\"", "run_id": "cccc"})");
  const std::string out = (d / "out").string();
  cli({"collect", (d / "runs").string(), "-o", out});
  const pb::Csv runs = pb::read_csv(out + "/runs.csv");
  REQUIRE(runs.rows.size() == 2);
  CHECK(runs.header.front() == "sweep");
  const std::vector<std::string> tail(runs.header.end() - 11, runs.header.end());
  CHECK(tail == std::vector<std::string>{"stopped_at_step", "eval_s", "task_len", "task_p_ignore", "pe_beta_clip",
                                         "pe_beta_max", "pe_block", "pe_conv", "pe_w_rank", "acc_val", "seq_acc_val"});
  auto get = [](const pb::Csv& c, size_t r, const char* col) { return c.rows[r][c.column(col)]; };
  CHECK(get(runs, 0, "sweep") == "quick");
  CHECK(get(runs, 0, "run_id") == "aaaa");
  CHECK(get(runs, 0, "task_name") == "flipflop");
  CHECK(get(runs, 0, "task_len") == "8");
  // Every key of the encoding's schema, those the canonical form leaves out at their defaults too.
  CHECK(get(runs, 0, "pe_w_rank") == "32");
  CHECK(get(runs, 0, "pe_conv") == "1");
  CHECK(get(runs, 0, "lr") == "0.001");
  CHECK(get(runs, 0, "device") == "cpu");
  CHECK(get(runs, 0, "acc_val") == "0.9");
  CHECK(get(runs, 1, "status") == "failed");
  CHECK(get(runs, 1, "error") == "killed by signal 9, \"x\"");
  const pb::Csv evals = pb::read_csv(out + "/evals.csv");
  REQUIRE(evals.rows.size() == 2);
  CHECK(get(evals, 0, "task") == "flipflop:len=8,p_ignore=0.8");
  CHECK(get(evals, 0, "step") == "20");
  CHECK(get(evals, 0, "acc") == "0.9");
  CHECK(get(evals, 0, "error_rate") == "0.1");
  CHECK(std::stod(get(evals, 0, "acc_ci_low")) == Approx(0.8256).margin(1e-4));
  CHECK(std::stod(get(evals, 0, "acc_ci_high")) == Approx(0.9448).margin(1e-4));
  CHECK(get(evals, 1, "len") == "16");
  CHECK(get(evals, 1, "task_len") == "16");
  CHECK(get(evals, 1, "train_task") == "flipflop:len=8,p_ignore=0.8");
  CHECK(get(evals, 1, "error_rate") == "0");
  CHECK(get(runs, 0, "steps_trained") == "20");
  CHECK(get(runs, 0, "stop") == "steps");
  CHECK(get(runs, 0, "stopped_at_step").empty());
  CHECK(get(runs, 0, "eval_s") == "0.5");
  CHECK(get(runs, 0, "precision").empty());  // a config written before the option existed
  // Every evaluation in file order, the later of two at one step (split, task) replacing the earlier.
  const pb::Csv history = pb::read_csv(out + "/history.csv");
  REQUIRE(history.rows.size() == 3);
  CHECK(history.header == evals.header);
  CHECK(get(history, 0, "step") == "10");
  CHECK(get(history, 0, "acc") == "0.5");
  CHECK(get(history, 0, "error_rate") == "0.5");
  CHECK(get(history, 1, "acc") == "0.9");
  CHECK(get(history, 2, "len") == "16");
  // The per-sequence counts of the last evaluations that have them, one row per evaluation.
  const pb::Csv seqs = pb::read_csv(out + "/seqstats.csv");
  CHECK(seqs.header == std::vector<std::string>{"sweep", "run_id", "task", "split", "bins"});
  REQUIRE(seqs.rows.size() == 1);
  CHECK(seqs.rows[0] == std::vector<std::string>{"quick", "aaaa", "flipflop:len=8,p_ignore=0.8", "val", "0:10:5 2:10:5"});
}
