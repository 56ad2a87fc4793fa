// Inputs found by the fuzz targets of fuzz/ (fuzz/README.md), each fed to the reader the target
// calls: every one is bad input and must be a one-line pb::Error, not a crash or another exception.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>

#include "cli.h"
#include "fuzz/dataset_seal.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "runners/commands.h"
#include "runners/sweep.h"
#include "runners/train_config.h"
#include "tasks/dataset_file.h"
#include "tasks/task.h"

namespace {

using pb::test::TempDir;

// A safetensors file: the 8-byte little-endian length of `header`, `header`, then `data`.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t len = header.size();
  std::memcpy(out.data(), &len, 8);
  return out + header + data;
}

// The message of the pb::Error that reading `bytes` as a safetensors file throws ("" if none).
std::string safetensors_error(const std::string& bytes) {
  const TempDir dir("fuzz-safetensors");
  const std::string path = dir.file("in.safetensors");
  pb::write_file_atomic(path, bytes);
  try {
    pb::read_safetensors(path);
  } catch (const pb::Error& e) {
    return e.what();
  }
  return "";
}

// A binary dataset file of `n` examples of flipflop:len=8, split train.
std::string flipflop_file(const TempDir& dir, uint64_t n) {
  const std::string path = dir.file("gen.bin");
  pb::write_dataset_bin(path, *pb::make_task("flipflop:len=8"), 0, 0, n, 1);
  return pb::read_file(path);
}

template <class T>
void put(std::string& f, size_t at, T v) {  // a little-endian header field
  std::memcpy(f.data() + at, &v, sizeof(v));
}

// The message of the pb::Error that opening `bytes`, with its checksums rewritten, as a dataset
// file throws ("" if none).
std::string dataset_error(const TempDir& dir, std::string bytes) {
  pb::fuzz::seal_dataset(bytes);
  const std::string path = dir.file("in.bin");
  pb::write_file_atomic(path, bytes);
  try {
    pb::DatasetReader r(path);
  } catch (const pb::Error& e) {
    return e.what();
  }
  return "";
}

// The message of the pb::Error that `pathbench collect` throws on a run directory holding
// result.json = "{}" and `eval_jsonl` ("" if none).
std::string collect_error(const std::string& eval_jsonl) {
  const TempDir dir("fuzz-collect");
  std::filesystem::create_directories(dir.path / "runs/run");
  pb::TrainConfig config;
  config.task = "flipflop:len=8";
  pb::write_file_atomic(dir.file("runs/run/config.json"), pb::to_json(config).dump());
  pb::write_file_atomic(dir.file("runs/run/result.json"), R"({"status": "ok"})");
  pb::write_file_atomic(dir.file("runs/run/eval.jsonl"), eval_jsonl);
  CLI::App app;
  pb::add_collect_command(app);
  try {
    app.parse(std::vector<std::string>{dir.file("out"), "-o", dir.file("runs"), "collect"});  // reversed
  } catch (const pb::Error& e) {
    return e.what();
  }
  return "";
}

constexpr size_t kN = 16, kSeqLen = 24;  // header field offsets (tasks/README.md)

}  // namespace

TEST_CASE("fuzz safetensors: a shape whose element count overflows is an error, not a huge allocation",
          "[fuzz][file]") {
  // 2^62 + 1 elements of 4 bytes: the byte count wraps to 4, which the offsets matched.
  const std::string msg = safetensors_error(safetensors_bytes(
      R"({"x":{"dtype":"F32","shape":[4611686018427387905],"data_offsets":[0,4]}})", std::string(4, '\0')));
  CHECK_THAT(msg, Catch::Contains("tensor 'x' data offsets do not match its shape"));
}

