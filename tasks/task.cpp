#include "tasks/task.h"

#include "core/error.h"

namespace pb {

int Task::split_index(std::string_view split) const {
  const auto names = splits();
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == split) return static_cast<int>(i);
    list += (i ? ", " : "") + names[i];
  }
  fail("unknown split '{}' for task '{}'; valid splits: {}", split, spec().name(), list);
}

Example Task::make_example(uint64_t seed, int split, uint64_t index) const {
  Example ex;
  ex.input.resize(seq_len());
  ex.target.resize(seq_len());
  ex.scored.resize(seq_len());
  generate(seed, split, index, ex.view());
  return ex;
}

}  // namespace pb
