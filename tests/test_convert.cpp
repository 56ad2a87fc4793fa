// Conversion between encodings (runners/convert.h, docs/conversion.md) through the built binary:
// `convert` copies the shared tensors bit-exactly and initialises the new encoding's as a fresh
// `train` does; `train --init-from` starts from those weights (converting on the fly the same
// way), its run id holds the source's checksum, and a sweep's init_from takes `{seed}`; refusals.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "core/io.h"
#include "core/safetensors.h"

namespace fs = std::filesystem;
using pb::test::check_error;
using pb::test::run_pathbench;
using pb::test::RunResult;
using pb::test::TempDir;

namespace {

const std::string kModel =
    "--task flipflop:len=8 --d-model 16 --heads 2 --batch 4 --eval-n 64 --device cpu --threads 1";

nlohmann::json read_json(const std::string& p) { return nlohmann::json::parse(pb::read_file(p)); }

// `train` of kModel with `args` into `dir`, checked to succeed.
void train(const std::string& args, const std::string& dir) {
  const RunResult r = run_pathbench(fmt::format("train {} {} --out '{}'", kModel, args, dir));
  INFO(r.err);
  REQUIRE(r.code == 0);
}

void convert(const std::string& run, const std::string& pe, const std::string& out) {
  const RunResult r = run_pathbench(fmt::format("convert --run '{}' --pe {} --out '{}'", run, pe, out));
  INFO(r.err);
  REQUIRE(r.code == 0);
}

std::vector<std::string> sorted(const nlohmann::json& names) {
  auto v = names.get<std::vector<std::string>>();
  std::sort(v.begin(), v.end());
  return v;
}

pb::TensorMap weights(const std::string& dir) { return pb::read_safetensors(dir + "/model.safetensors"); }

// The final evaluation rows of eval.jsonl by split.
std::map<std::string, nlohmann::json> final_evals(const std::string& dir) {
  std::map<std::string, nlohmann::json> out;
  const std::string text = pb::read_file(dir + "/eval.jsonl");
  for (size_t at = 0, end; at < text.size(); at = end + 1) {
    end = text.find('\n', at);
    const auto row = nlohmann::json::parse(text.substr(at, end - at));
    out[row["split"]] = row;
  }
  return out;
}

}  // namespace

TEST_CASE("convert rope -> path copies the shared tensors bit-exactly, the new ones are a fresh train's",
          "[convert]") {
  TempDir d("convert");
  const std::string src = d.file("rope"), conv = d.file("conv"), fresh = d.file("fresh");
  train("--pe rope --steps 20 --seed 3", src);
  convert(src, "path", conv);
  train("--pe path --steps 0 --seed 3", fresh);  // the fresh initialisation of the converted config
  const auto s = weights(src), c = weights(conv), f = weights(fresh);
  REQUIRE(c.size() == f.size());
  std::vector<std::string> copied, initialised;
  for (const auto& [name, t] : c) {
    INFO(name);
    REQUIRE(f.count(name));
    REQUIRE(t.shape == f.at(name).shape);
    if (s.count(name)) {
      CHECK(t.data == s.at(name).data);
      copied.push_back(name);
    } else {
      CHECK(t.data == f.at(name).data);
      initialised.push_back(name);
    }
  }
  CHECK(copied.size() == s.size());                             // rope has no tensors of its own
  CHECK(s.at("layers.0.wq").data != f.at("layers.0.wq").data);  // training moved what was copied
  const auto meta = read_json(conv + "/meta.json"), config = read_json(conv + "/config.json"),
             source = read_json(src + "/config.json");
  CHECK(sorted(meta["copied"]) == copied);  // `copied`, `initialised`: in name order
  CHECK(sorted(meta["initialised"]) == initialised);
  CHECK(meta["initialised"] == nlohmann::json({"layers.0.pe.w_down", "layers.0.pe.w_up", "layers.0.pe.w_conv",
                                               "layers.0.pe.w_beta", "layers.0.pe.b_beta"}));
  CHECK(meta["dropped"].empty());
  CHECK(meta["converted_from"]["run_id"] == source["run_id"]);
  CHECK(meta["converted_from"]["xxh3_64"] == pb::safetensors_checksum(src + "/model.safetensors"));
  CHECK(config["pe"] == read_json(fresh + "/config.json")["pe"]);
  for (const char* k : {"task", "layers", "d_model", "heads", "steps", "lr", "seed"})
    CHECK(config[k] == source[k]);

  // Back to rope: the PaTH tensors are dropped, the rest copied.
  convert(conv, "rope", d.file("back"));
  const auto back = read_json(d.file("back") + "/meta.json");
  CHECK(sorted(back["dropped"]) == initialised);
  const auto b = weights(d.file("back"));
  REQUIRE(b.size() == s.size());
  for (const auto& [name, t] : b) CHECK(t.data == s.at(name).data);
}

