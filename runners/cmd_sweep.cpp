// `pathbench sweep FILE.toml`: expands the grid, checks it against the grid recorded by an earlier
// start (grid.json), skips runs whose result.json exists, runs the rest as `pathbench train` child
// processes or, with --pack, as threads of this process (runners/scheduler.h), and copies the file
// into the sweep directory.
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fmt/ranges.h>
#include <map>
#include <optional>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/device.h"
#include "core/error.h"
#include "core/io.h"
#include "runners/commands.h"
#include "runners/scheduler.h"
#include "runners/sweep.h"
#include "runners/sweep_estimate.h"
#include "runners/sweep_status.h"
#include "runners/trainer.h"
#include "core/spec.h"
#if PATHBENCH_HAVE_CUDA
#include "core/cuda/runtime.h"
#endif

namespace pb {
namespace fs = std::filesystem;

namespace {

struct SweepOptions {
  std::string file, out = "runs", shard, gpus, pack;
  std::vector<std::string> only;  // --only KEY=V[,V...] filters
  size_t jobs = 1, jobs_per_gpu = 0;
  double drain_after = 0;  // seconds; 0: never
  bool dry_run = false, retry_failed = false, estimate = false, overwrite = false;
  int stack = 0;  // runs per stacked group; 0: none
};

size_t cpu_count() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return static_cast<size_t>(CPU_COUNT(&set));
  return 1;
}

// The GPUs of --gpus: "all" or a comma-separated list of device indices.
std::vector<int> parse_gpus(const std::string& text) {
  const int n = cuda_device_count();
  if (!cuda_built()) fail("--gpus: this build has no CUDA engine (build with nvcc present)");
  if (n == 0) fail("--gpus {}: no CUDA device is visible on this machine", text);
  std::vector<int> gpus;
  if (text == "all") {
    for (int g = 0; g < n; ++g) gpus.push_back(g);
    return gpus;
  }
  for (const std::string& item : split_commas(text)) {
    int g = -1;
    const auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), g);
    if (ec != std::errc() || p != item.data() + item.size() || g < 0 || g >= n)
      fail("--gpus needs 'all' or device indices 0..{} separated by commas, got '{}'", n - 1, text);
    gpus.push_back(g);
  }
  return gpus;
}

// One slot per run that may run at once, for the process engine: --jobs on the CPU, or
// --jobs-per-gpu per GPU of --gpus (each pinned to its GPU through CUDA_VISIBLE_DEVICES).
std::vector<std::string> process_slots(const SweepOptions& o) {
  if (o.gpus.empty() && o.jobs_per_gpu == 0) return std::vector<std::string>(o.jobs, "");
  std::vector<std::string> slots;
  for (int g : parse_gpus(o.gpus.empty() ? "all" : o.gpus))
    for (size_t k = 0; k < std::max<size_t>(1, o.jobs_per_gpu); ++k)
      slots.push_back("CUDA_VISIBLE_DEVICES=" + std::to_string(g));
  return slots;
}

