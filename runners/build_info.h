#pragma once
// What a binary was built from: its version, its commit (git_commit.h) and the digest of its
// sources (CMakeLists.txt, cmake/, core/, kernels/, models/, runners/, tasks/), the same value as
// `scripts/carry.sh digest` on that tree. Every run's meta.json and `pathbench --version` carry
// them, so a run's code can be checked against any commit whatever its `commit` label says
// (docs/guarantees.md). The digest is defined in a file generated at every build by
// cmake/git_commit.cmake.
#include <nlohmann/json.hpp>

namespace pb {
extern const char kSourcesDigest[];  // 32 hex digits

// {"pathbench_version", "commit", "sources"}: the fields of every meta.json that name its code.
nlohmann::json build_stamp();
}  // namespace pb
