// Evaluation and generation by token-by-token decoding (models/decoder.h): `pathbench eval
// --decode` and `pathbench generate`, on any engine.
#pragma once
#include <string>
#include <vector>

#include "runners/trainer.h"

namespace pb {

// The config.json of run directory `run`, as JSON and as a config; a pb::Error naming the file if
// it is missing or not valid.
nlohmann::json read_run_json(const std::string& run);
TrainConfig read_run_config(const std::string& run);

// evaluate() by decoding: the same examples and measurements, each position's logits from the
// KV cache instead of the parallel forward. Instantiated for Cpu32 (and CudaEngine when built).
template <class E>
EvalResult evaluate_decoding(const Transformer<E>& model, const Task& task, int split, int n_examples,
                             int batch);

// Token ids of one line of space-separated vocabulary names; a pb::Error naming `where` (FILE:LINE)
// and the valid names for an unknown one or an empty line.
std::vector<int32_t> parse_prompt(const std::string& line, const std::vector<std::string>& vocab,
                                  const std::string& where);

// The greedy continuation of `prompt` (non-empty): `max_new` tokens, each the argmax of the logits
// after the previous one (the lowest id on ties). Instantiated for Cpu32 (and CudaEngine when built).
template <class E>
std::vector<int32_t> greedy_continuation(const Transformer<E>& model, const std::vector<int32_t>& prompt,
                                         int max_new);

}  // namespace pb
