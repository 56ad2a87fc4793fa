// The task registry: one line per task, explicit (no static self-registration). It feeds the CLI's
// choices, `pathbench list`, the tests that walk every task, and spec resolution (unknown names
// and keys are pb::Errors listing the valid ones).
#include <fmt/format.h>

#include "core/error.h"
#include "tasks/builtin.h"

namespace pb {

namespace {

struct TaskEntry {
  Schema (*schema)();
  std::unique_ptr<Task> (*make)(const Spec&);
};

const std::vector<TaskEntry>& task_entries() {
  static const std::vector<TaskEntry> k = {
      {flipflop_schema, make_flipflop},        // Liu et al. 2023 flip-flop language
      {wordproblem_schema, make_wordproblem},  // Merrill et al. 2024 group word problems
      {mqrar_schema, make_mqrar},              // MQRAR-N: N-back recall of variable values
  };
  return k;
}

}  // namespace

const std::vector<Schema>& task_schemas() {
  static const std::vector<Schema> k = [] {
    std::vector<Schema> s;
    for (const auto& e : task_entries()) s.push_back(e.schema());
    return s;
  }();
  return k;
}

std::unique_ptr<Task> make_task(std::string_view text) {
  const Spec spec = resolve_spec(text, task_schemas(), "task");
  for (const auto& e : task_entries())
    if (e.schema().name == spec.name()) return e.make(spec);
  fail("internal: task '{}' has a schema but no factory", spec.name());
}

int64_t spec_int_in(const Spec& spec, std::string_view key, int64_t lo, int64_t hi, bool even) {
  const int64_t v = spec.get_int(key);
  if (v < lo || v > hi || (even && v % 2 != 0))
    fail("task '{}': key '{}' must be {} in [{}, {}], got {}", spec.name(), key,
         even ? "an even integer" : "an integer", lo, hi, v);
  return v;
}

}  // namespace pb
