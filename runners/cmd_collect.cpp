// `pathbench collect RUNS_DIR -o OUT_DIR`: every run directory below RUNS_DIR (one holding
// config.json or result.json) becomes a row of runs.csv; per split and evaluated task, the last
// evaluation of eval.jsonl a row of evals.csv; every evaluation of eval.jsonl a row of
// history.csv, except that a later evaluation of the same split, task and step replaces an earlier
// one (the final evaluation of a run stopped at a periodic one); the per-sequence error counts of
// those last evaluations rows of seqstats.csv, and their accuracy by recall distance, where
// recorded, rows of distances.csv (a row per range of distances); the ranges of every evaluation
// (history.csv's rows) are rows of distance_history.csv.
// Column order: docs/sweeps.md. What is read is checked first (one-line pb::Error naming the file):
// result.json an object with a status and numeric measurements, config.json an object with task
// and pe specs and numeric settings (only a failed run may lack it), eval.jsonl rows objects with a
// split, numeric measurements and a task that is the run's at some len; and a finished run's files
// are of one attempt of it (check_one_attempt).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <tuple>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/io.h"
#include "core/spec.h"
#include "models/position/position_encoding.h"
#include "runners/commands.h"
#include "runners/csv.h"
#include "runners/train_config.h"
#include "tasks/task.h"