// The devices of the packed engine's slots: --pack K per GPU of --gpus (all when not given) when
// the build and machine have one and the sweep does not set device = "cpu", else K on the CPU.
// K = auto: as many runs as fit in 85% of the first GPU's free memory (the largest run of the
// sweep, trainer.h's run_memory_bytes), at most kMaxPack; on the CPU one per core.
constexpr int kMaxPack = 32;
std::vector<int> pack_slots(const SweepOptions& o, const std::vector<Job>& jobs) {
  const bool cpu = std::any_of(jobs.begin(), jobs.end(), [](const Job& j) { return j.cfg.device == "cpu"; }) ||
                   !cuda_built() || cuda_device_count() == 0;
  if (cpu && !o.gpus.empty()) fail("--pack with --gpus: no GPU for these runs (device = \"cpu\" or none visible)");
  const std::vector<int> devices = cpu ? std::vector<int>{-1} : parse_gpus(o.gpus.empty() ? "all" : o.gpus);
  size_t k = 0;
  if (o.pack == "auto") {
    k = cpu ? cpu_count() : size_t(kMaxPack);
#if PATHBENCH_HAVE_CUDA
    if (!cpu) {
      size_t free_b = 0, total_b = 0;
      cuda::set_device(devices.front());
      cuda::memory_info(free_b, total_b);
      double largest = 1;
      for (const Job& j : jobs) largest = std::max(largest, run_memory_bytes(j.cfg, *make_task(j.cfg.task)));
      k = std::clamp<size_t>(size_t(0.85 * double(free_b) / largest), 1, kMaxPack);
    }
#endif
  } else {
    int64_t n = 0;
    if (!parse_int(o.pack, n) || n < 1 || n > 1024) fail("--pack needs a count 1..1024 or 'auto', got '{}'", o.pack);
    k = size_t(n);
  }
  std::vector<int> slots;
  for (int d : devices) slots.insert(slots.end(), k, d);
  return slots;
}

// The configuration of a run for the adaptive depth search: its resolved config without `layers`.
std::string depth_group(const TrainConfig& c) {
  auto j = semantic_json(c);
  j.erase("layers");
  return j.dump();
}

// The adaptive depth search of a sweep (sweep.h, depth_search): a job is skipped once a run of its
// configuration with fewer layers has finished meeting the rule.
SkipRule depth_search_rule(const std::optional<StopRule>& depth_rule, const std::vector<Job>& all) {
  if (!depth_rule) return {};
  const StopRule rule = *depth_rule;
  std::multimap<std::string, const Job*> by_group;
  for (const Job& j : all) by_group.emplace(depth_group(j.cfg), &j);
  return [rule, by_group](const Job& job) -> std::string {
    const auto [first, last] = by_group.equal_range(depth_group(job.cfg));
    for (auto it = first; it != last; ++it) {
      const Job& other = *it->second;
      if (other.cfg.layers >= job.cfg.layers || run_state(other.dir) != "done") continue;
      const auto r = nlohmann::json::parse(read_file(other.dir + "/result.json"));
      const auto x = r.value(nlohmann::json::json_pointer("/eval/" + rule.split + "/" + rule.metric), nlohmann::json());
      if (r.value("status", "") == "ok" && x.is_number() && rule.holds(x.get<double>()))
        return fmt::format("depth search: layers={} met {} ({})", other.cfg.layers, rule.text(), x.get<double>());
    }
    return "";
  };
}

// With the depth search a job waits for the shallower jobs of its configuration: its turn comes
// when they have ended, so the rule sees their results instead of racing them.
void wait_for_shallower(std::vector<Job>& jobs) {
  std::map<std::string, std::vector<size_t>> by_group;
  for (size_t i = 0; i < jobs.size(); ++i) by_group[depth_group(jobs[i].cfg)].push_back(i);
  for (const auto& [group, members] : by_group)
    for (const size_t i : members)
      for (const size_t j : members)
        if (jobs[j].cfg.layers < jobs[i].cfg.layers) jobs[i].after.push_back(j);
}

// The grid of a sweep as its directory records it in grid.json at the first start: {"runs":
// [{"run_id", "label"}, ...]}, the whole sweep's whatever the shard.
nlohmann::json grid_record(const std::vector<Job>& all) {
  nlohmann::json grid = {{"runs", nlohmann::json::array()}};
  for (const Job& j : all) grid["runs"].push_back({{"run_id", j.run_id}, {"label", j.label}});
  return grid;
}

