// Binary dataset files (tasks/dataset_file.cpp) as `train --data` reads them: DatasetReader, the
// spec check of run_training, then up to 64 examples decoded into the task's (T,) buffers the way
// fill_batch does; decoded tokens must lie in the task's vocabulary. The fuzzer cannot forge the
// header and payload checksums, so the target first rewrites them over the input (seal_dataset):
// the checks behind them are what it explores.
#include <string>

#include "fuzz/dataset_seal.h"
#include "fuzz/fuzz.h"
#include "tasks/dataset_file.h"
#include "tasks/task.h"

namespace {

constexpr uint64_t kMaxRead = 64;  // examples decoded per input

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pb;
  std::string bytes(fuzz::as_text(data, size));
  fuzz::seal_dataset(bytes);
  fuzz::expect_error([&] {
    const DatasetReader file(fuzz::input_file("in.bin", bytes));
    const auto task = make_task(file.spec());
    if (file.spec() != task->spec().canonical()) fail("spec mismatch (as run_training)");
    const int T = task->seq_len();
    Example ex;  // (T,) each, as fill_batch gives each example
    ex.input.resize(T), ex.target.resize(T), ex.scored.resize(T);
    for (uint64_t i = 0; i < kMaxRead; ++i) {
      file.read(i % file.n(), ex.view());
      for (int t = 0; t < T; ++t) {
        fuzz::require(ex.input[t] >= 0 && ex.input[t] < task->vocab_size(), "input token in the vocabulary");
        fuzz::require(ex.target[t] >= -1 && ex.target[t] < task->vocab_size(),
                      "target token in the vocabulary");
        fuzz::require(ex.scored[t] <= 1, "scored is 0 or 1");
      }
    }
  });
  return 0;
}
