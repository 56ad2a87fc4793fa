// table --min-layers on the results of an adaptive depth search (docs/sweeps.md): a configuration
// is run only up to the first depth that meets the search's rule, so its deeper depths are missing
// by design. They count with the values of the depth that passed; a configuration that ends below
// the threshold early (pending or failed runs) is counted in the caption, not filled.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "cli.h"
#include "core/io.h"
#include "runners/csv.h"

using Catch::Matchers::Contains;
using pb::test::run_pathbench;

namespace {

std::string table(const std::string& csv, const std::string& extra) {
  const auto r = run_pathbench("table " + csv + " --split test --metric seq_acc --min-layers 0.9" + extra);
  INFO(r.err);
  REQUIRE(r.code == 0);
  return r.out;
}

// An evals.csv's rows at length 8 and lr 0.001 from (pe, layers, seed, seq_acc) runs, the value
// the same on val and test: rows 2i and 2i + 1 are run i's.
pb::Csv depth_runs(const std::vector<std::vector<std::string>>& runs) {
  pb::Csv c;
  c.header = {"pe", "task_len", "layers", "seed", "lr", "split", "seq_acc"};
  for (const auto& r : runs)
    for (const char* split : {"val", "test"}) c.rows.push_back({r[0], "8", r[1], r[2], "0.001", split, r[3]});
  return c;
}

}  // namespace

TEST_CASE("table --min-layers: depths the depth search skipped count as passed", "[sweep]") {
  const pb::test::TempDir tmp("min_layers");
  const std::string csv = tmp.file("evals.csv");
  // (pe, layers, seed, seq_acc on val and test): path seed 0 passes at 1 layer, so the search ran
  // no deeper; seed 1 passes at 3. rope seed 0 stops at 1 layer below the threshold (pending).
  pb::Csv c = depth_runs({{"path", "1", "0", "0.95"},
                          {"path", "1", "1", "0.5"},
                          {"path", "2", "1", "0.86"},
                          {"path", "3", "1", "0.95"},
                          {"rope", "1", "0", "0.4"},
                          {"rope", "1", "1", "0.5"},
                          {"rope", "2", "1", "0.95"}});
  pb::write_file_atomic(csv, pb::write_csv(c));

  // path at 2 layers: seed 0's 0.95 (filled from 1 layer) and seed 1's 0.86, mean 0.905. Without
  // the fill the mean would be seed 1's alone, 0.86, and the answer 3. rope at 2 layers has seed
  // 1's 0.95 alone: seed 0's run there is pending, so the cell is undecided, not 2.
  const std::string mean = table(csv, "");
  CHECK_THAT(mean, Contains("| path | 2 (n=2) |") && Contains("| rope | ≥ 2 (1 of 2 seeds) |"));
  CHECK_THAT(mean, Contains("; deeper depths not run because their configuration (seed, row, column) reached it (the depth search): 2,"));
  CHECK_THAT(mean, Contains("; configurations ending below it before their cell's deepest depth (pending or failed runs): 1,"));
  CHECK_THAT(table(csv, " --min-layers-by all"), Contains("| path | 3 (n=2) |"));
  // Some seed: one seed's pass decides, present or not the others (rope's seed 1 at 2 layers).
  CHECK_THAT(table(csv, " --min-layers-by any"), Contains("| path | 1 (n=2) |") && Contains("| rope | 2 (n=1) |"));
  CHECK_THAT(table(csv, " --best-over lr"), Contains("| path | 2 (n=2) |") && Contains("(seed, lr, row, column)"));
  // Each seed's own smallest depth; rope's seed 0 has none up to its deepest run (1 layer).
  const std::string seeds = table(csv, " --per-seed");
  CHECK_THAT(seeds, Contains("*smallest layers where each seed's seq_acc on test ≥ 0.9 (s<seed> depth; > D: none"));
  CHECK_THAT(seeds, Contains("| path | s0 1, s1 3 |") && Contains("| rope | s0 > 1, s1 2 |"));

  // A configuration that reached the threshold at its cell's deepest depth leaves nothing to fill.
  c.rows.resize(8);  // path only
  pb::write_file_atomic(csv, pb::write_csv(c));
  CHECK_THAT(table(csv, ""), Contains("| path | 2 (n=2) |") && Contains("depth search): 2,"));
  c.rows.resize(2);  // path seed 0 at 1 layer alone
  pb::write_file_atomic(csv, pb::write_csv(c));
  CHECK_THAT(table(csv, ""), Contains("| path | 1 (n=1) |") && !Contains("deeper depths not run"));
}

