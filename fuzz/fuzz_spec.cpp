// Spec strings (core/spec.cpp) as `--task` and `--pe` take them: the task registry (make_task,
// then one example of every split, as `gen` writes them) and the encoding registry
// (resolve_encoding, make_encoding, as `train` builds a model). A resolved spec's canonical form
// must resolve to itself.
#include "fuzz/fuzz.h"
#include "models/position/position_encoding.h"
#include "tasks/task.h"

namespace {

constexpr int kMaxGenLen = 4096;  // longer tasks are resolved but not generated (time per input)

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pb;
  const std::string_view text = fuzz::as_text(data, size);
  fuzz::expect_error([&] {
    const auto task = make_task(text);
    const std::string canonical = task->spec().canonical();
    fuzz::require(make_task(canonical)->spec().canonical() == canonical,
                  "task canonical form is a fixed point");
    if (task->seq_len() > kMaxGenLen) return;
    for (int split = 0; split < int(task->splits().size()); ++split) {
      const Example ex = task->make_example(kEvalSeed, split, 0);
      for (int t = 0; t < task->seq_len(); ++t) {
        fuzz::require(ex.input[t] >= 0 && ex.input[t] < task->vocab_size(), "input token in the vocabulary");
        fuzz::require(ex.target[t] >= -1 && ex.target[t] < task->vocab_size(),
                      "target token in the vocabulary");
      }
    }
  });
  fuzz::expect_error([&] {
    const std::string canonical = resolve_encoding(text).canonical();
    fuzz::require(resolve_encoding(canonical).canonical() == canonical,
                  "encoding canonical form is a fixed point");
    make_encoding<Cpu32>(text);
  });
  return 0;
}
