// pathbench: the command-line entry point. Human output goes to stderr, machine output to stdout
// or files; bad input prints "pathbench: error: <what>" and exits with status 2.
#include <fmt/format.h>

#include <cstdio>
#include <new>
#include <string>

#include "git_commit.h"
#include "core/error.h"
#include "runners/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"pathbench: position encodings on synthetic reasoning tasks", "pathbench"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "pathbench " PATHBENCH_VERSION " (" PATHBENCH_GIT_COMMIT ")");
  pb::add_list_command(app);
  pb::add_gen_command(app);
  pb::add_train_command(app);
  pb::add_eval_command(app);
  pb::add_attention_command(app);
  pb::add_bench_command(app);
  pb::add_sweep_command(app);
  pb::add_collect_command(app);
  pb::add_table_command(app);
  pb::add_plot_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (app.get_subcommands().empty() && argc > 1 && argv[1][0] != '-') {  // the first word is no command
      std::string names;
      for (const CLI::App* c : app.get_subcommands([](const CLI::App*) { return true; }))
        names += (names.empty() ? "" : ", ") + c->get_name();
      fmt::print(stderr, "pathbench: error: unknown command '{}'; valid: {}\n", argv[1], names);
    } else {
      fmt::print(stderr, "pathbench: error: {}\n", e.what());
    }
    return 2;
  } catch (const pb::Error& e) {
    fmt::print(stderr, "pathbench: error: {}\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "pathbench: error: out of host memory: reduce --batch, --eval-batch, --d-model, --layers or "
               "the task's len\n");
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "pathbench: internal error: {}\n", e.what());
    return 3;
  }
  return 0;
}