// A start whose file resolves to other runs than the recorded grid (`path`) is refused, naming the
// change, unless --overwrite (the new grid is then recorded; finished runs still in it are kept);
// --dry-run and --estimate only warn.
void check_grid(const std::string& path, const std::vector<Job>& all, const SweepOptions& o) {
  if (fs::exists(path) && !o.overwrite) {
    std::map<std::string, std::string> before, now;  // run id -> label
    try {
      const auto recorded = nlohmann::json::parse(read_file(path));
      for (const auto& r : recorded.at("runs")) before[r.at("run_id").get<std::string>()] = r.at("label").get<std::string>();
    } catch (const nlohmann::json::exception& e) {
      fail("{}: not a grid record ({}); delete it or give --overwrite to record this grid", path, e.what());
    }
    for (const Job& j : all) now[j.run_id] = j.label;
    auto only_in = [](const std::map<std::string, std::string>& a, const std::map<std::string, std::string>& b) {
      std::vector<std::string> labels;
      for (const auto& [id, label] : a)
        if (!b.count(id)) labels.push_back(label);
      return labels;
    };
    std::string change;  // "2 runs added (seed=0 pe=fox; seed=1 pe=fox), 1 run removed (...)"
    auto list = [&change](const std::vector<std::string>& labels, const char* what) {
      if (labels.empty()) return;
      change += fmt::format("{}{} run{} {} (", change.empty() ? "" : ", ", labels.size(), labels.size() > 1 ? "s" : "", what);
      for (size_t i = 0; i < std::min<size_t>(3, labels.size()); ++i) change += (i ? "; " : "") + labels[i];
      change += labels.size() > 3 ? "; ...)" : ")";
    };
    list(only_in(now, before), "added");
    list(only_in(before, now), "removed");
    if (!change.empty()) {
      const std::string message = fmt::format("{}: the grid differs from the one recorded in {}: {}", o.file, path, change);
      if (!o.dry_run && !o.estimate)
        fail("{}; give --overwrite to record the new grid (finished runs still in it are kept)", message);
      fmt::print(stderr, "sweep: warning: {}\n", message);
    }
  }
}

