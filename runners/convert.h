// A trained model carried into a model of another (or the same) position encoding: the weights of
// every tensor both models have under the same name and shape, the new encoding's own parameters
// freshly initialised. `pathbench convert` writes the result as a directory; `train --init-from`
// starts training from it, converting on the fly when the source's encoding is not --pe
// (docs/conversion.md).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "runners/train_config.h"

namespace pb {

constexpr const char* kModelFile = "model.safetensors";  // in a run directory

// A directory holding a model checkpoint: a finished run, or the output of `pathbench convert`.
struct InitSource {
  std::string dir;
  nlohmann::json config_json;  // its config.json as stored
  TrainConfig config;          // the same, read by config_from_json
  std::string checksum;        // XXH3-64 of model.safetensors's data (its "xxh3_64")
};

// Reads config.json and the checksum of model.safetensors in `dir`; `what` names the option in
// errors. pb::Error, one line: a missing directory, no config.json, no model checkpoint.
InitSource read_init_source(const std::string& dir, const std::string& what);

// pb::Error naming the first of task (its name), vocabulary, layers, d_model, heads, mlp_ratio
// that differs between the source's model and the model of `cfg`.
void check_init_dims(const InitSource& src, const TrainConfig& cfg, const std::string& what);

struct Conversion {
  TensorMap tensors;                             // (F32) the parameters of the model of cfg
  std::vector<std::string> copied, initialised;  // names of the model's tensors, by origin
  std::vector<std::string> dropped;              // the source's tensors the model has not
};

// The parameters of the model of the resolved `cfg` from the checkpoint of `src`: each tensor the
// model has under the same name and shape is copied (bit-exact); the others are the fresh
// initialisation of `cfg` (seeded by cfg.seed: what `train` starts from without --init-from).
// pb::Error: the dims differ (check_init_dims), a tensor of both has different shapes, a corrupted
// checkpoint (its checksum), or one that changed since `src` was read.
Conversion convert_weights(const TrainConfig& cfg, const InitSource& src, const std::string& what);

// `train --init-from`: the conversion of cfg.init_from, checked against the checksum the run id
// holds (cfg.init_from_xxh3).
Conversion init_weights(const TrainConfig& cfg);

}  // namespace pb
