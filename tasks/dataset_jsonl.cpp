// The jsonl dataset writer: one example per line, formatted in parallel and written in index
// order, plus FILE.meta.json (canonical spec, split, seed, n, vocabulary, task meta()).
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/io.h"
#include "tasks/dataset_file.h"

namespace pb {

namespace {

constexpr uint64_t kJsonlChunk = 4096;  // examples formatted per write

template <class T>
void append_array(std::string& s, const char* key, const std::vector<T>& v) {
  s += '"';
  s += key;
  s += "\":[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    fmt::format_to(std::back_inserter(s), "{}", static_cast<int32_t>(v[i]));
  }
  s += ']';
}

}  // namespace

void write_dataset_jsonl(const std::string& path, const Task& task, uint64_t seed, int split,
                         uint64_t n, int n_threads) {
  nlohmann::json meta = {{"format", "pathbench-jsonl"},
                         {"version", kDatasetVersion},
                         {"task", task.spec().canonical()},
                         {"split", task.splits().at(split)},
                         {"seed", seed},
                         {"n", n},
                         {"seq_len", task.seq_len()},
                         {"vocab_size", task.vocab_size()},
                         {"vocab", task.vocab()},
                         {"task_meta", task.meta()}};
  AtomicOutput out(path);
  AtomicOutput meta_out(path + ".meta.json");
  if (n_threads <= 0) n_threads = omp_get_max_threads();
  std::vector<std::string> lines(std::min(kJsonlChunk, n));  // (chunk,) one line per example
  for (uint64_t first = 0; first < n; first += kJsonlChunk) {
    const int64_t count = static_cast<int64_t>(std::min(kJsonlChunk, n - first));
#pragma omp parallel num_threads(n_threads)
    {
      Example ex;  // per-thread scratch, (T,) each
      ex.input.resize(task.seq_len()), ex.target.resize(task.seq_len()), ex.scored.resize(task.seq_len());
#pragma omp for schedule(static)
      for (int64_t i = 0; i < count; ++i) {
        task.generate(seed, split, first + i, ex.view());
        std::string& s = lines[i];
        s.clear();
        s += '{';
        append_array(s, "input", ex.input);
        s += ',';
        append_array(s, "target", ex.target);
        s += ',';
        append_array(s, "scored", ex.scored);
        s += "}\n";
      }
    }
    for (int64_t i = 0; i < count; ++i) out.write(lines[i].data(), lines[i].size());
  }
  const std::string text = meta.dump(2) + "\n";
  meta_out.write(text.data(), text.size());
  meta_out.commit();
  out.commit();
}

}  // namespace pb
