// `pathbench convert --run DIR --pe SPEC --out DIR2`: the model of run DIR carried into encoding
// SPEC (runners/convert.h, docs/conversion.md), written as DIR2: config.json (DIR's with `pe`
// replaced), meta.json (the source and which tensors were copied, initialised or dropped) and
// model.safetensors, for `train --init-from DIR2`.
#include <filesystem>

#include "core/io.h"
#include "models/position/position_encoding.h"
#include "runners/build_info.h"
#include "runners/commands.h"
#include "runners/convert.h"

namespace pb {
namespace fs = std::filesystem;

void add_convert_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "convert",
      "Carry a trained model into another position encoding (for train --init-from): the tensors of "
      "the same name and shape copied, the new encoding's own parameters freshly initialised");
  struct Opts {
    std::string run, pe, out;
    bool overwrite = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--run", o->run, "the trained run directory (with model.safetensors)")
      ->type_name("DIR")
      ->required();
  cmd->add_option("--pe", o->pe, "the new position-encoding spec NAME[:key=value,...]")
      ->type_name("SPEC")
      ->required();
  cmd->add_option("--out", o->out, "the directory to write (must not exist)")->type_name("DIR2")->required();
  cmd->add_flag("--overwrite", o->overwrite,
                "write into --out although it exists (never over a trained run)");
  cmd->callback([o] {
    const InitSource src = read_init_source(o->run, "--run");
    TrainConfig cfg = src.config;
    cfg.pe = resolve_encoding(o->pe).canonical();
    const std::string old_pe = resolve_encoding(src.config.pe).canonical();
    if (cfg.pe == old_pe)
      fail("--pe {} is the encoding of '{}' already; to train on from its weights use train --init-from {}",
           cfg.pe, o->run, o->run);
    if (fs::exists(o->out) && !o->overwrite)
      fail("--out '{}' exists; pass --overwrite to replace it", o->out);
    if (fs::exists(o->out + "/result.json"))
      fail("--out '{}' holds a trained run (result.json); convert does not replace one", o->out);
    const Conversion c = convert_weights(cfg, src, "--run");
    fs::create_directories(o->out);
    nlohmann::json config = src.config_json;
    config["pe"] = cfg.pe;
    config.erase("run_id");  // no run trained these weights in this encoding
    config["out"] = o->out;
    nlohmann::json meta = build_stamp();
    meta.update({{"converted_from",
                  {{"dir", o->run},
                   {"run_id", src.config_json.value("run_id", "")},
                   {"pe", old_pe},
                   {"xxh3_64", src.checksum}}},
                 {"copied", c.copied},
                 {"initialised", c.initialised},
                 {"dropped", c.dropped}});
    write_safetensors(o->out + "/" + kModelFile, c.tensors, {{"format", "pathbench"}});
    write_file_atomic(o->out + "/config.json", config.dump(2) + "\n");
    write_file_atomic(o->out + "/meta.json", meta.dump(2) + "\n");
    fmt::print(stderr, "convert: {} -> {} ({}): {} tensors copied, {} initialised, {} dropped\n", o->run,
               o->out, cfg.pe, c.copied.size(), c.initialised.size(), c.dropped.size());
  });
}

}  // namespace pb
