// collect, table and the CSV format: collect from hand-made run directories, tables (selection on
// one split, seeds, intervals from seqstats.csv) from hand-made CSVs, all run in-process through
// the subcommands. Figures: test_plot.cpp.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli.h"
#include "core/io.h"
#include "results_fixtures.h"
#include "runners/csv.h"
#include "runners/results.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using pb::test::bootstrap_csvs;
using pb::test::cli;
using pb::test::evals_csv;
using pb::test::fresh_dir;

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

TEST_CASE("table: an accuracy short of 1 never reads as 1", "[sweep]") {
  const fs::path d = fresh_dir("near_one");
  const std::string csv = (d / "evals.csv").string();
  pb::Csv c;
  c.header = {"run_id", "task", "pe", "layers", "lr", "seed", "split", "acc"};
  c.rows = {{"p1", "flipflop:len=8", "path", "1", "0.001", "0", "val", "0.999992"},  // 8 errors in a million
            {"p2", "flipflop:len=8", "path", "1", "0.01", "0", "val", "0.99998"},
            {"r1", "flipflop:len=8", "rope", "1", "0.001", "0", "val", "1"}};
  pb::write_file_atomic(csv, pb::write_csv(c));
  const std::string chosen = cli({"table", csv, "--best-over", "lr", "--per-seed", "--percent"});
  CHECK_THAT(chosen, Contains("| rope | s0 100 |\n| path | s0 99.999 |") &&
                         Contains("- pe=path layers=1: lr = 0.001 (0.99999)") &&
                         Contains("- pe=rope layers=1: lr = 0.001 (1; the only lr of 2 with rows for it: nothing compared)\n"));
  CHECK_THAT(cli({"table", csv, "--where", "lr=0.01"}), Contains("| path | 0.99998 (n=1) |"));
  CHECK_THAT(cli({"table", csv, "--where", "lr=0.001"}), Contains("| rope | 1.000 (n=1) |\n| path | 0.99999 (n=1) |"));
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
        "so a smaller depth is not ruled out; ≥ d (k of n seeds): runs pending at d could still reach it, undecided (a "
        "depth that the seeds present rule out, the pending ones counted at 1, is not reached); blank: no runs)*\n\n"
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
  // The mean passes at 2 layers (0.92). In cells without seed 1 (its runs pending) a depth decides
  // only where seed 0 rules it out whatever seed 1 reaches: rope len 16 at 3 layers, (0.6 + 1) / 2
  // < 0.9, and path len 16 at 1 layer, (0.5 + 1) / 2; path's 0.95 and 0.91 leave it open.
  CHECK_THAT(cli({"table", csv, "--min-layers", "0.9"}),
             Contains("| rope | 2 (n=2) | > 3 (1 of 2 seeds) |\n| path | ≥ 1 (1 of 2 seeds) | ≥ 2 (1 of 2 seeds) |"));
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
  // Counts whose scored targets do not add up to the row's n are not the row's (a row of
  // distances.csv covers a part of its evaluation): mean ± sd.
  e.rows[0][6] = "4000";
  pb::write_file_atomic(csv, pb::write_csv(e));
  CHECK_THAT(cli(args), Contains("mean ± sd over seeds"));
  e.rows[0][6] = "10000";
  pb::write_file_atomic(csv, pb::write_csv(e));
  // A run without counts: the whole table falls back to mean ± sd.
  q.rows.pop_back();
  pb::write_file_atomic(seqs, pb::write_csv(q));
  CHECK_THAT(cli(args), Contains("mean ± sd over seeds") && Contains("| rope | 0.2 ± 0.14 (n=2) |"));
  q.rows[0][4] = "0:10";
  pb::write_file_atomic(seqs, pb::write_csv(q));
  CHECK_THROWS_WITH(cli(args), Contains("seqstats.csv:2: bins must be 'wrong:scored:sequences ...'"));
  // Committed gzipped and not unpacked: an error, not a table without its intervals.
  fs::rename(seqs, seqs + ".gz");
  CHECK_THROWS_WITH(cli(args), Contains("seqstats.csv.gz is not unpacked; run scripts/history.sh unpack"));
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
                        "\"acc\": 0.5, \"seq_acc\": 0.1, \"n\": 100, \"n_seqs\": 10, \"by_distance\": [[1, 2, 5, 10]]}\n"
                        "{\"step\": 20, \"split\": \"val\", \"task\": \"flipflop:len=8,p_ignore=0.8\", \"len\": 8, "
                        "\"acc\": 0.8, \"seq_acc\": 0.4, \"n\": 50, \"n_seqs\": 5, "
                        "\"by_distance\": [[1, 2, 7, 10], [2, 4, 3, 4]]}\n"  // periodic, then the final
                        "{\"step\": 20, \"split\": \"val\", \"task\": \"flipflop:len=8,p_ignore=0.8\", \"len\": 8, "
                        "\"acc\": 0.9, \"seq_acc\": 0.5, \"n\": 100, \"n_seqs\": 10, "
                        "\"seq_errors\": [[0, 10, 5], [2, 10, 5]], \"by_distance\": [[1, 2, 30, 40], [4, 8, 60, 60]]}\n"
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
  // Accuracy by recall distance: a row per range of the last evaluations that have them, with
  // evals.csv's labels; the range's n and accuracy, no sequence measures.
  const pb::Csv dist = pb::read_csv(out + "/distances.csv");
  REQUIRE(dist.rows.size() == 2);
  CHECK(dist.header[dist.column("split") + 1] == "distance_from");
  CHECK(dist.header[dist.column("split") + 2] == "distance_to");
  CHECK(get(dist, 0, "run_id") == "aaaa");
  CHECK(get(dist, 0, "pe_name") == "path");
  CHECK(get(dist, 0, "task") == "flipflop:len=8,p_ignore=0.8");
  CHECK(get(dist, 0, "distance_from") == "1");
  CHECK(get(dist, 0, "distance_to") == "2");
  CHECK(get(dist, 0, "n") == "40");
  CHECK(get(dist, 0, "acc") == "0.75");
  CHECK(get(dist, 0, "error_rate") == "0.25");
  CHECK(get(dist, 0, "seq_acc").empty());
  CHECK(get(dist, 1, "distance_from") == "4");
  CHECK(get(dist, 1, "acc") == "1");
  // table reads it like evals.csv; seqstats.csv's counts (the whole evaluation's) give no interval.
  CHECK_THAT(cli({"table", out + "/distances.csv", "--rows", "distance_from", "--cols", "pe", "--metric", "acc"}),
             Contains("mean ± sd over seeds") && Contains("| 1 | 0.750 (n=1) |") && Contains("| 4 | 1.000 (n=1) |"));
  // The ranges of every evaluation, history.csv's rule: the final evaluation's replace the periodic
  // ones at its step (the periodic 2–4 range is gone).
  const pb::Csv dist_history = pb::read_csv(out + "/distance_history.csv");
  CHECK(dist_history.header == dist.header);
  REQUIRE(dist_history.rows.size() == 3);
  CHECK(get(dist_history, 0, "step") == "10");
  CHECK(get(dist_history, 0, "distance_from") == "1");
  CHECK(get(dist_history, 0, "acc") == "0.5");
  CHECK(get(dist_history, 1, "step") == "20");
  CHECK(get(dist_history, 1, "acc") == "0.75");
  CHECK(get(dist_history, 2, "distance_from") == "4");
  CHECK(get(dist_history, 2, "n") == "60");
  // A malformed range is a one-line error naming the file; without ranges the file goes.
  const std::string jsonl = (sweep / "aaaa" / "eval.jsonl").string(), text = pb::read_file(jsonl);
  const std::string ranges = ", \"by_distance\": [[1, 2, 30, 40], [4, 8, 60, 60]]";
  auto with = [&](const std::string& r) { return std::string(text).replace(text.find(ranges), ranges.size(), r); };
  pb::write_file_atomic(jsonl, with(", \"by_distance\": [[2, 2, 1, 1]]"));
  CHECK_THROWS_WITH(cli({"collect", (d / "runs").string(), "-o", out}),
                    Contains("eval.jsonl:3: by_distance entries must be [from, to, correct, scored]"));
  pb::write_file_atomic(jsonl, with(""));
  cli({"collect", (d / "runs").string(), "-o", out});
  CHECK_FALSE(fs::exists(out + "/distances.csv"));
  CHECK(pb::read_csv(out + "/distance_history.csv").rows.size() == 1);  // the periodic evaluation's
  std::string none = with("");  // the periodic step-20 ranges stay, replaced by the final's none
  const std::string first = ", \"by_distance\": [[1, 2, 5, 10]]";
  pb::write_file_atomic(jsonl, none.replace(none.find(first), first.size(), ""));
  cli({"collect", (d / "runs").string(), "-o", out});
  CHECK_FALSE(fs::exists(out + "/distance_history.csv"));
}
