// Dataset files written by `pathbench gen`: the binary format (streamed by training, `--data`)
// and jsonl (for eyes and other tools, with FILE.meta.json beside it). Both are written atomically
// (FILE.tmp.<pid>, then rename) and are byte-identical for any thread count.
// Binary layout (little-endian; tasks/README.md "Binary file layout"):
//   64-byte fixed header | spec | split | zeros up to header_bytes (a multiple of 64) | n records
//   record = input (T tokens) | target (T tokens, −1 stored as all-ones) | scored (T bytes, 0/1)
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tasks/task.h"

namespace pb {

constexpr uint32_t kDatasetVersion = 1;
constexpr size_t kDatasetFixedHeader = 64;  // bytes before the spec string

// Bytes per stored token: 1 if vocab_size ≤ 255, 2 if ≤ 65535, else 4 (all-ones is reserved for −1).
int dataset_token_bytes(int vocab_size);
size_t dataset_record_bytes(int seq_len, int token_bytes);  // 2·T·token_bytes + T

// Generates examples [first, first + count) and packs them as records into `out`
// ((count, record_bytes) bytes) on n_threads OpenMP threads (≤ 0: all); the bytes do not depend
// on n_threads.
void pack_examples(const Task& task, uint64_t seed, int split, uint64_t first, uint64_t count,
                   int n_threads, uint8_t* out);

// Writes n examples of (task, seed, split) to `path`; pb::Error (and no file) on failure.
void write_dataset_bin(const std::string& path, const Task& task, uint64_t seed, int split,
                       uint64_t n, int n_threads);
// One example per line, {"input":[...],"target":[...],"scored":[...]}, plus path + ".meta.json".
void write_dataset_jsonl(const std::string& path, const Task& task, uint64_t seed, int split,
                         uint64_t n, int n_threads);

// A binary dataset file, memory-mapped. The constructor checks the magic, version, header
// checksum, file size, payload checksum, the header against its task and every token against the
// vocabulary, and fails with a one-line pb::Error naming the file.
class DatasetReader {
 public:
  explicit DatasetReader(const std::string& path);
  ~DatasetReader();
  DatasetReader(const DatasetReader&) = delete;
  DatasetReader& operator=(const DatasetReader&) = delete;

  uint64_t n() const { return n_; }
  int seq_len() const { return seq_len_; }
  int vocab_size() const { return vocab_size_; }
  uint64_t seed() const { return seed_; }
  const std::string& spec() const { return spec_; }    // canonical task spec
  const std::string& split() const { return split_; }
  // Decodes example `index` (< n()) into `out` (seq_len() entries per array).
  void read(uint64_t index, ExampleView out) const;

 private:
  void check_and_parse();       // validates the mapped file and fills the fields below
  // The header against its task (vocabulary, length, split) and every record against the
  // vocabulary: a valid checksum does not make a hand-made file's tokens valid.
  void check_contents() const;

  std::string path_, spec_, split_;
  const uint8_t* map_ = nullptr;   // (size_,) the whole file
  size_t size_ = 0;
  const uint8_t* payload_ = nullptr;  // (n_, record_bytes_)
  uint64_t n_ = 0, seed_ = 0;
  int seq_len_ = 0, vocab_size_ = 0, token_bytes_ = 0;
  size_t record_bytes_ = 0;
};

}  // namespace pb