TEST_CASE("table --min-layers: a depth the seeds present rule out, whatever the pending ones reach", "[sweep]") {
  const pb::test::TempDir tmp("min_layers_reach");
  const std::string csv = tmp.file("evals.csv");
  // Three seeds (path has all three); seed 2 of the others is pending at every depth.
  // alibi: 0.5, 0.6 at 1 layer, (0.5 + 0.6 + 1) / 3 = 0.7 < 0.9, out of reach; at 2 layers 0.95 and
  // 0.97 leave it open. nope: out of reach at both. rope: 0.95 and 0.97 at 1 layer leave it open.
  pb::Csv c = depth_runs({{"path", "1", "0", "0.99"}, {"path", "1", "1", "0.99"},  {"path", "1", "2", "0.99"},
                          {"alibi", "1", "0", "0.5"}, {"alibi", "1", "1", "0.6"},  {"alibi", "2", "0", "0.95"},
                          {"alibi", "2", "1", "0.97"}, {"nope", "1", "0", "0.5"},  {"nope", "1", "1", "0.6"},
                          {"nope", "2", "0", "0.6"},  {"nope", "2", "1", "0.7"},   {"rope", "1", "0", "0.95"},
                          {"rope", "1", "1", "0.97"}});
  pb::write_file_atomic(csv, pb::write_csv(c));
  const std::string mean = table(csv, "");
  CHECK_THAT(mean, Contains("| path | 1 (n=3) |") && Contains("| alibi | ≥ 2 (2 of 3 seeds) |"));
  CHECK_THAT(mean, Contains("| nope | > 2 (2 of 3 seeds) |") && Contains("| rope | ≥ 1 (2 of 3 seeds) |"));
  // Every seed: a present seed below it rules a depth out; rope's 0.95 and 0.97 do not.
  const std::string all = table(csv, " --min-layers-by all");
  CHECK_THAT(all, Contains("| alibi | ≥ 2 (2 of 3 seeds) |") && Contains("| nope | > 2 (2 of 3 seeds) |"));
  CHECK_THAT(all, Contains("| rope | ≥ 1 (2 of 3 seeds) |"));
  // Near the edge, nope at 1 layer: 0.8 + 0.91 + 1 > 0.9 × 3 is within reach, 0.8 + 0.89 + 1 is not.
  c.rows[14][6] = c.rows[15][6] = "0.8", c.rows[16][6] = c.rows[17][6] = "0.91";
  pb::write_file_atomic(csv, pb::write_csv(c));
  CHECK_THAT(table(csv, ""), Contains("| nope | ≥ 1 (2 of 3 seeds) |"));
  c.rows[16][6] = c.rows[17][6] = "0.89";
  pb::write_file_atomic(csv, pb::write_csv(c));
  CHECK_THAT(table(csv, ""), Contains("| nope | > 2 (2 of 3 seeds) |"));
  // The figure draws settled cells only: path's; nope's bound waits for seed 2 with the undecided.
  const std::string svg = tmp.file("md.svg");
  REQUIRE(run_pathbench("plot " + csv + " --figure min-depth --split test --metric seq_acc -o " + svg).code == 0);
  const std::string fig = pb::read_file(svg);
  CHECK_THAT(fig, Contains("<title>path, length 8: 1 (n=3)</title>") && !Contains("<title>nope"));
  CHECK_THAT(fig, Contains("Not drawn: 3 encoding–length cells") && !Contains("budget-limited"));
}

