#pragma once
// What a binary was built from, beside its commit (git_commit.h): the digest of its sources
// (CMakeLists.txt, cmake/, core/, kernels/, models/, runners/, tasks/), the same value as
// `scripts/carry.sh digest` on that tree. Every run's meta.json and `pathbench --version` carry it,
// so a run's code can be checked against any commit whatever its `commit` label says
// (docs/guarantees.md). Defined in a file generated at every build by cmake/git_commit.cmake.
namespace pb {
extern const char kSourcesDigest[];  // 32 hex digits
}  // namespace pb
