// `pathbench list [tasks|pe]`: the registered tasks and position encodings with their parameters
// and defaults, and each task's splits, straight from the registries (so the list cannot go stale).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "models/position/position_encoding.h"
#include "runners/commands.h"
#include "tasks/task.h"

namespace pb {

// With `splits`, each schema names a task and its splits are listed (train first, then the eval splits).
static void print_schemas(const char* title, const std::vector<Schema>& schemas, bool splits) {
  fmt::print("{}:\n", title);
  for (const auto& s : schemas) {
    fmt::print("  {:<12} {}\n", s.name, s.doc);
    if (splits) fmt::print("      splits: {}\n", fmt::join(make_task(s.name)->splits(), ", "));
    for (const auto& p : s.params) {
      std::string extra = p.choices.empty() ? "" : " (one of";
      for (const auto& c : p.choices) extra += " " + c;
      if (!p.choices.empty()) extra += ")";
      fmt::print("      {:<20} {}{}\n", p.key + "=" + p.default_value, p.doc, extra);
    }
  }
}

void add_list_command(CLI::App& app) {
  auto what = std::make_shared<std::string>("all");
  auto* cmd = app.add_subcommand("list", "List the registered tasks and position encodings");
  cmd->add_option("what", *what, "tasks | pe | all")->capture_default_str();
  cmd->callback([what] {
    if (*what != "all" && *what != "tasks" && *what != "pe") fail("list: expected tasks, pe or all, got '{}'", *what);
    if (*what != "pe") print_schemas("tasks (spec NAME[:key=value,...])", task_schemas(), true);
    if (*what != "tasks")
      print_schemas("position encodings (spec NAME[:key=value,...])", encoding_schemas(), false);
  });
}

}  // namespace pb
