// --best-over's choice (runners/results.cpp, choose): the values of a hyperparameter are compared
// on the seeds they all have, so a learning rate with fewer finished seeds is not compared on a
// different sample (docs/statistics.md, Selection).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "cli.h"
#include "core/io.h"
#include "runners/csv.h"
#include "runners/results.h"

using Catch::Matchers::Contains;

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
  std::vector<size_t> all(c.rows.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const auto choices = pb::choose(c, all, {"pe"}, "acc", "lr", false, "");
  const auto& fox = choices.at({"fox"});
  CHECK(fox.value == "0.0003");
  CHECK(fox.mean == Approx(0.96));
  CHECK(fox.seeds == "compared on seed 0, those every lr has");
  CHECK(choices.at({"rope"}).value == "0.001");
  CHECK(choices.at({"rope"}).seeds == "no seed shared by every lr: means over different seeds");
  CHECK(choices.at({"path"}).value == "0.0003");
  CHECK(choices.at({"path"}).seeds.empty());

  // The table reports the chosen rate's every seed and says how it was chosen.
  const pb::test::TempDir tmp("selection");
  const std::string csv = tmp.file("evals.csv");
  pb::write_file_atomic(csv, pb::write_csv(c));
  const auto r = pb::test::run_pathbench("table " + csv + " --rows pe --cols split --best-over lr --metric acc");
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Contains("| fox | 0.930 ± 0.042 (n=2) |"));
  CHECK_THAT(r.out, Contains("- pe=fox: lr = 0.0003 (0.96; compared on seed 0, those every lr has)"));
  CHECK_THAT(r.out, Contains("- pe=rope: lr = 0.001 (0.6; no seed shared by every lr: means over different seeds)"));
  CHECK_THAT(r.out, Contains("- pe=path: lr = 0.0003 (0.9)\n"));
}
