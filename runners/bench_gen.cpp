// `pathbench bench gen`: generation throughput of the binary format, into a memory buffer
// (generate + pack + XXH3, the work of `gen` without the disk) and through the real writer to a
// file in /tmp. Prints one machine-readable line per target to stdout, ending in tokens_per_s=<x>.
#include <fmt/format.h>
#include <unistd.h>
#include "core/xxhash.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/spec.h"
#include "runners/commands.h"
#include "tasks/dataset_file.h"

namespace pb {

namespace {

struct BenchGenOptions {
  std::string task = "flipflop", split = "train";
  int64_t n = 200000;
  int threads = 1;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void report(const BenchGenOptions& o, const Task& task, const char* target, double s) {
  const double tokens = double(o.n) * task.seq_len();
  fmt::print("bench gen task={} split={} n={} threads={} target={} seconds={:.4f} tokens_per_s={:.4g}\n",
             task.spec().canonical(), o.split, o.n, o.threads, target, s, tokens / s);
}

void run_bench_gen(const BenchGenOptions& o) {
  const auto task = make_task(o.task);
  const int split = task->split_index(o.split);
  if (o.n < 1) fail("--n needs a positive integer, got {}", o.n);
  if (o.threads < 0) fail("--threads needs an integer >= 0 (0: all cores), got {}", o.threads);
  const size_t rec = dataset_record_bytes(task->seq_len(), dataset_token_bytes(task->vocab_size()));
  const uint64_t chunk = std::max<uint64_t>(1, (size_t(32) << 20) / rec);
  std::vector<uint8_t> buf(std::min<uint64_t>(chunk, o.n) * rec);  // (chunk, rec)
  uint64_t hash = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (uint64_t first = 0; first < uint64_t(o.n); first += chunk) {
    const uint64_t count = std::min<uint64_t>(chunk, o.n - first);
    pack_examples(*task, 0, split, first, count, o.threads, buf.data());
    hash ^= XXH3_64bits(buf.data(), count * rec);
  }
  report(o, *task, "memory", seconds_since(t0));
  fmt::print(stderr, "pathbench: payload hash {:016x}\n", hash);

  const std::string path = fmt::format("/tmp/pathbench-bench-gen.{}.bin", ::getpid());
  t0 = std::chrono::steady_clock::now();
  write_dataset_bin(path, *task, 0, split, o.n, o.threads);
  report(o, *task, "file", seconds_since(t0));
  std::remove(path.c_str());
}

}  // namespace

void add_bench_gen_command(CLI::App& bench) {
  auto o = std::make_shared<BenchGenOptions>();
  auto* cmd = bench.add_subcommand("gen", "Task generation throughput (binary format), tokens/s");
  cmd->add_option("--task", o->task, "task spec NAME[:key=value,...]")->capture_default_str();
  cmd->add_option("--split", o->split, "split name")->capture_default_str();
  cmd->add_option("--n", o->n, "examples to generate")->capture_default_str();
  cmd->add_option("--threads", o->threads, "OpenMP threads (0: all cores)")->capture_default_str();
  cmd->callback([o] { run_bench_gen(*o); });
}

}  // namespace pb