TEST_CASE("convert refusals: the same encoding, a shape mismatch, no checkpoint, an existing --out",
          "[convert]") {
  TempDir d("convert-refused");
  const std::string src = d.file("rope"), conv = d.file("conv");
  train("--pe rope --steps 5", src);
  convert(src, "path:w_rank=4", conv);
  pb::test::check_refused(fmt::format("convert --run '{}' --pe rope --out '{{dir}}/x'", src),
                          "is the encoding of");
  pb::test::check_refused(fmt::format("convert --run '{}' --pe path:w_rank=4 --out '{{dir}}/x'", conv),
                          "is the encoding of");
  pb::test::check_refused(fmt::format("convert --run '{}' --pe path:w_rank=8 --out '{{dir}}/x'", conv),
                          "tensor 'layers.0.pe.w_down' has shape (16, 4) there, (16, 8)");
  pb::test::check_refused("convert --run '{dir}' --pe path --out '{dir}/x'", "holds no run (no config.json)");
  fs::create_directories(d.file("unfinished"));
  fs::copy_file(src + "/config.json", d.file("unfinished/config.json"));
  pb::test::check_refused(fmt::format("convert --run '{}' --pe path --out '{{dir}}/x'", d.file("unfinished")),
                          "has no model checkpoint");
  pb::test::check_refused(fmt::format("convert --run '{}' --pe nosuch --out '{{dir}}/x'", src), "nosuch");
  const std::string before = pb::read_file(conv + "/model.safetensors");
  check_error(run_pathbench(fmt::format("convert --run '{}' --pe path:w_rank=4 --out '{}'", src, conv)),
              "exists");
  CHECK(pb::read_file(conv + "/model.safetensors") == before);
  CHECK(run_pathbench(fmt::format("convert --run '{}' --pe path:w_rank=4 --out '{}' --overwrite", src, conv))
            .code == 0);
  check_error(run_pathbench(fmt::format("convert --run '{}' --pe path --out '{}' --overwrite", conv, src)),
              "holds a trained run");
}

TEST_CASE("train --init-from starts from the source's weights, the run id holds its checksum", "[convert]") {
  TempDir d("init-from");
  const std::string src = d.file("rope"), src1 = d.file("rope1");
  train("--pe rope --steps 20 --seed 3", src);
  train("--pe rope --steps 20 --seed 4", src1);

  // Same encoding, no step: the evaluation of the source's final weights, exactly.
  train(fmt::format("--pe rope --steps 0 --init-from '{}'", src), d.file("same"));
  const auto a = final_evals(src), b = final_evals(d.file("same"));
  REQUIRE(a.size() == 3);
  for (const auto& [split, row] : a) {
    INFO(split);
    CHECK(b.at(split)["loss"] == row["loss"]);
    CHECK(b.at(split)["acc"] == row["acc"]);
  }
  train("--pe rope --steps 0", d.file("scratch"));
  CHECK(final_evals(d.file("scratch")).at("val")["loss"] != a.at("val")["loss"]);

  // Another encoding: converted on the fly as `convert` does (with the run's seed).
  convert(src, "path", d.file("conv"));
  train(fmt::format("--pe path --steps 0 --seed 3 --init-from '{}'", src), d.file("fly"));
  const auto c = weights(d.file("conv")), f = weights(d.file("fly"));
  for (const auto& [name, t] : c) CHECK(f.at(name).data == t.data);
  // From the conversion: the same weights.
  train(fmt::format("--pe path --steps 0 --init-from '{}'", d.file("conv")), d.file("from-conv"));
  for (const auto& [name, t] : weights(d.file("from-conv"))) CHECK(c.at(name).data == t.data);

  // Run ids: with and without init_from, and from two sources, all differ.
  const auto id = [&](const std::string& dir) {
    return read_json(dir + "/config.json")["run_id"].get<std::string>();
  };
  train(fmt::format("--pe rope --steps 0 --init-from '{}'", src1), d.file("same1"));
  CHECK(id(d.file("same")) != id(d.file("scratch")));
  CHECK(id(d.file("same")) != id(d.file("same1")));
  CHECK(read_json(d.file("same") + "/config.json")["init_from_xxh3"] ==
        pb::safetensors_checksum(src + "/model.safetensors"));
}