namespace pb {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::vector<std::string> kRunColumns = {
    "sweep", "run_id", "status", "error", "task", "task_name", "pe", "pe_name", "layers", "d_model",
    "heads", "mlp_ratio", "lr", "steps", "batch", "warmup", "weight_decay", "grad_clip", "seed", "eval_n",
    "data", "device", "final_loss", "wall_s", "commit", "gpu_name", "precision", "eval_every", "eval_every_n",
    "eval_batch", "stop_at", "patience", "patience_on", "eval_sizes", "eval_lens", "init_from", "kv_conv",
    "steps_trained", "stop", "stopped_at_step", "eval_s"};
const std::vector<std::string> kEvalColumns = {
    "sweep", "run_id", "status", "train_task", "task", "task_name", "len", "pe", "pe_name", "layers",
    "d_model", "heads", "lr", "steps", "batch", "seed", "split", "step", "n", "n_seqs", "acc", "seq_acc",
    "error_rate", "acc_ci_low", "acc_ci_high", "loss", "mlp_ratio", "warmup", "weight_decay", "grad_clip",
    "precision", "eval_every", "eval_every_n", "eval_batch", "stop_at", "patience", "patience_on", "eval_sizes",
    "eval_lens", "init_from", "kv_conv", "stop"};

// distances.csv: a row per distance range of a last evaluation that recorded accuracy by distance
// (eval.jsonl's by_distance): evals.csv's columns with the range's counts (n its scored targets,
// acc, error_rate and the Wilson interval; no sequence measures or loss) and the range, from ≤
// distance < to.
std::vector<std::string> distance_columns() {
  std::vector<std::string> c = kEvalColumns;
  c.insert(std::find(c.begin(), c.end(), "split") + 1, {"distance_from", "distance_to"});
  return c;
}

// Per-sequence error counts of the last evaluations that recorded them (runners/bootstrap.h):
// one row per evaluation, `bins` = "wrong:scored:sequences ..." (space-separated).
const std::vector<std::string> kSeqColumns = {"sweep", "run_id", "task", "split", "bins"};

// Train options past the core columns: in runs.csv, evals.csv and history.csv (empty for runs
// written before the option existed).
const char* const kOptionKeys[] = {"precision", "eval_every",  "eval_every_n", "eval_batch", "stop_at",
                                   "patience",  "patience_on", "eval_sizes",   "eval_lens", "init_from",
                                   "kv_conv"};

using Row = std::map<std::string, std::string>;

std::string cell(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return v.dump();
  if (v.is_number()) return fmt::format("{}", v.get<double>());
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  return v.is_null() ? "" : v.dump();
}

std::string field(const json& obj, const char* key) {
  return obj.is_object() && obj.contains(key) ? cell(obj[key]) : "";
}

json read_json(const std::string& path) {
  if (!fs::exists(path)) return json::object();
  try {
    return json::parse(read_file(path));
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", path, e.what());
  }
}

// A pb::Error naming `where` unless each of `keys` of `obj` is absent, null (not finite) or a number.
void require_numbers(const json& obj, std::initializer_list<const char*> keys, const std::string& where) {
  for (const char* k : keys)
    if (obj.contains(k) && !obj[k].is_null() && !obj[k].is_number())
      fail("{}: \"{}\" must be a number, got {}", where, k, obj[k].dump());
}

// The measurements of one evaluation (eval.jsonl rows, result.json's "eval" entries).
void check_eval_entry(const json& e, const std::string& where) {
  if (!e.is_object()) fail("{}: an evaluation must be a JSON object, got {}", where, e.dump());
  require_numbers(e, {"acc", "seq_acc", "loss", "n", "n_seqs", "step", "len"}, where);
}

// result.json: an object with a status string and numeric measurements.
void check_result(const json& r, const std::string& path) {
  if (!r.is_object()) fail("{}: not a run result: expected a JSON object", path);
  if (!r.contains("status") || !r["status"].is_string() || r["status"].get<std::string>().empty())
    fail("{}: not a run result: no \"status\" string", path);
  require_numbers(r, {"final_loss", "wall_s", "steps", "stopped_at_step", "eval_s", "eval_batch"}, path);
  if (!r.contains("eval")) return;
  if (!r["eval"].is_object()) fail("{}: \"eval\" must be an object of splits", path);
  for (const auto& [split, e] : r["eval"].items()) check_eval_entry(e, fmt::format("{} (eval.{})", path, split));
}

// "name:k=v,..." -> name, and columns <prefix>_<k> = v for every key of its schema, those that the
// canonical form leaves out at their defaults too (so `--where pe_conv=1` sees every run); for a
// spec this build cannot resolve (a run of another version), the keys written in it.
std::string split_spec(const std::string& spec, const std::string& prefix, Row& row) {
  try {
    const Spec s = prefix == "pe" ? resolve_encoding(spec) : resolve_spec(spec, task_schemas(), "task");
    for (const auto& [k, v] : s.items()) row[prefix + "_" + k] = v;
    return s.name();
  } catch (const Error&) {
  }
  for (const auto& [k, v] : spec_items(spec)) row[prefix + "_" + k] = v;
  return spec.substr(0, spec.find(':'));
}

// Wilson score interval, 95%.
std::pair<double, double> wilson(double p, double n) {
  const double z = 1.959963984540054, z2 = z * z;
  const double centre = (p + z2 / (2 * n)) / (1 + z2 / n);
  const double half = z * std::sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n);
  return {std::max(0.0, centre - half), std::min(1.0, centre + half)};
}

std::string num(double v) { return fmt::format("{}", v); }

void add_eval_stats(Row& row) {
  double acc, n;
  if (!parse_float(row["acc"], acc) || !parse_float(row["n"], n) || n <= 0) return;
  const double correct = std::round(acc * n);  // exact when acc = correct / n
  row["error_rate"] = std::abs(acc * n - correct) < 1e-6 ? num((n - correct) / n) : num(1 - acc);
  const auto [lo, hi] = wilson(acc, n);
  row["acc_ci_low"] = num(lo);
  row["acc_ci_high"] = num(hi);
}

// The evaluations of a run's eval.jsonl, as "split acc n" and "split acc" (cell() of each value).
using Evaluated = std::set<std::string>;

