// A task generates example `index` of split `split` from `seed` with the counter-based RNG
// (core/rng.h), so any thread or shard can produce any example, identically.
// An example is three aligned arrays of length seq_len():
//   input[t]  token id read at position t
//   target[t] token the model must output after reading input[0..t], or -1 where there is none
//   scored[t] 1 where target[t] counts for the task's accuracy (training may use every target)
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/spec.h"

namespace pb {

struct ExampleView {  // non-owning; each array holds seq_len() entries
  int32_t* input;
  int32_t* target;
  uint8_t* scored;
};

struct Example {  // owning, for tests and small tools
  std::vector<int32_t> input, target;
  std::vector<uint8_t> scored;
  ExampleView view() { return {input.data(), target.data(), scored.data()}; }
};

class Task {
 public:
  virtual ~Task() = default;
  virtual const Spec& spec() const = 0;             // resolved spec (canonical() for files/CSVs)
  virtual int seq_len() const = 0;                  // every example has this length
  virtual int vocab_size() const = 0;               // token ids are in [0, vocab_size)
  virtual std::vector<std::string> vocab() const = 0;  // token id -> printable name
  virtual std::vector<std::string> splits() const = 0; // "train" first, then the eval splits
  // Writes example `index` of `split` (an index into splits()) into `out`.
  virtual void generate(uint64_t seed, int split, uint64_t index, ExampleView out) const = 0;
  // Targets (target ≥ 0) occur only at positions t with t % target_every() == 0: the model then
  // runs its LM head at those positions alone (ModelConfig::target_every), an exact saving.
  virtual int target_every() const { return 1; }
  // Extra facts for FILE.meta.json (e.g. each group element's permutation); may be empty.
  virtual nlohmann::json meta() const { return nlohmann::json::object(); }
  // Where the task defines one, the recall distance of each scored target, from the example's
  // `input` into `distance` (seq_len() each): t − p, p the one earlier position whose token the
  // target at t repeats (mqrar: the recalled value; flipflop: the bit of the last write); 0 at
  // the other positions. Returns false, writing nothing, for a task without one (a
  // word problem's target depends on every earlier token). Evaluations report accuracy by
  // distance (EvalResult::by_distance).
  virtual bool distances(const int32_t* /*input*/, int32_t* /*distance*/) const { return false; }

  int split_index(std::string_view split) const;  // pb::Error listing the valid splits if unknown
  Example make_example(uint64_t seed, int split, uint64_t index) const;
};

// The registry (tasks/registry.cpp): one line per task.
const std::vector<Schema>& task_schemas();
std::unique_ptr<Task> make_task(std::string_view spec);

// Fixed seed of every evaluation split: all runs are scored on the same examples, whatever their
// training seed (the split is part of the RNG stream, so train and eval streams never coincide).
constexpr uint64_t kEvalSeed = 0x5eed5eedULL;

}  // namespace pb