TEST_CASE("train --init-from refusals: other model dims, no checkpoint, a tensor of another shape",
          "[convert]") {
  TempDir d("init-from-refused");
  const std::string src = d.file("rope");
  train("--pe rope --steps 5", src);
  const std::string run =
      "train --task flipflop:len=8 --batch 4 --eval-n 64 --device cpu --threads 1 --steps 5 ";
  pb::test::check_refused(run + fmt::format("--d-model 32 --init-from '{}' --out '{{dir}}/x'", src),
                          "d_model is 16 there, 32 here");
  pb::test::check_refused(run + fmt::format("--d-model 16 --heads 4 --init-from '{}' --out '{{dir}}/x'", src),
                          "heads is 2 there, 4 here");
  pb::test::check_refused(
      run + fmt::format("--d-model 16 --layers 2 --init-from '{}' --out '{{dir}}/x'", src),
      "layers is 1 there, 2 here");
  pb::test::check_refused(
      fmt::format("train --task mqrar --d-model 16 --device cpu --init-from '{}' --out '{{dir}}/x'", src),
      "the task is flipflop there, mqrar here");
  pb::test::check_refused(run + "--d-model 16 --init-from '{dir}/none' --out '{dir}/x'", "not a directory");
  convert(src, "path:w_rank=4", d.file("conv"));
  pb::test::check_refused(
      run + fmt::format("--d-model 16 --pe path:w_rank=8 --init-from '{}' --out '{{dir}}/x'", d.file("conv")),
      "has shape (16, 4) there, (16, 8)");
}

TEST_CASE("a sweep's init_from takes {seed}, collect carries init_from", "[convert]") {
  TempDir d("init-from-sweep");
  for (const int seed : {0, 1})
    train(fmt::format("--pe rope --steps 5 --seed {}", seed), d.file(fmt::format("src{}", seed)));
  pb::write_file_atomic(d.file("s.toml"), fmt::format(R"(
[sweep]
name = "conv"
task = "flipflop:len=8"
seeds = [0, 1]
[base]
d_model = 16
heads = 2
steps = 5
batch = 4
eval_n = 64
pe = "path"
init_from = "{}/src{{seed}}"
)",
                                                      d.path.string()));
  const RunResult r =
      run_pathbench(fmt::format("sweep '{}' --out '{}' --jobs 1", d.file("s.toml"), d.file("runs")));
  INFO(r.err);
  REQUIRE(r.code == 0);
  REQUIRE(run_pathbench(fmt::format("collect '{}' -o '{}'", d.file("runs"), d.file("csv"))).code == 0);
  const std::string runs = pb::read_file(d.file("csv/runs.csv"));
  for (const int seed : {0, 1}) {
    CHECK(runs.find(d.file(fmt::format("src{}", seed))) != std::string::npos);
  }
  CHECK(pb::read_file(d.file("csv/evals.csv")).find(d.file("src1")) != std::string::npos);
}