TEST_CASE("plot --figure min-depth: the depths of table --min-layers, undecided cells left out", "[sweep]") {
  const pb::test::TempDir tmp("min_depth_plot");
  const std::string csv = tmp.file("evals.csv"), svg = tmp.file("md.svg");
  pb::Csv c;
  c.header = {"pe", "task_name", "task_len", "layers", "seed", "lr", "split", "seq_acc", "stop"};
  // (pe, task_len, layers, seed, seq_acc, stop): path passes at 1 layer at length 4 and at 2 at
  // length 8; rope ends at 2 layers at length 8 below 0.9, at its step budget; alibi's seed 1 has
  // not run at length 8.
  const std::vector<std::vector<std::string>> runs = {
      {"path", "4", "1", "0", "0.95", "stop_at"},  {"path", "4", "1", "1", "0.97", "stop_at"},
      {"path", "8", "1", "0", "0.1", "steps"},     {"path", "8", "1", "1", "0.2", "steps"},
      {"path", "8", "2", "0", "0.95", "stop_at"},  {"path", "8", "2", "1", "0.93", "stop_at"},
      {"rope", "4", "1", "0", "0.99", "stop_at"},  {"rope", "4", "1", "1", "0.98", "stop_at"},
      {"rope", "8", "1", "0", "0.1", "steps"},     {"rope", "8", "1", "1", "0.1", "steps"},
      {"rope", "8", "2", "0", "0.5", "steps"},     {"rope", "8", "2", "1", "0.6", "steps"},
      {"alibi", "4", "1", "0", "0.92", "stop_at"}, {"alibi", "4", "1", "1", "0.91", "stop_at"},
      {"alibi", "8", "1", "0", "0.95", "stop_at"}};
  for (const auto& r : runs)
    for (const char* split : {"val", "test"})
      c.rows.push_back({r[0], "wordproblem", r[1], r[2], r[3], "0.001", split, r[4], r[5]});
  pb::write_file_atomic(csv, pb::write_csv(c));

  const auto r = run_pathbench("plot " + csv + " --figure min-depth --split test --metric seq_acc -o " + svg);
  INFO(r.err);
  REQUIRE(r.code == 0);
  const std::string out = pb::read_file(svg);
  // path at length 8: both one-layer runs ended at their step budget below 0.9, so one layer is
  // not ruled out: a downward arrow, counted in the caption.
  CHECK_THAT(out, Contains("<title>path, length 4: 1 (n=2)</title>") &&
                      Contains("<title>path, length 8: 2 (n=2; cap at 1)</title>"));
  CHECK_THAT(out, Contains("data-x=\"8\" data-depth=\"2\" data-cap-below=\"1\"") &&
                      Contains("not ruled out (1 of the filled markers)"));
  CHECK_THAT(out, Contains("<title>rope, length 8: &gt; 2 (cap, n=2)</title>"));
  CHECK_THAT(out, Contains("data-x=\"8\" data-depth=\"2\" data-none=\"1\""));
  // alibi at length 8: seed 0 passes with one layer, seed 1 has no run; undecided, so not drawn.
  CHECK_THAT(out, Contains("<title>alibi, length 4: 1 (n=2)</title>") && !Contains("alibi, length 8"));
  CHECK_THAT(out, Contains("Not drawn: 1 encoding–length cells") && Contains("(1 of them budget-limited"));
  // The table says the same.
  const auto t = run_pathbench("table " + csv + " --split test --metric seq_acc --min-layers 0.9");
  CHECK_THAT(t.out, Contains("| rope | 1 (n=2) | > 2 (cap, n=2) |") &&
                        Contains("| alibi | 1 (n=2) | ≥ 1 (1 of 2 seeds) |"));
  // Under "any", alibi's seed 0 decides length 8.
  const std::string any = " --figure min-depth --split test --metric seq_acc --min-layers-by any -o ";
  REQUIRE(run_pathbench("plot " + csv + any + svg).code == 0);
  CHECK_THAT(pb::read_file(svg), Contains("<title>alibi, length 8: 1 (n=1)</title>"));

  const auto no_split = run_pathbench("plot " + csv + " --figure min-depth --metric seq_acc -o " + svg);
  CHECK(no_split.code == 2);
  CHECK_THAT(no_split.err, Contains("--figure min-depth: choose the split with --split"));
  const auto loss = run_pathbench("plot " + csv + " --figure min-depth --split test --metric loss -o " + svg);
  CHECK(loss.code == 2);
  CHECK_THAT(loss.err, Contains("--metric acc or seq_acc"));
}

