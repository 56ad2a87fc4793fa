// main() of the GPU test executables: without a usable GPU they print why and exit 77, which
// CTest reports as skipped; otherwise Catch2 runs them.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "core/device.h"

int main(int argc, char** argv) {
  if (pb::cuda_device_count() == 0) {
    std::fprintf(stderr, "no CUDA device: GPU tests skipped\n");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
