// The built-in tasks, as (schema, factory) pairs that tasks/registry.cpp lists one per line.
// Each factory validates the ranges of its spec's values (pb::Error naming the key and the valid
// range); the schema has already checked names and types.
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>

#include "tasks/task.h"

namespace pb {

constexpr int64_t kMaxSeqLen = int64_t(1) << 20;  // longest example any task accepts (tokens)

Schema flipflop_schema();
std::unique_ptr<Task> make_flipflop(const Spec& spec);

Schema wordproblem_schema();
std::unique_ptr<Task> make_wordproblem(const Spec& spec);

Schema mqrar_schema();
std::unique_ptr<Task> make_mqrar(const Spec& spec);

// spec.get_int(key), or a pb::Error unless lo ≤ value ≤ hi (and even, if `even`).
int64_t spec_int_in(const Spec& spec, std::string_view key, int64_t lo, int64_t hi, bool even = false);

}  // namespace pb