TEST_CASE("table --min-layers: a depth below that ended at its step budget short of the threshold", "[sweep]") {
  const pb::test::TempDir tmp("min_layers_cap");
  const std::string csv = tmp.file("evals.csv");
  pb::Csv c;
  c.header = {"pe", "task_len", "layers", "seed", "lr", "split", "seq_acc", "stop"};
  // (pe, layers, seed, seq_acc, stop); every encoding passes at 2 layers, fox at 1.
  const std::vector<std::vector<std::string>> runs = {
      // path: seed 0's one-layer run ended at the budget below 0.9, so one layer is not ruled out.
      {"path", "1", "0", "0.5", "steps"}, {"path", "1", "1", "0.4", "patience 8"},
      {"path", "2", "0", "0.95", "stop_at"}, {"path", "2", "1", "0.96", "stop_at"},
      // rope: both one-layer runs stopped by patience: nothing to mark.
      {"rope", "1", "0", "0.5", "patience 8"}, {"rope", "1", "1", "0.4", "patience 8"},
      {"rope", "2", "0", "0.95", "stop_at"}, {"rope", "2", "1", "0.96", "stop_at"},
      // sba: the one-layer run at the budget had passed 0.9 (the mean fails by seed 1, stopped by
      // patience): not a budget-limited failure.
      {"sba", "1", "0", "0.95", "steps"}, {"sba", "1", "1", "0.5", "patience 8"},
      {"sba", "2", "0", "0.95", "stop_at"}, {"sba", "2", "1", "0.96", "stop_at"},
      {"fox", "1", "0", "0.95", "stop_at"}, {"fox", "1", "1", "0.96", "stop_at"},
      // nope: none up to 1 layer, seed 0 at its budget.
      {"nope", "1", "0", "0.1", "steps"}, {"nope", "1", "1", "0.1", "patience 8"}};
  for (const auto& r : runs)
    for (const char* split : {"val", "test"}) c.rows.push_back({r[0], "8", r[1], r[2], "0.001", split, r[3], r[4]});
  pb::write_file_atomic(csv, pb::write_csv(c));
  const std::string t = table(csv, "");
  CHECK_THAT(t, Contains("cap at d: a run at the depth below, d, ended at its step budget short of it"));
  CHECK_THAT(t, Contains("| path | 2 (n=2; cap at 1) |") && Contains("| rope | 2 (n=2) |") &&
                    Contains("| sba | 2 (n=2) |") && Contains("| fox | 1 (n=2) |") &&
                    Contains("| nope | > 1 (cap, n=2) |"));
  // Each seed with the same marks.
  const std::string seeds = table(csv, " --per-seed");
  CHECK_THAT(seeds, Contains("cap: that run ended at its step budget; cap at d: its run at the depth below"));
  CHECK_THAT(seeds, Contains("| path | s0 2 (cap at 1), s1 2 |") && Contains("| rope | s0 2, s1 2 |") &&
                        Contains("| sba | s0 1, s1 2 |") && Contains("| nope | s0 > 1 (cap), s1 > 1 |"));
  // Without collect's stop column nothing is marked.
  for (auto& row : c.rows) row.pop_back();
  c.header.pop_back();
  pb::write_file_atomic(csv, pb::write_csv(c));
  CHECK_THAT(table(csv, ""), Contains("| path | 2 (n=2) |"));
  CHECK_THAT(table(csv, " --per-seed"), Contains("| path | s0 2, s1 2 |") && Contains("| nope | s0 > 1, s1 > 1 |"));
}

