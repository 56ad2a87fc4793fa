// Sweep files (runners/sweep.cpp) as `pathbench sweep` reads them: parse_sweep expands the grid,
// then each run's train options are parsed and resolved (config_of, which gives the run id).
#include "fuzz/fuzz.h"
#include "runners/sweep.h"

namespace {

constexpr size_t kMaxResolved = 8;  // runs resolved per input (each resolves its specs)

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pb;
  static const OptionKinds kinds = train_option_kinds();
  fuzz::expect_error([&] {
    const Sweep sweep = parse_sweep(fuzz::as_text(data, size), "fuzz.toml", kinds);
    for (size_t r = 0; r < sweep.runs.size() && r < kMaxResolved; ++r) run_id_of(sweep.runs[r].args);
  });
  return 0;
}