void run_sweep(const SweepOptions& o) {
  if (!o.pack.empty() && (o.jobs != 1 || o.jobs_per_gpu))
    fail("--pack runs the sweep in one process; it cannot be combined with --jobs or --jobs-per-gpu");
  if (o.estimate && o.pack.empty()) fail("--estimate projects the packed engine: give --pack K or --pack auto");
  if (o.stack && o.pack.empty()) fail("--stack stacks the runs of a pack: give --pack K or --pack auto");
  if (o.stack < 0 || o.stack > 1024) fail("--stack needs a count 1..1024, got {}", o.stack);
  if (o.stack && o.estimate) fail("--estimate projects the packed engine without --stack; leave out --stack");
  const std::string text = read_file(o.file);
  Sweep sweep = parse_sweep(text, o.file, train_option_kinds());
  const std::string sweep_dir = (fs::path(o.out) / sweep.name).string();
  const bool packed = !o.pack.empty();
  if (packed) prepare_packed_process();  // before the first CUDA call (cuda_device_count)
  const std::vector<std::string> slots = packed ? std::vector<std::string>{} : process_slots(o);
  const bool on_gpus = packed ? cuda_built() && cuda_device_count() > 0 : !slots.front().empty();
  std::optional<StopRule> depth_rule;
  if (!sweep.depth_search.empty()) depth_rule = parse_stop_rule(sweep.depth_search, "depth_search");
  // Every run of the sweep, resolved; the first of two with one config only. `chosen`: the
  // positions in `all` of the runs --only keeps.
  std::vector<Job> all;
  std::vector<size_t> chosen;
  std::set<std::string> seen;
  std::map<std::string, size_t> rank_of;  // run id -> SweepRun::rank
  const std::vector<size_t> only = select_runs(sweep, o.only);
  for (size_t i = 0; i < sweep.runs.size(); ++i) {
    TrainConfig cfg;
    try {
      cfg = config_of(sweep.runs[i].args);
    } catch (const Error& e) {
      fail("{}: run {} ({}): {}", o.file, i, sweep.runs[i].label, e.what());
    }
    const std::string id = run_id(cfg);
    if (!seen.insert(id).second) {
      fmt::print(stderr, "sweep {}: {} is the same config as an earlier run; run once\n", sweep.name,
                 sweep.runs[i].label);
      continue;
    }
    if (depth_rule) check_eval_split(*depth_rule, cfg.task, fmt::format("{}: depth_search '{}'", o.file, depth_rule->text()));
    rank_of[id] = sweep.runs[i].rank;
    if (std::binary_search(only.begin(), only.end(), i)) chosen.push_back(all.size());
    const std::string dir = (fs::path(sweep_dir) / id).string();
    all.push_back({sweep.runs[i].args, std::move(cfg), dir, id, sweep.runs[i].label, {}});  // argv: the options, for now
  }
  const std::string grid_path = (fs::path(sweep_dir) / "grid.json").string();
  check_grid(grid_path, all, o);
  std::vector<Job> picked;
  for (const size_t i : shard_indices(chosen.size(), o.shard.empty() ? "0/1" : o.shard)) picked.push_back(all[chosen[i]]);
  if (!sweep.depth_search.empty())  // the outer value and seed first, then shallow before deep
    std::stable_sort(picked.begin(), picked.end(), [&](const Job& a, const Job& b) {
      const size_t ra = rank_of.at(a.run_id), rb = rank_of.at(b.run_id);
      return ra != rb ? ra < rb : a.cfg.layers < b.cfg.layers;
    });
  const std::vector<int> devices = packed ? pack_slots(o, picked) : std::vector<int>{};
  const size_t n_slots = packed ? devices.size() : slots.size();
  const std::string exe = fs::read_symlink("/proc/self/exe").string();
  const size_t threads = std::max<size_t>(1, cpu_count() / n_slots);
  const SkipRule skip = depth_search_rule(depth_rule, all);
  SweepProgress before{sweep.name, 0, 0, 0, o.drain_after > 0 ? now_s() + o.drain_after : 0};
  std::vector<Job> jobs;
  for (Job& job : picked) {
    const std::string state = run_state(job.dir);
    ++before.total;
    if (state == "done") ++before.done;
    if (state == "failed" && !o.retry_failed) ++before.failed;
    const bool pending = state == "pending" || (state == "failed" && o.retry_failed);
    if (o.dry_run) {
      const std::string why = pending && skip ? skip(job) : "";
      fmt::print("{}\t{}\t{}\n", job.run_id, why.empty() ? state : "skipped", job.label);
    }
    if (!pending) continue;
    job.state = state;
    TrainConfig& cfg = job.cfg;
    if (packed && cfg.gpus > 1) fail("{}: --pack trains each run on one GPU; gpus = {} needs the process engine", o.file, cfg.gpus);
    cfg.threads = int(threads), cfg.out = job.dir;
    if (on_gpus && cfg.device == "auto") cfg.device = "cuda";
    job.argv.insert(job.argv.begin(), {exe, "train"});
    job.exec = "/proc/self/exe";  // a binary rebuilt while the sweep runs does not change its runs
    job.argv.insert(job.argv.end(), {"--threads", std::to_string(threads), "--out", job.dir});
    if (on_gpus && std::find(job.argv.begin(), job.argv.end(), "--device") == job.argv.end())
      job.argv.insert(job.argv.end(), {"--device", "cuda"});
    jobs.push_back(std::move(job));
  }
  fmt::print(stderr, "sweep {}: {} runs{}{}: {} done, {} failed, {} to run, in {}{}\n", sweep.name, before.total,
             o.only.empty() ? "" : fmt::format(" with {}", fmt::join(o.only, " ")),
             o.shard.empty() ? "" : " in shard " + o.shard, before.done, before.failed, jobs.size(), sweep_dir,
             packed ? fmt::format(" (packed, {} slots)", devices.size()) : "");
  if (o.estimate) return print_estimate(jobs, devices);
  if (depth_rule) wait_for_shallower(jobs);
  if (o.dry_run) return;
  fs::create_directories(sweep_dir);
  write_file_atomic((fs::path(sweep_dir) / "sweep.toml").string(), text);
  if (o.overwrite || !fs::exists(grid_path)) write_file_atomic(grid_path, grid_record(all).dump(2) + "\n");
  const JobsOutcome got =
      packed ? run_packed(jobs, devices, before, skip, o.stack) : run_jobs(jobs, slots, before, skip);
  if (got.signal)
    throw Stopped(fmt::format("sweep {} stopped by {}; runs in flight are pending: rerun the same command to "
                              "finish it", sweep.name, strsignal(got.signal)), got.signal);
  fmt::print(stderr, "sweep {}: {} of {} runs done, {} failed{}{}{}\n", sweep.name, before.done + got.done,
             before.total, before.failed + got.failed,
             got.by_others ? fmt::format(" ({} of them by other workers)", got.by_others) : "",
             got.skipped ? fmt::format(", {} skipped by the depth search", got.skipped) : "",
             got.left ? fmt::format("; drained: {} runs not started (rerun the same command to continue)", got.left) : "");
  if (before.failed + got.failed > 0)
    fail("sweep {}: {} runs failed (their result.json holds the error; --retry-failed reruns them)",
         sweep.name, before.failed + got.failed);
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("sweep", "Run the grid of a sweep file, skipping finished runs");
  auto o = std::make_shared<SweepOptions>();
  cmd->add_option("file", o->file, "sweep file (TOML: [sweep], [base], [grid])")
      ->type_name("FILE")
      ->required();
  cmd->add_option("--out", o->out, "root directory; runs go to OUT/<sweep name>/<run id>")
      ->type_name("DIR")
      ->capture_default_str();
  cmd->add_option("--jobs", o->jobs, "runs at once; each gets CPU threads / N")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--gpus", o->gpus, "run on GPUs: 'all' or indices '0,1,...' (runs get --device cuda)")
      ->type_name("all|I,J,...");
  cmd->add_option("--jobs-per-gpu", o->jobs_per_gpu, "runs at once on each GPU (implies --gpus all)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--shard", o->shard, "i/n: take runs i, i+n, i+2n, ... of the sweep (Slurm arrays; of the runs --only keeps)")
      ->type_name("I/N");
  cmd->add_option("--only", o->only,
                  "KEY=V[,V...], repeatable: only the runs with one of these values of KEY (a seed or [grid] key), "
                  "for every filter; the others are left as they are (docs/sweeps.md)")
      ->type_name("KEY=V,...");
  cmd->add_flag("--dry-run", o->dry_run, "list the runs (id, state, values) on stdout; run nothing");
  cmd->add_flag("--retry-failed", o->retry_failed, "rerun runs whose result.json has status failed");
  cmd->add_flag("--overwrite", o->overwrite,
                "accept a grid that differs from the one recorded at the first start (OUT/<name>/grid.json): "
                "record it; finished runs still in the grid are kept, others' directories are left in place");
  cmd->add_option("--pack", o->pack,
                  "K|auto: run K runs at once per GPU (or on the CPU) as threads of this process, each on its "
                  "own CUDA stream (auto: as many as fit in GPU memory)")
      ->type_name("K|auto");
  cmd->add_option("--stack", o->stack,
                  "N, with --pack: runs of one shape train as the slots of stacked models of N runs (batched "
                  "GEMMs, one kernel per op for all of them; docs/sweeps.md)")
      ->type_name("N");
  cmd->add_option("--drain-after", o->drain_after,
                  "SECONDS: start no run after this long; the runs in flight finish, the rest wait for the next "
                  "start (0, the default: no limit)")
      ->type_name("SECONDS")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--estimate", o->estimate,
                "with --pack: time a few packed steps of each shape and print the projected time; run nothing");
  cmd->callback([o] { run_sweep(*o); });
}

}  // namespace pb