TEST_CASE("table --min-layers --best-over: a depth decides only when every value chosen among has run", "[sweep]") {
  const pb::test::TempDir tmp("min_layers_choice");
  const std::string csv = tmp.file("evals.csv"), svg = tmp.file("md.svg");
  pb::Csv c;
  c.header = {"pe", "task_name", "task_len", "layers", "seed", "lr", "split", "seq_acc"};
  // (layers, seed, lr, seq_acc on val and test): lr 0.001 passes at 2 layers in both seeds; seed 1's
  // run at lr 0.0003 and 2 layers is pending. Had it run, val could choose 0.0003 instead.
  const std::vector<std::vector<std::string>> runs = {
      {"1", "0", "0.001", "0.2"},  {"1", "1", "0.001", "0.3"},  {"1", "0", "0.0003", "0.1"}, {"1", "1", "0.0003", "0.1"},
      {"2", "0", "0.001", "0.95"}, {"2", "1", "0.001", "0.96"}, {"2", "0", "0.0003", "0.5"}};
  for (const auto& r : runs)
    for (const char* split : {"val", "test"})
      c.rows.push_back({"path", "wordproblem", "8", r[0], r[1], r[2], split, r[3]});
  pb::write_file_atomic(csv, pb::write_csv(c));
  CHECK_THAT(table(csv, " --best-over lr"), Contains("| path | ≥ 2 (1 of 2 seeds) |"));
  const std::string plot = "plot " + csv + " --figure min-depth --split test --metric seq_acc -o " + svg;
  REQUIRE(run_pathbench(plot).code == 0);
  CHECK_THAT(pb::read_file(svg), !Contains("<title>path, length 8") && Contains("Not drawn: 1 encoding–length"));
  // Without --best-over the rows are one lr each: seed 0 has two at 2 layers, which is an error,
  // so --where picks the lr; lr 0.001 alone is complete.
  CHECK_THAT(table(csv, " --where lr=0.001"), Contains("| path | 2 (n=2) |"));
  // The pending run, done: the depth decides (val still chooses 0.001).
  for (const char* split : {"val", "test"})
    c.rows.push_back({"path", "wordproblem", "8", "2", "1", "0.0003", split, "0.4"});
  pb::write_file_atomic(csv, pb::write_csv(c));
  CHECK_THAT(table(csv, " --best-over lr"), Contains("| path | 2 (n=2) |"));
  REQUIRE(run_pathbench(plot).code == 0);
  CHECK_THAT(pb::read_file(svg), Contains("<title>path, length 8: 2 (n=2)</title>"));
}

