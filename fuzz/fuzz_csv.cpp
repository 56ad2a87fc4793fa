// CSV (runners/csv.cpp) as `table` and `plot` read it: parse_csv. What it accepts must survive a
// round trip through write_csv unchanged.
#include "fuzz/fuzz.h"
#include "runners/csv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pb;
  fuzz::expect_error([&] {
    const Csv csv = parse_csv(fuzz::as_text(data, size), "fuzz.csv");
    const Csv again = parse_csv(write_csv(csv), "fuzz.csv");
    fuzz::require(again.header == csv.header && again.rows == csv.rows,
                  "write_csv(parse_csv(x)) parses back to the same table");
  });
  return 0;
}