// The files of a finished run come from one attempt of it; a restore of packed records over a newer
// copy of the run once mixed two (results/paper-mqrar/README.md). result.json and meta.json carry
// the same attempt id (runs trained before it existed carry none); each final evaluation of
// result.json is in eval.jsonl (`eval --run` may append others after it); metrics.jsonl, logged
// every steps/100 steps and at the last, ends less than one interval before result.json's step count.
void check_one_attempt(const fs::path& dir, const json& result, const json& config, const json& meta,
                       const Evaluated& evaluated) {
  if (result["status"] != "ok") return;
  auto mixed = [&](const std::string& why) {
    fail("{}: the run's files come from two attempts of it ({}); restore the folder whole, or delete it to "
         "rerun the run", dir.string(), why);
  };
  if (result.contains("attempt") && meta.contains("attempt") && result["attempt"] != meta["attempt"])
    mixed(fmt::format("result.json is attempt {}, meta.json {}", cell(result["attempt"]), cell(meta["attempt"])));
  if (result.contains("eval") && fs::exists(dir / "eval.jsonl"))
    for (const auto& [split, e] : result["eval"].items())
      if (!evaluated.count(fmt::format("{} {}{}", split, field(e, "acc"), e.contains("n") ? " " + field(e, "n") : "")))
        mixed(fmt::format("its final {} evaluation is not in eval.jsonl", split));
  const std::string metrics = (dir / "metrics.jsonl").string();
  if (!result.contains("steps") || !fs::exists(metrics)) return;
  std::string text = read_file(metrics);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  if (text.empty()) return;
  json line;
  try {
    line = json::parse(text.substr(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1));
  } catch (const json::exception& err) {
    fail("{}: last line: invalid JSON: {}", metrics, err.what());
  }
  if (!line.is_object()) fail("{}: last line: expected a JSON object", metrics);
  const double steps = result["steps"], logged = line.value("step", -1.0);
  const double every = std::max(1, config.value("steps", 0) / 100);
  if (logged > steps || steps - logged >= every)
    mixed(fmt::format("metrics.jsonl ends at step {}, result.json at {}", logged, steps));
}

// The ranges of an evaluation's by_distance (none when it has none) as (from, to, the evaluation
// with that range's acc and n, without its other measures); a malformed entry is a one-line error
// naming `where`.
std::vector<std::tuple<int64_t, int64_t, json>> distance_ranges(const json& e, const std::string& where) {
  std::vector<std::tuple<int64_t, int64_t, json>> out;
  if (!e.contains("by_distance")) return out;
  const auto& ranges = e["by_distance"];
  if (!ranges.is_array()) fail("{}: by_distance must be an array of [from, to, correct, scored]", where);
  json base = e;  // the evaluation without the measures a range does not have
  for (const char* k : {"seq_acc", "n_seqs", "loss", "by_distance", "seq_errors"}) base.erase(k);
  auto whole = [](const json& v) { return v.is_number_integer() && v.get<int64_t>() >= 0; };
  for (const json& r : ranges) {
    const bool ok = r.is_array() && r.size() == 4 && whole(r[0]) && whole(r[1]) && whole(r[2]) && whole(r[3]) &&
                    r[0] < r[1] && r[2] <= r[3] && r[3] > 0;
    if (!ok)
      fail("{}: by_distance entries must be [from, to, correct, scored] with from < to, correct <= scored", where);
    json range = base;
    range["n"] = r[3];
    range["acc"] = r[2].get<double>() / r[3].get<double>();
    out.emplace_back(r[0].get<int64_t>(), r[1].get<int64_t>(), std::move(range));
  }
  return out;
}

struct Tables {
  std::vector<Row> runs, evals, history, seqstats, distances, distance_history;
};