TEST_CASE("table --min-layers --best-over: seeds pending rule a depth out only under every value chosen among", "[sweep]") {
  const pb::test::TempDir tmp("min_layers_choice_bound");
  const std::string csv = tmp.file("evals.csv");
  // (layers, seed, lr, val, test) of three seeds; every run at 1 layer has run, at 0.1.
  auto write = [&](const std::vector<std::vector<std::string>>& at2) {
    pb::Csv c;
    c.header = {"pe", "task_len", "layers", "seed", "lr", "split", "seq_acc"};
    std::vector<std::vector<std::string>> runs = at2;
    for (const char* seed : {"0", "1", "2"})
      for (const char* lr : {"0.001", "0.0003"}) runs.push_back({"1", seed, lr, "0.1", "0.1"});
    for (const auto& r : runs) {
      c.rows.push_back({"path", "16", r[0], r[1], r[2], "val", r[3]});
      c.rows.push_back({"path", "16", r[0], r[1], r[2], "test", r[4]});
    }
    pb::write_file_atomic(csv, pb::write_csv(c));
  };
  // Two layers: seeds 0 and 1 at 0.001, seed 0 alone at 0.0003. Whichever lr val ends on, the
  // seeds there and the pending ones at 1 stay below 0.9 × 3 (0.2 + 0.3 + 1; 0.1 + 1 + 1): ruled out.
  write({{"2", "0", "0.001", "0.2", "0.2"}, {"2", "1", "0.001", "0.3", "0.3"}, {"2", "0", "0.0003", "0.1", "0.1"}});
  const std::string ruled_out = table(csv, " --best-over lr");
  CHECK_THAT(ruled_out, Contains("| path | > 2 (1 of 3 seeds) |") && Contains("counted at 1, under every lr, is not"));
  // With 0.8 for seed 0 at 0.0003, the pending runs at 0.0003 could still bring it there (2.8).
  write({{"2", "0", "0.001", "0.2", "0.2"}, {"2", "1", "0.001", "0.3", "0.3"}, {"2", "0", "0.0003", "0.8", "0.8"}});
  CHECK_THAT(table(csv, " --best-over lr"), Contains("| path | ≥ 2 (1 of 3 seeds) |"));
  // Seeds 0 and 1 at both lrs: val chooses 0.001 (test 0.5 each), under which seed 2 at 1 stays
  // short (2.0); but seed 2's val could turn the choice to 0.0003 (test 0.9 each: 2.8): undecided.
  write({{"2", "0", "0.001", "0.95", "0.5"}, {"2", "1", "0.001", "0.95", "0.5"},
         {"2", "0", "0.0003", "0.5", "0.9"}, {"2", "1", "0.0003", "0.5", "0.9"}});
  CHECK_THAT(table(csv, " --best-over lr"), Contains("| path | ≥ 2 (2 of 3 seeds) |"));
}

TEST_CASE("table --min-layers: a configuration counts as skipped deeper by what the depth search read (val)", "[sweep]") {
  const pb::test::TempDir tmp("min_layers_search");
  const std::string csv = tmp.file("evals.csv");
  pb::Csv c;
  c.header = {"pe", "task_len", "layers", "seed", "lr", "split", "seq_acc"};
  // (pe, layers, seed, val, test). path seed 0 passed on val at 1 layer, so the search ran it no
  // deeper, though its test value is below 0.9; rope seed 0 passed on test only, so its run at 2
  // layers is pending, not skipped.
  const std::vector<std::vector<std::string>> runs = {
      {"path", "1", "0", "0.92", "0.86"}, {"path", "1", "1", "0.5", "0.5"},  {"path", "2", "1", "0.95", "0.95"},
      {"rope", "1", "0", "0.85", "0.92"}, {"rope", "1", "1", "0.5", "0.5"},  {"rope", "2", "1", "0.95", "0.95"}};
  for (const auto& r : runs) {
    c.rows.push_back({r[0], "8", r[1], r[2], "0.001", "val", r[3]});
    c.rows.push_back({r[0], "8", r[1], r[2], "0.001", "test", r[4]});
  }
  pb::write_file_atomic(csv, pb::write_csv(c));
  // path at 2 layers: seed 0's 0.86 (filled) and seed 1's 0.95, mean 0.905. rope's seed 0 is not
  // filled: undecided at 2 layers.
  const std::string t = table(csv, "");
  CHECK_THAT(t, Contains("| path | 2 (n=2) |") && Contains("| rope | ≥ 2 (1 of 2 seeds) |"));
  CHECK_THAT(t, Contains("depth search): 1,") && Contains("failed runs): 1,"));
  // A CSV without the search's split falls back to the table's.
  std::vector<std::vector<std::string>> test_only;
  for (const auto& row : c.rows)
    if (row[5] == "test") test_only.push_back(row);
  c.rows = test_only;
  pb::write_file_atomic(csv, pb::write_csv(c));
  CHECK_THAT(table(csv, ""), Contains("| path | ≥ 2 (1 of 2 seeds) |") && Contains("| rope | 2 (n=2) |"));
}
