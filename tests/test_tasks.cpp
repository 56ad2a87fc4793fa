#include <catch2/catch.hpp>

#include "kernels/spec.h"
#include "kernels/error.h"

TEST_CASE("spec: unknown key lists the valid ones", "[spec]") {
  std::vector<pb::Schema> s = {{"flipflop", "", {{"len", pb::ParamType::Int, "512", "", {}}}}};
  CHECK(pb::resolve_spec("flipflop", s, "task").canonical() == "flipflop:len=512");
  CHECK_THROWS_WITH(pb::resolve_spec("flipflop:foo=1", s, "task"),
                    "unknown key 'foo' for task 'flipflop'; valid keys: len");
}