// Adds the rows of the run in `dir` (which has a result.json) to `t`. A failed run may lack
// config.json (it failed before writing one): its row has the status and error only.
void collect_run(const fs::path& dir, Tables& t) {
  const std::string result_path = (dir / "result.json").string(), config_path = (dir / "config.json").string();
  const json result = read_json(result_path);
  check_result(result, result_path);
  const bool has_config = fs::exists(config_path);
  if (!has_config && result["status"] != "failed")
    fail("{}: missing; the run's result.json cannot be labelled without it", config_path);
  const json config = read_json(config_path);
  if (!config.is_object()) fail("{}: not a run config: expected a JSON object", config_path);
  for (const char* k : {"task", "pe"})
    if (has_config && (!config.contains(k) || !config[k].is_string()))
      fail("{}: not a run config: no \"{}\" spec string", config_path, k);
  require_numbers(config, {"layers", "d_model", "heads", "mlp_ratio", "lr", "steps", "batch", "warmup", "weight_decay",
                           "grad_clip", "seed", "eval_n"}, config_path);
  const json meta = read_json((dir / "meta.json").string());
  Row run;
  run["sweep"] = fs::exists(dir.parent_path() / "sweep.toml") ? dir.parent_path().filename().string() : "";
  run["run_id"] = dir.filename().string();
  for (const char* k : {"task", "pe", "layers", "d_model", "heads", "mlp_ratio", "lr", "steps", "batch",
                        "warmup", "weight_decay", "grad_clip", "seed", "eval_n", "data", "device"})
    run[k] = field(config, k);
  for (const char* k : kOptionKeys) run[k] = field(config, k);
  for (const char* k : {"status", "error", "final_loss", "wall_s", "stop", "stopped_at_step", "eval_s"})
    run[k] = field(result, k);
  run["steps_trained"] = field(result, "steps");
  for (const char* k : {"commit", "gpu_name", "device"})
    if (!field(meta, k).empty()) run[k] = field(meta, k);
  if (!run["task"].empty()) run["task_name"] = split_spec(run["task"], "task", run);
  if (!run["pe"].empty()) run["pe_name"] = split_spec(run["pe"], "pe", run);
  if (result.contains("eval") && result["eval"].is_object())
    for (const auto& [split, e] : result["eval"].items()) {
      run["acc_" + split] = field(e, "acc");
      run["seq_acc_" + split] = field(e, "seq_acc");
    }
  // The row of one evaluation: the run's options, then the evaluation's own columns.
  auto eval_row = [&](const json& e, const std::string& split, const std::string& task) {
    Row row;
    for (const char* k : {"sweep", "run_id", "status", "pe", "pe_name", "layers", "d_model", "heads", "lr",
                          "steps", "batch", "seed", "mlp_ratio", "warmup", "weight_decay", "grad_clip", "stop"})
      row[k] = run[k];
    for (const char* k : kOptionKeys) row[k] = run[k];
    for (const auto& [k, v] : run)
      if (k.rfind("pe_", 0) == 0) row[k] = v;
    row["train_task"] = run["task"];
    row["split"] = split;
    row["task"] = task;
    if (!row["task"].empty()) row["task_name"] = split_spec(row["task"], "task", row);
    for (const char* k : {"len", "step", "n", "n_seqs", "acc", "seq_acc", "loss"}) row[k] = field(e, k);
    add_eval_stats(row);
    return row;
  };
  // The rows of an evaluation's distance ranges (none without by_distance).
  auto range_rows = [&](const json& e, const std::string& split, const std::string& task, const std::string& where) {
    std::vector<Row> rows;
    for (const auto& [from, to, range] : distance_ranges(e, where)) {
      rows.push_back(eval_row(range, split, task));
      rows.back()["distance_from"] = std::to_string(from), rows.back()["distance_to"] = std::to_string(to);
    }
    return rows;
  };
  // Last evaluation per (split, task): the highest step, the later line on a tie.
  std::map<std::pair<std::string, std::string>, json> last;
  Evaluated evaluated;
  // The run's history rows and each one's range rows; (split, task, step) -> their index (a later
  // line of the same key replaces both).
  std::vector<Row> history;
  std::vector<std::vector<Row>> history_ranges;
  std::map<std::tuple<std::string, std::string, std::string>, size_t> history_at;
  const std::string evals = (dir / "eval.jsonl").string();
  if (fs::exists(evals)) {
    const std::string text = read_file(evals);
    size_t line = 0;
    for (size_t at = 0; at < text.size();) {
      const size_t end = std::min(text.find('\n', at), text.size());
      const std::string s = text.substr(at, end - at);
      at = end + 1, ++line;
      if (s.empty()) continue;
      json e;
      try {
        e = json::parse(s);
      } catch (const json::exception& err) {
        fail("{}:{}: invalid JSON: {}", evals, line, err.what());
      }
      const std::string where = fmt::format("{}:{}", evals, line);
      check_eval_entry(e, where);
      if (!e.contains("split") || !e["split"].is_string()) fail("{}: no \"split\" string", where);
      if (e.contains("task") && !e["task"].is_string()) fail("{}: \"task\" must be a spec string", where);
      const std::string task = e.contains("task") ? field(e, "task") : run["task"];
      try {
        check_eval_task(make_task(run["task"])->spec(), make_task(task)->spec());
      } catch (const Error& err) {
        fail("{}: {}", where, err.what());
      }
      evaluated.insert(fmt::format("{} {}", field(e, "split"), field(e, "acc")));
      evaluated.insert(fmt::format("{} {} {}", field(e, "split"), field(e, "acc"), field(e, "n")));
      Row row = eval_row(e, field(e, "split"), task);
      std::vector<Row> ranges = range_rows(e, row["split"], task, where);
      const auto [slot, fresh_step] = history_at.try_emplace({row["split"], task, row["step"]}, history.size());
      if (fresh_step) history.push_back(std::move(row)), history_ranges.push_back(std::move(ranges));
      else history[slot->second] = std::move(row), history_ranges[slot->second] = std::move(ranges);
      auto [it, fresh] = last.try_emplace({field(e, "split"), task}, e);
      if (!fresh && e.value("step", 0.0) >= it->second.value("step", 0.0)) it->second = e;
    }
  }
  check_one_attempt(dir, result, config, meta, evaluated);
  for (size_t i = 0; i < history.size(); ++i) {
    t.history.push_back(std::move(history[i]));
    for (auto& row : history_ranges[i]) t.distance_history.push_back(std::move(row));
  }
  std::vector<std::pair<std::tuple<std::string, double, std::string>, json>> ordered;  // split, len, task
  for (const auto& [key, e] : last) {
    double len = 0;
    parse_float(field(e, "len"), len);
    ordered.push_back({{key.first, len, key.second}, e});
  }
  std::sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [key, e] : ordered) {
    t.evals.push_back(eval_row(e, std::get<0>(key), std::get<2>(key)));
    for (auto& row : range_rows(e, std::get<0>(key), std::get<2>(key), evals)) t.distances.push_back(std::move(row));
    if (!e.contains("seq_errors") || !e["seq_errors"].is_array()) continue;
    std::string bins;
    for (const auto& bin : e["seq_errors"]) {
      if (!bin.is_array() || bin.size() != 3) fail("{}: seq_errors entries must be [wrong, scored, sequences]", evals);
      bins += fmt::format("{}{}:{}:{}", bins.empty() ? "" : " ", cell(bin[0]), cell(bin[1]), cell(bin[2]));
    }
    t.seqstats.push_back({{"sweep", run["sweep"]}, {"run_id", run["run_id"]}, {"task", std::get<2>(key)},
                          {"split", std::get<0>(key)}, {"bins", bins}});
  }
  t.runs.push_back(std::move(run));
}