TEST_CASE("fuzz safetensors: a shape whose element count wraps to zero is an error", "[fuzz][file]") {
  // 2^32 · 2^32 = 2^64 elements: the product wrapped to 0 (signed overflow), matching empty data.
  const std::string msg = safetensors_error(
      safetensors_bytes(R"({"x":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""));
  CHECK_THAT(msg, Catch::Contains("tensor 'x' data offsets do not match its shape (4294967296, 4294967296)"));
}

TEST_CASE("fuzz dataset: a file of no examples is an error (training takes example i % n)", "[fuzz][file]") {
  const TempDir dir("fuzz-dataset");
  CHECK_THAT(dataset_error(dir, flipflop_file(dir, 0)), Catch::Contains("holds no examples"));
}

TEST_CASE("fuzz dataset: a seq_len other than its task's is an error (training fills (T,) buffers)",
          "[fuzz][file]") {
  const TempDir dir("fuzz-dataset");
  std::string f = flipflop_file(dir, 4);
  put<uint64_t>(f, kN, 2), put<uint32_t>(f, kSeqLen, 16);  // the same records as 2 of length 16
  CHECK_THAT(dataset_error(dir, f),
             Catch::Contains("seq_len 16 and vocab") && Catch::Contains("flipflop:len=8"));
}

TEST_CASE("fuzz dataset: a token outside the vocabulary is an error (training indexes embeddings)",
          "[fuzz][file]") {
  const TempDir dir("fuzz-dataset");
  std::string f = flipflop_file(dir, 1);
  uint32_t header_bytes;
  std::memcpy(&header_bytes, f.data() + 12, 4);
  f[header_bytes] = char(200);  // the first input token
  CHECK_THAT(dataset_error(dir, f), Catch::Contains("holds data outside its task") && Catch::Contains("input token 200 (record 0, position 0)"));
}

TEST_CASE("fuzz collect: an eval.jsonl line that is not an object with a numeric step is an error",
          "[fuzz][file]") {
  // The second evaluation of a (split, task) compared steps with json::value(), which throws
  // nlohmann's type_error on a non-object or a non-numeric step.
  CHECK_THAT(collect_error("1\n1\n"), Catch::Contains("eval.jsonl:1: an evaluation must be a JSON object"));
  CHECK_THAT(collect_error("{\"step\":1,\"split\":\"val\"}\n{\"step\":\"2\",\"split\":\"val\"}\n"),
             Catch::Contains("eval.jsonl:2: \"step\" must be a number"));
}

TEST_CASE("fuzz config: a non-integer number in an integer field of config.json is an error",
          "[fuzz][file]") {
  // 1e300 layers: converted to int unchecked, undefined behaviour (UBSan float-cast-overflow).
  const auto j = nlohmann::json::parse(R"({"task":"flipflop","pe":"rope","layers":1e300,"d_model":8,"heads":1,
      "mlp_ratio":4,"steps":1,"batch":1,"lr":0.001,"warmup":0,"weight_decay":0,"grad_clip":1,"seed":0,
      "eval_every":0,"eval_n":1,"data":""})");
  CHECK_THROWS_WITH(pb::config_from_json(j, "config.json"),
                    Catch::Contains("'config.json': 'layers' must be an integer"));
}

TEST_CASE("fuzz sweep: a non-ASCII character outside a comment is an error", "[fuzz][file]") {
  // toml++ 3.3.0 (Debian 12's) tests such a character for whitespace and reaches
  // __builtin_unreachable (UBSan) for U+00A7 after a key, and after a line continuation in a
  // """ string (upstream issues 190 and 295).
  const pb::OptionKinds kinds = pb::train_option_kinds();
  auto error = [&](const std::string& text) {
    try {
      pb::parse_sweep(text, "f.toml", kinds);
    } catch (const pb::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string head = "[sweep]\nname = \"t\"\ntask = \"flipflop\"\n";
  CHECK_THAT(error(head + "[grid]\nlmd \xc2\xa7" "4.1,\n"),
             Catch::Contains("f.toml:5: a non-ASCII character outside a comment"));
  CHECK_THAT(error(head + "[base]\nx = \"\"\"\\\n\xc2\xa7\"\"\"\n"),
             Catch::Contains("f.toml:6: a non-ASCII character in a string"));
  CHECK_THAT(error(head + "[base]\nx = 'a#b'\n\xc3\x97\n"),
             Catch::Contains("f.toml:6: a non-ASCII character outside"));
}
