// A run directory as `pathbench collect` reads it (runners/cmd_collect.cpp): the input is
// result.json, config.json, eval.jsonl and meta.json separated by NUL bytes (missing parts: no
// file); the target writes them into a run directory and runs `collect` through its CLI command.
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz/fuzz.h"
#include "runners/commands.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pb;
  namespace fs = std::filesystem;
  const std::string root = fuzz::scratch_dir() + "runs", run = root + "/run";
  const std::string out = fuzz::scratch_dir() + "out";
  fs::remove_all(root);
  fs::create_directories(run);
  std::string_view rest = fuzz::as_text(data, size);
  for (const char* name : {"result.json", "config.json", "eval.jsonl", "meta.json"}) {
    if (rest.data() == nullptr) break;
    const size_t nul = rest.find('\0');
    write_file_atomic(run + "/" + name, rest.substr(0, nul));
    rest = nul == std::string_view::npos ? std::string_view() : rest.substr(nul + 1);
  }
  CLI::App app;
  add_collect_command(app);
  std::vector<std::string> args = {"pathbench", "collect", root, "-o", out};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  fuzz::expect_error([&] { app.parse(int(argv.size()), argv.data()); });
  return 0;
}
