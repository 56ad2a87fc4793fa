// Shared by the libFuzzer targets of this folder (README.md): a pb::Error is the expected outcome
// of bad input and is swallowed; anything else (another exception, a crash, a sanitizer report, a
// hang) escapes to libFuzzer, which records the input as a finding.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/io.h"

namespace pb::fuzz {

// Runs `read`, treating a pb::Error as the expected rejection of bad input.
template <class F>
void expect_error(F&& read) {
  try {
    read();
  } catch (const Error&) {
  }
}

// A property of a parsed input that must hold; a violation aborts (a finding) with `what`.
inline void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz: property violated: %s\n", what);
  std::abort();
}

// This process's scratch directory, on tmpfs when there is one (the readers take paths), removed
// at exit.
inline const std::string& scratch_dir() {
  static const std::string* dir = [] {  // never destroyed: the exit handler below still reads it
    namespace fs = std::filesystem;
    const fs::path root = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    const fs::path d = root / ("pathbench-fuzz." + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    std::atexit([] { std::filesystem::remove_all(scratch_dir()); });
    return new std::string(d.string() + "/");
  }();
  return *dir;
}

// Writes the fuzz input to scratch_dir() + name and returns its path.
inline std::string input_file(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + name;
  write_file_atomic(path, bytes);
  return path;
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace pb::fuzz
