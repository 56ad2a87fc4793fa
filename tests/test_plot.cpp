// plot: figures from hand-made CSVs, run in-process through the subcommand: deterministic and
// well-formed SVG, panels and series in value order, the intervals of `table`, learning curves.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cli.h"
#include "core/io.h"
#include "results_fixtures.h"
#include "runners/csv.h"
#include "runners/plot.h"
#include "runners/results.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using pb::test::bootstrap_csvs;
using pb::test::cli;
using pb::test::evals_csv;
using pb::test::fresh_dir;

namespace {

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

}  // namespace

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
  CHECK_THAT(svg, Contains("± 1 sd over seeds (no bootstrap interval: not every point has its per-sequence counts"));
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
  CHECK_THAT(sd, Contains("± 1 sd over seeds (no bootstrap interval: not every point has its per-sequence counts") && Contains("data-bound=\"1\""));
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

TEST_CASE("plot: curves by recall distance: a panel per range and lr chosen on the whole split", "[sweep]") {
  const fs::path d = fresh_dir("plot_distance_curves");
  const std::string history = (d / "distance_history.csv").string(), a = (d / "a.svg").string();
  pb::Csv h, e;
  h.header = {"run_id", "task", "pe", "lr", "seed", "split", "distance_from", "distance_to", "step", "n", "acc"};
  e.header = {"run_id", "task", "pe", "lr", "seed", "split", "step", "n", "acc", "loss"};
  // At distance 16–31 lr 0.01 ends better, at 2–3 lr 0.001; on the whole split (evals.csv) 0.001.
  for (const std::string pe : {"rope", "path"})
    for (const std::string lr : {"0.001", "0.01"})
      for (int seed : {0, 1}) {
        const std::string id = pe + lr + std::to_string(seed);
        for (const auto& [from, to, n] : {std::tuple{"16", "32", "50"}, std::tuple{"2", "4", "400"}})
          for (int step : {100, 200}) {
            const bool better = (lr == "0.01") == (std::string(from) == "16");
            h.rows.push_back({id, "mqrar", pe, lr, std::to_string(seed), "val", from, to, std::to_string(step), n,
                              step == 100 ? "0.5" : better ? "0.9" : "0.6"});
          }
        e.rows.push_back({id, "mqrar", pe, lr, std::to_string(seed), "val", "200", "450", lr == "0.001" ? "0.8" : "0.7",
                          "1"});
      }
  pb::write_file_atomic(history, pb::write_csv(h));
  // The choice is the runs' (evals.csv), not a range's: without it, none.
  CHECK_THROWS_WITH(cli({"plot", history, "--figure", "curves", "--split", "val", "-o", a}),
                    Contains("needs the runs' evals.csv beside it"));
  pb::write_file_atomic((d / "evals.csv").string(), pb::write_csv(e));
  cli({"plot", history, "--figure", "curves", "--split", "val", "-o", a});
  std::string svg = pb::read_file(a);
  CHECK(well_formed(svg));
  CHECK(count(svg, "<g class=\"panel\"") == 2);
  CHECK(svg.find(">distance 2–3<") < svg.find(">distance 16–31<"));
  CHECK(count(svg, "(lr 0.001): acc 0.6 at step 200") == 2);  // rope and path at 16–31
  CHECK(count(svg, "(lr 0.001): acc 0.9 at step 200") == 2);  // at 2–3
  CHECK(count(svg, "(lr 0.01)") == 0);
  CHECK_THAT(svg, Contains("n = 50–400 scored targets per range of recall distance and evaluation"));
  // One range: its panel, named in the caption.
  cli({"plot", history, "--figure", "curves", "--split", "val", "--where", "distance_from=16", "-o", a});
  svg = pb::read_file(a);
  CHECK(count(svg, "<g class=\"panel\"") == 1);
  CHECK_THAT(svg, Contains("training step, distance 16–31") && Contains("n = 50 scored targets"));
}

TEST_CASE("plot acc-vs --x COLUMN: a task parameter on the x axis, one panel across its tasks", "[sweep]") {
  const fs::path d = fresh_dir("plot_acc_vs");
  pb::Csv c;
  c.header = {"task", "task_n_back", "pe", "layers", "lr", "seed", "split", "n", "acc"};
  for (const char* pe : {"rope", "path"})
    for (int n : {1, 2, 4})
      for (int seed : {0, 1})
        c.rows.push_back({fmt::format("mqrar:n_back={}", n), std::to_string(n), pe, "2", "0.001", std::to_string(seed),
                          "test", "1000", fmt::format("{}", std::string(pe) == "path" ? 0.99 : 1.0 / n)});
  const std::string csv = (d / "evals.csv").string(), a = (d / "a.svg").string();
  pb::write_file_atomic(csv, pb::write_csv(c));
  cli({"plot", csv, "--figure", "acc-vs", "--x", "task_n_back", "--split", "test", "--select-on", "test", "-o", a});
  const std::string svg = pb::read_file(a);
  CHECK(well_formed(svg));
  CHECK(count(svg, "<g class=\"panel\"") == 1);  // the task varies with n_back: no panel per task
  CHECK(count(svg, "<g class=\"series\"") == 2);
  CHECK(count(svg, "<g class=\"point\"") == 6);
  CHECK_THAT(svg, Contains(">n_back</text>"));
  const size_t rope4 = svg.find("data-x=\"4\"", svg.find("data-pe=\"rope\""));
  REQUIRE(rope4 != std::string::npos);
  CHECK(attr(svg, rope4, "data-y") == Approx(0.25));
  CHECK_THROWS_WITH(cli({"plot", csv, "--figure", "acc-vs", "--split", "test", "-o", a}),
                    Contains("--figure acc-vs needs --x COLUMN"));
  CHECK_THROWS_WITH(cli({"plot", csv, "--figure", "acc-vs-depth", "--x", "layers", "--split", "test", "-o", a}),
                    Contains("--x is for --figure acc-vs"));
}
