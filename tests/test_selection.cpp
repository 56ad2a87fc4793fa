// --best-over's choice (runners/results.cpp, choose): the values of a hyperparameter are compared
// on the seeds they all have, so a learning rate with fewer finished seeds is not compared on a
// different sample, a choice at an end of the values compared is marked, and so is a "choice" of
// the one value a group has rows for (docs/statistics.md, Selection).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "cli.h"
#include "core/io.h"
#include "runners/csv.h"
#include "runners/results.h"

using Catch::Matchers::Contains;

namespace {

std::vector<size_t> every_row(const pb::Csv& c) {
  std::vector<size_t> all(c.rows.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return all;
}

// `pathbench table --rows pe --cols split --best-over lr` on `c`, written to a fresh evals.csv.
std::string best_lr_table(const pb::Csv& c) {
  const pb::test::TempDir tmp("selection");
  const std::string csv = tmp.file("evals.csv");
  pb::write_file_atomic(csv, pb::write_csv(c));
  const auto r = pb::test::run_pathbench("table " + csv + " --rows pe --cols split --best-over lr --metric acc");
  INFO(r.err);
  REQUIRE(r.code == 0);
  return r.out;
}

}  // namespace

TEST_CASE("best-over: values compared on their shared seeds, the note says which", "[sweep]") {
  pb::Csv c;
  c.header = {"pe", "lr", "seed", "split", "acc"};
  // fox: 3e-4 has seeds 0 and 1 (mean 0.93), 1e-3 seed 0 alone (0.95). On every seed 1e-3 wins;
  // on the shared seed 0, 3e-4 (0.96 against 0.95). rope: no seed in common. path: the same seeds.
  c.rows = {{"fox", "0.0003", "0", "val", "0.96"}, {"fox", "0.0003", "1", "val", "0.90"},
            {"fox", "0.001", "0", "val", "0.95"},  {"rope", "0.0003", "1", "val", "0.5"},
            {"rope", "0.001", "0", "val", "0.6"},  {"path", "0.0003", "0", "val", "0.9"},
            {"path", "0.001", "0", "val", "0.8"},  {"path", "0.0003", "1", "val", "0.9"},
            {"path", "0.001", "1", "val", "0.8"}};
  const auto choices = pb::choose(c, every_row(c), {"pe"}, "acc", "lr", false, "");
  const auto& fox = choices.at({"fox"});
  CHECK(fox.value == "0.0003");
  CHECK(fox.mean == Approx(0.96));
  CHECK(fox.seeds == "compared on seed 0, those every lr has");
  CHECK(choices.at({"rope"}).value == "0.001");
  CHECK(choices.at({"rope"}).seeds == "no seed shared by every lr: means over different seeds");
  CHECK(choices.at({"path"}).value == "0.0003");
  CHECK(choices.at({"path"}).seeds.empty());

  // The table reports the chosen rate's every seed and says how it was chosen.
  const std::string out = best_lr_table(c);
  CHECK_THAT(out, Contains("| fox | 0.930 ± 0.042 (n=2) |"));
  CHECK_THAT(out, Contains("- pe=fox: lr = 0.0003 (0.96; compared on seed 0, those every lr has)"));
  CHECK_THAT(out, Contains("- pe=rope: lr = 0.001 (0.6; no seed shared by every lr: means over different seeds)"));
  CHECK_THAT(out, Contains("- pe=path: lr = 0.0003 (0.9)\n"));
}

TEST_CASE("best-over: a choice at either end of three or more values is marked not bracketed", "[sweep]") {
  pb::Csv c;
  c.header = {"pe", "lr", "seed", "split", "acc"};
  // rope is best at the lowest of three rates, path inside them, fox at the highest; nope has two
  // rates, where every choice is at an end, and is not marked.
  const std::vector<std::string> lrs = {"0.0001", "0.0003", "0.001"};
  const std::vector<std::pair<std::string, std::vector<std::string>>> acc = {
      {"rope", {"0.9", "0.8", "0.7"}}, {"path", {"0.8", "0.9", "0.7"}}, {"fox", {"0.7", "0.8", "0.9"}}};
  for (const auto& [pe, a] : acc)
    for (size_t i = 0; i < lrs.size(); ++i) c.rows.push_back({pe, lrs[i], "0", "val", a[i]});
  c.rows.push_back({"nope", "0.0003", "0", "val", "0.2"});
  c.rows.push_back({"nope", "0.001", "0", "val", "0.1"});
  const auto choices = pb::choose(c, every_row(c), {"pe"}, "acc", "lr", false, "");
  CHECK(choices.at({"rope"}).values == lrs);
  CHECK(choices.at({"path"}).value == "0.0003");
  CHECK(choices.at({"nope"}).values == std::vector<std::string>{"0.0003", "0.001"});

  const std::string out = best_lr_table(c);
  CHECK_THAT(out, Contains("- pe=rope: lr = 0.0001 (0.9; the lowest of 3 values: not bracketed)\n"));
  CHECK_THAT(out, Contains("- pe=path: lr = 0.0003 (0.9)\n"));
  CHECK_THAT(out, Contains("- pe=fox: lr = 0.001 (0.9; the highest of 3 values: not bracketed)\n"));
  CHECK_THAT(out, Contains("- pe=nope: lr = 0.0003 (0.2)\n"));
}

TEST_CASE("best-over: a group with rows at one value only says nothing was compared", "[sweep]") {
  pb::Csv c;
  c.header = {"pe", "lr", "seed", "split", "acc"};
  // rope has finished at both rates, sba (a sweep still running) at 3e-4 only.
  c.rows = {{"rope", "0.0003", "0", "val", "0.9"}, {"rope", "0.001", "0", "val", "0.8"},
            {"sba", "0.0003", "0", "val", "0.7"}};
  const std::string out = best_lr_table(c);
  CHECK_THAT(out, Contains("- pe=rope: lr = 0.0003 (0.9)\n"));
  CHECK_THAT(out, Contains("- pe=sba: lr = 0.0003 (0.7; the only lr of 2 with rows for it: nothing compared)\n"));
}
