// `pathbench sweep FILE.toml`: expands the grid, skips runs whose result.json exists, runs the
// rest as `pathbench train` child processes (runners/scheduler.h) and copies the file into the
// sweep directory.
#include <sched.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <memory>
#include <set>

#include "kernels/device.h"
#include "kernels/error.h"
#include "kernels/io.h"
#include "runners/commands.h"
#include "runners/scheduler.h"
#include "runners/sweep.h"

namespace pb {
namespace fs = std::filesystem;

namespace {

struct SweepOptions {
  std::string file, out = "runs", shard, gpus;
  size_t jobs = 1, jobs_per_gpu = 0;
  bool dry_run = false, retry_failed = false;
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
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, end - start);
    int g = -1;
    const auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), g);
    if (ec != std::errc() || p != item.data() + item.size() || g < 0 || g >= n)
      fail("--gpus needs 'all' or device indices 0..{} separated by commas, got '{}'", n - 1, text);
    gpus.push_back(g);
    start = end + 1;
  }
  return gpus;
}

// One slot per run that may run at once: --jobs on the CPU, or --jobs-per-gpu per GPU of --gpus
// (each pinned to its GPU through CUDA_VISIBLE_DEVICES).
std::vector<std::string> slots_of(const SweepOptions& o) {
  if (o.gpus.empty() && o.jobs_per_gpu == 0) return std::vector<std::string>(o.jobs, "");
  std::vector<std::string> slots;
  for (int g : parse_gpus(o.gpus.empty() ? "all" : o.gpus))
    for (size_t k = 0; k < std::max<size_t>(1, o.jobs_per_gpu); ++k)
      slots.push_back("CUDA_VISIBLE_DEVICES=" + std::to_string(g));
  return slots;
}

void run_sweep(const SweepOptions& o) {
  const std::vector<std::string> slots = slots_of(o);
  const bool on_gpus = !slots.front().empty();
  const std::string text = read_file(o.file);
  Sweep sweep = parse_sweep(text, o.file, train_option_kinds());
  const std::string sweep_dir = (fs::path(o.out) / sweep.name).string();
  std::vector<Job> jobs;
  std::set<std::string> seen;
  std::vector<SweepRun> runs;
  std::vector<std::string> ids;
  for (size_t i = 0; i < sweep.runs.size(); ++i) {
    std::string id;
    try {
      id = run_id_of(sweep.runs[i].args);
    } catch (const Error& e) {
      fail("{}: run {} ({}): {}", o.file, i, sweep.runs[i].label, e.what());
    }
    if (!seen.insert(id).second) {
      fmt::print(stderr, "sweep {}: {} is the same config as an earlier run; run once\n", sweep.name,
                 sweep.runs[i].label);
      continue;
    }
    runs.push_back(sweep.runs[i]);
    ids.push_back(id);
  }
  const std::string exe = fs::read_symlink("/proc/self/exe").string();
  const size_t threads = std::max<size_t>(1, cpu_count() / slots.size());
  SweepProgress before{sweep.name, 0, 0, 0};
  size_t n_pending = 0;
  for (const size_t i : shard_indices(runs.size(), o.shard.empty() ? "0/1" : o.shard)) {
    const SweepRun& r = runs[i];
    const std::string dir = (fs::path(sweep_dir) / ids[i]).string();
    const std::string state = run_state(dir);
    ++before.total;
    if (o.dry_run) fmt::print("{}\t{}\t{}\n", ids[i], state, r.label);
    if (state == "done") ++before.done;
    if (state == "failed" && !o.retry_failed) ++before.failed;
    if (state == "pending" || (state == "failed" && o.retry_failed)) {
      ++n_pending;
      std::vector<std::string> argv = {exe, "train"};
      argv.insert(argv.end(), r.args.begin(), r.args.end());
      argv.insert(argv.end(), {"--threads", std::to_string(threads), "--out", dir});
      if (on_gpus && std::find(argv.begin(), argv.end(), "--device") == argv.end())
        argv.insert(argv.end(), {"--device", "cuda"});
      jobs.push_back({std::move(argv), dir, ids[i], r.label});
    }
  }
  fmt::print(stderr, "sweep {}: {} runs{}: {} done, {} failed, {} to run, in {}\n", sweep.name,
             before.total, o.shard.empty() ? "" : " in shard " + o.shard, before.done, before.failed,
             n_pending, sweep_dir);
  if (o.dry_run) return;
  fs::create_directories(sweep_dir);
  write_file_atomic((fs::path(sweep_dir) / "sweep.toml").string(), text);
  const JobsOutcome got = run_jobs(jobs, slots, before);
  if (got.signal)
    fail("sweep {} stopped by {}; runs in flight are pending: rerun the same command to finish it",
         sweep.name, strsignal(got.signal));
  fmt::print(stderr, "sweep {}: {} of {} runs done, {} failed\n", sweep.name, before.done + got.done,
             before.total, before.failed + got.failed);
  if (before.failed + got.failed > 0)
    fail("sweep {}: {} runs failed (their result.json holds the error; --retry-failed reruns them)",
         sweep.name, before.failed + got.failed);
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("sweep", "Run the grid of a sweep file, skipping finished runs");
  auto o = std::make_shared<SweepOptions>();
  cmd->add_option("file", o->file, "sweep file (TOML: [sweep], [base], [grid])")->required();
  cmd->add_option("--out", o->out, "root directory; runs go to OUT/<sweep name>/<run id>")
      ->capture_default_str();
  cmd->add_option("--jobs", o->jobs, "runs at once; each gets CPU threads / N")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--gpus", o->gpus, "run on GPUs: 'all' or indices '0,1,...' (runs get --device cuda)");
  cmd->add_option("--jobs-per-gpu", o->jobs_per_gpu, "runs at once on each GPU (implies --gpus all)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--shard", o->shard, "i/n: take runs i, i+n, i+2n, ... of the sweep (Slurm arrays)");
  cmd->add_flag("--dry-run", o->dry_run, "list the runs (id, state, values) on stdout; run nothing");
  cmd->add_flag("--retry-failed", o->retry_failed, "rerun runs whose result.json has status failed");
  cmd->callback([o] { run_sweep(*o); });
}

}  // namespace pb
