// pb::Error: the one exception type for bad input (specs, flags, files, shapes).
// Its message is a single line naming what is wrong and what would be right; the CLI prints it
// as "pathbench: error: <message>" and exits with status 2.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace pb {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace pb
