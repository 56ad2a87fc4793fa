#include "runners/convert.h"

#include <filesystem>

#include "core/error.h"
#include "runners/decoding.h"
#include "runners/trainer.h"

namespace pb {
namespace fs = std::filesystem;

InitSource read_init_source(const std::string& dir, const std::string& what) {
  if (!fs::is_directory(dir)) fail("{} '{}': not a directory", what, dir);
  if (!fs::exists(dir + "/config.json")) fail("{} '{}': holds no run (no config.json)", what, dir);
  const std::string model = dir + "/" + kModelFile;
  if (!fs::exists(model))
    fail("{} '{}': has no model checkpoint ({}): the run is unfinished, diverged or failed", what, dir,
         kModelFile);
  InitSource src;
  src.dir = dir;
  src.config_json = read_run_json(dir);
  src.config = config_from_json(src.config_json, dir + "/config.json");
  src.checksum = safetensors_checksum(model);
  return src;
}

void check_init_dims(const InitSource& src, const TrainConfig& cfg, const std::string& what) {
  const auto from = make_task(src.config.task), to = make_task(cfg.task);
  const auto differ = [&](const char* key, const auto& there, const auto& here) {
    if (there != here)
      fail("{} '{}': {} is {} there, {} here; the models must have the same shape", what, src.dir, key, there,
           here);
  };
  differ("the task", from->spec().name(), to->spec().name());
  differ("the vocabulary", from->vocab_size(), to->vocab_size());
  differ("layers", src.config.layers, cfg.layers);
  differ("d_model", src.config.d_model, cfg.d_model);
  differ("heads", src.config.heads, cfg.heads);
  differ("mlp_ratio", src.config.mlp_ratio, cfg.mlp_ratio);
  differ("kv_conv", src.config.kv_conv, cfg.kv_conv);
}

Conversion convert_weights(const TrainConfig& cfg, const InitSource& src, const std::string& what) {
  check_init_dims(src, cfg, what);
  const std::string path = src.dir + "/" + kModelFile;
  std::map<std::string, std::string> meta;
  const TensorMap source = read_safetensors(path, &meta);
  if (safetensors_checksum(path) != src.checksum)
    fail("{} '{}': {} changed while it was read", what, src.dir, kModelFile);
  const Transformer<Cpu32> fresh(model_config(cfg, *make_task(cfg.task)), cfg.seed);  // train's initialisation
  const auto init = fresh.params.to_host();
  Conversion c;
  for (const auto& e : fresh.params.entries) {
    Tensor t;
    t.shape = e.spec.shape;
    const auto it = source.find(e.spec.name);
    if (it == source.end()) {
      t.data.assign(init.begin() + e.offset, init.begin() + e.offset + e.size);
      c.initialised.push_back(e.spec.name);
    } else {
      if (it->second.shape != e.spec.shape)
        fail("{} '{}': tensor '{}' has shape {} there, {} in the model of --pe {}", what, src.dir,
             e.spec.name, shape_str(it->second.shape), shape_str(e.spec.shape), cfg.pe);
      t.data = it->second.data;
      c.copied.push_back(e.spec.name);
    }
    c.tensors.emplace(e.spec.name, std::move(t));
  }
  for (const auto& [name, t] : source)
    if (!c.tensors.count(name)) c.dropped.push_back(name);
  return c;
}

Conversion init_weights(const TrainConfig& cfg) {
  const InitSource src = read_init_source(cfg.init_from, "--init-from");
  if (src.checksum != cfg.init_from_xxh3)
    fail("--init-from '{}': its checkpoint has xxh3_64 {}, not the {} of this run (it changed since the run "
         "was configured)",
         cfg.init_from, src.checksum, cfg.init_from_xxh3);
  return convert_weights(cfg, src, "--init-from");
}

}  // namespace pb