// Core columns, then the task_* and pe_* parameters, then the rest (runs.csv: acc_<split>,
// seq_acc_<split>), each group sorted.
Csv to_csv(const std::vector<Row>& rows, const std::vector<std::string>& core) {
  std::set<std::string> params, rest;
  const std::set<std::string> fixed(core.begin(), core.end());
  for (const auto& row : rows)
    for (const auto& [k, v] : row)
      if (!fixed.count(k)) (k.rfind("task_", 0) == 0 || k.rfind("pe_", 0) == 0 ? params : rest).insert(k);
  Csv csv;
  csv.header = core;
  std::vector<std::string> task_params, pe_params;
  for (const auto& p : params) (p.rfind("task_", 0) == 0 ? task_params : pe_params).push_back(p);
  for (const auto* group : {&task_params, &pe_params})
    csv.header.insert(csv.header.end(), group->begin(), group->end());
  csv.header.insert(csv.header.end(), rest.begin(), rest.end());
  for (const auto& row : rows) {
    csv.rows.emplace_back();
    for (const auto& h : csv.header) {
      auto it = row.find(h);
      csv.rows.back().push_back(it == row.end() ? "" : it->second);
    }
  }
  return csv;
}

void run_collect(const std::string& runs_dir, const std::string& out_dir) {
  if (!fs::is_directory(runs_dir)) fail("'{}' is not a directory", runs_dir);
  const fs::path root = fs::path(runs_dir).has_filename() ? fs::path(runs_dir) : fs::path(runs_dir).parent_path();
  auto is_run = [](const fs::path& d) { return fs::exists(d / "config.json") || fs::exists(d / "result.json"); };
  std::vector<fs::path> dirs;
  if (is_run(root)) dirs.push_back(root);
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    if (!it->is_directory() || !is_run(it->path())) continue;
    dirs.push_back(it->path());
    it.disable_recursion_pending();
  }
  std::sort(dirs.begin(), dirs.end());
  Tables t;
  size_t skipped = 0;
  for (const auto& d : dirs) {
    if (fs::exists(d / "result.json")) collect_run(d, t);
    else ++skipped;
  }
  fs::create_directories(out_dir);
  write_file_atomic((fs::path(out_dir) / "runs.csv").string(), write_csv(to_csv(t.runs, kRunColumns)));
  write_file_atomic((fs::path(out_dir) / "evals.csv").string(), write_csv(to_csv(t.evals, kEvalColumns)));
  write_file_atomic((fs::path(out_dir) / "history.csv").string(), write_csv(to_csv(t.history, kEvalColumns)));
  write_file_atomic((fs::path(out_dir) / "seqstats.csv").string(), write_csv(to_csv(t.seqstats, kSeqColumns)));
  std::string written = "runs.csv, evals.csv, history.csv, seqstats.csv";
  for (const auto& [name, rows] : {std::pair{"distances.csv", &t.distances},  // only where a run has them
                                   std::pair{"distance_history.csv", &t.distance_history}}) {
    const fs::path path = fs::path(out_dir) / name;
    if (rows->empty()) {
      fs::remove(path);
      continue;
    }
    write_file_atomic(path.string(), write_csv(to_csv(*rows, distance_columns())));
    written += fmt::format(", {}", name);
  }
  fmt::print(stderr, "collect: {} runs, {} evaluation rows ({} in the history) -> {}/{}; {} runs without result.json "
             "skipped (pending or running)\n", t.runs.size(), t.evals.size(), t.history.size(), out_dir, written, skipped);
}

}  // namespace

void add_collect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("collect",
                                 "Gather run directories into runs.csv, evals.csv, history.csv, seqstats.csv "
                                 "(and distances.csv, distance_history.csv)");
  auto dirs = std::make_shared<std::pair<std::string, std::string>>();
  cmd->add_option("runs_dir", dirs->first, "directory searched recursively for runs")
      ->type_name("DIR")
      ->required();
  cmd->add_option("-o,--out", dirs->second, "output directory for the CSVs")->type_name("DIR")->required();
  cmd->callback([dirs] { run_collect(dirs->first, dirs->second); });
}

}  // namespace pb
