// The binary dataset format: record packing (parallel, deterministic), the streaming writer
// (payload hashed with XXH3-64 as it is written, header patched last) and the mmap reader.
#include "tasks/dataset_file.h"

#include <fcntl.h>
#include <omp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/xxhash.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/io.h"

namespace pb {

static_assert(std::endian::native == std::endian::little, "dataset files are little-endian");

namespace {

constexpr char kMagic[8] = {'P', 'B', 'D', 'A', 'T', 'A', '\x1a', '\n'};
constexpr size_t kChunkBytes = size_t(32) << 20;  // examples generated per write, in bytes

struct RawHeader {  // the 64-byte fixed header, field offsets in tasks/README.md
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // fixed header + spec + split + zero padding, a multiple of 64
  uint64_t n;
  uint32_t seq_len;
  uint32_t vocab_size;
  uint64_t seed;
  uint32_t token_bytes;
  uint16_t spec_bytes;
  uint16_t split_bytes;
  uint64_t payload_xxh3;  // XXH3-64 of the n records
  uint64_t header_xxh3;   // XXH3-64 of the header_bytes bytes with this field zeroed
};
static_assert(sizeof(RawHeader) == kDatasetFixedHeader);

size_t padded_header_bytes(size_t spec_bytes, size_t split_bytes) {
  return (kDatasetFixedHeader + spec_bytes + split_bytes + 63) / 64 * 64;
}

template <class U>
void encode_tokens(const int32_t* src, int n, uint8_t* dst) {  // −1 becomes all-ones
  for (int t = 0; t < n; ++t) {
    const U v = static_cast<U>(src[t]);
    std::memcpy(dst + size_t(t) * sizeof(U), &v, sizeof(U));
  }
}

template <class U>
void decode_tokens(const uint8_t* src, int n, int32_t* dst) {
  for (int t = 0; t < n; ++t) {
    U v;
    std::memcpy(&v, src + size_t(t) * sizeof(U), sizeof(U));
    dst[t] = v == static_cast<U>(-1) ? -1 : static_cast<int32_t>(v);
  }
}

void encode_array(const int32_t* src, int n, int token_bytes, uint8_t* dst) {
  if (token_bytes == 1) encode_tokens<uint8_t>(src, n, dst);
  else if (token_bytes == 2) encode_tokens<uint16_t>(src, n, dst);
  else encode_tokens<uint32_t>(src, n, dst);
}

// The first out-of-range entry of `n` records (record_bytes each) of seq_len tokens of type U, as
// "what (record r, position t)", or "" if every input is a token of the vocabulary, every target one
// or −1 (all-ones), and every scored flag 0 or 1 and set only where there is a target.
template <class U>
std::string first_bad_token(const uint8_t* records, uint64_t n, size_t record_bytes, int seq_len, uint32_t vocab) {
  const size_t T = size_t(seq_len);
  for (uint64_t r = 0; r < n; ++r) {
    const uint8_t* rec = records + r * record_bytes;
    for (size_t t = 0; t < T; ++t) {
      U in, tg;
      std::memcpy(&in, rec + t * sizeof(U), sizeof(U));
      std::memcpy(&tg, rec + (T + t) * sizeof(U), sizeof(U));
      const uint8_t sc = rec[2 * T * sizeof(U) + t];
      const bool no_target = tg == static_cast<U>(-1);
      if (in >= vocab) return fmt::format("input token {} (record {}, position {})", uint64_t(in), r, t);
      if (!no_target && tg >= vocab) return fmt::format("target {} (record {}, position {})", uint64_t(tg), r, t);
      if (sc > 1 || (sc && no_target)) return fmt::format("scored flag {} (record {}, position {})", sc, r, t);
    }
  }
  return "";
}

void decode_array(const uint8_t* src, int n, int token_bytes, int32_t* dst) {
  if (token_bytes == 1) decode_tokens<uint8_t>(src, n, dst);
  else if (token_bytes == 2) decode_tokens<uint16_t>(src, n, dst);
  else decode_tokens<uint32_t>(src, n, dst);
}

}  // namespace

int dataset_token_bytes(int vocab_size) { return vocab_size <= 255 ? 1 : vocab_size <= 65535 ? 2 : 4; }

size_t dataset_record_bytes(int seq_len, int token_bytes) {
  return size_t(seq_len) * (2 * size_t(token_bytes) + 1);
}

void pack_examples(const Task& task, uint64_t seed, int split, uint64_t first, uint64_t count,
                   int n_threads, uint8_t* out) {
  const int n_t = task.seq_len(), w = dataset_token_bytes(task.vocab_size());
  const size_t rec = dataset_record_bytes(n_t, w);
  if (n_threads <= 0) n_threads = omp_get_max_threads();
  n_threads = static_cast<int>(std::min<uint64_t>(n_threads, std::max<uint64_t>(count, 1)));
#pragma omp parallel num_threads(n_threads)
  {
    Example ex;  // per-thread scratch, (T,) each
    ex.input.resize(n_t), ex.target.resize(n_t), ex.scored.resize(n_t);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) {
      task.generate(seed, split, first + i, ex.view());
      uint8_t* dst = out + size_t(i) * rec;
      encode_array(ex.input.data(), n_t, w, dst);
      encode_array(ex.target.data(), n_t, w, dst + size_t(n_t) * w);
      std::memcpy(dst + 2 * size_t(n_t) * w, ex.scored.data(), n_t);
    }
  }
}

void write_dataset_bin(const std::string& path, const Task& task, uint64_t seed, int split,
                       uint64_t n, int n_threads) {
  const std::string spec = task.spec().canonical(), split_name = task.splits().at(split);
  RawHeader h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.version = kDatasetVersion;
  h.header_bytes = static_cast<uint32_t>(padded_header_bytes(spec.size(), split_name.size()));
  h.n = n;
  h.seq_len = static_cast<uint32_t>(task.seq_len());
  h.vocab_size = static_cast<uint32_t>(task.vocab_size());
  h.seed = seed;
  h.token_bytes = static_cast<uint32_t>(dataset_token_bytes(task.vocab_size()));
  h.spec_bytes = static_cast<uint16_t>(spec.size());
  h.split_bytes = static_cast<uint16_t>(split_name.size());

  std::vector<uint8_t> head(h.header_bytes, 0);  // (header_bytes,)
  std::memcpy(head.data() + kDatasetFixedHeader, spec.data(), spec.size());
  std::memcpy(head.data() + kDatasetFixedHeader + spec.size(), split_name.data(), split_name.size());

  AtomicOutput out(path);
  out.write(head.data(), head.size());
  const size_t rec = dataset_record_bytes(task.seq_len(), h.token_bytes);
  const uint64_t chunk = std::max<uint64_t>(1, kChunkBytes / rec);
  std::vector<uint8_t> buf(std::min(chunk, std::max<uint64_t>(n, 1)) * rec);  // (chunk, rec)
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), XXH3_freeState);
  XXH3_64bits_reset(state.get());
  for (uint64_t first = 0; first < n; first += chunk) {
    const uint64_t count = std::min(chunk, n - first);
    pack_examples(task, seed, split, first, count, n_threads, buf.data());
    XXH3_64bits_update(state.get(), buf.data(), count * rec);
    out.write(buf.data(), count * rec);
  }
  h.payload_xxh3 = XXH3_64bits_digest(state.get());
  std::memcpy(head.data(), &h, sizeof(h));
  h.header_xxh3 = XXH3_64bits(head.data(), head.size());
  std::memcpy(head.data(), &h, sizeof(h));
  out.write_at(0, head.data(), sizeof(h));
  out.commit();
}

DatasetReader::DatasetReader(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open dataset file '{}': {}", path, std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < kDatasetFixedHeader) {
    ::close(fd);
    fail("dataset file '{}' is truncated: {} bytes, less than the {}-byte header", path, size_,
         kDatasetFixedHeader);
  }
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) fail("cannot map dataset file '{}': {}", path, std::strerror(errno));
  map_ = static_cast<const uint8_t*>(m);
  try {
    check_and_parse();
  } catch (...) {
    ::munmap(m, size_);
    throw;
  }
}

void DatasetReader::check_and_parse() {
  const std::string& path = path_;
  RawHeader h;
  std::memcpy(&h, map_, sizeof(h));
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0)
    fail("'{}' is not a pathbench dataset file (bad magic); write one with `pathbench gen --format bin`", path);
  if (h.version != kDatasetVersion)
    fail("dataset file '{}' has format version {}; this build reads version {} (regenerate it)", path,
         h.version, kDatasetVersion);
  if (h.header_bytes != padded_header_bytes(h.spec_bytes, h.split_bytes) || h.header_bytes > size_)
    fail("dataset file '{}' is truncated or corrupted: header of {} bytes in a {}-byte file", path,
         h.header_bytes, size_);
  std::vector<uint8_t> head(map_, map_ + h.header_bytes);
  std::memset(head.data() + offsetof(RawHeader, header_xxh3), 0, sizeof(uint64_t));
  if (XXH3_64bits(head.data(), head.size()) != h.header_xxh3)
    fail("dataset file '{}' is corrupted: header checksum mismatch", path);
  if (h.seq_len < 1 || h.token_bytes != uint32_t(dataset_token_bytes(static_cast<int>(h.vocab_size))))
    fail("dataset file '{}' is corrupted: seq_len {} with {}-byte tokens for vocab {}", path, h.seq_len,
         h.token_bytes, h.vocab_size);
  spec_.assign(reinterpret_cast<const char*>(map_) + kDatasetFixedHeader, h.spec_bytes);
  split_.assign(reinterpret_cast<const char*>(map_) + kDatasetFixedHeader + h.spec_bytes, h.split_bytes);
  // A checksum proves no accident, not a writer: the sizes that training indexes its (T,) buffers
  // and embeddings with must be those of the file's task.
  std::unique_ptr<Task> task;
  try {
    task = make_task(spec_);
  } catch (const Error& e) {
    fail("dataset file '{}' is corrupted: {}", path, e.what());
  }
  if (task->spec().canonical() != spec_ || h.seq_len != uint32_t(task->seq_len()) ||
      h.vocab_size != uint32_t(task->vocab_size()))
    fail("dataset file '{}' is corrupted: seq_len {} and vocab {} are not those of its task '{}'", path,
         h.seq_len, h.vocab_size, spec_);
  n_ = h.n, seed_ = h.seed;
  seq_len_ = static_cast<int>(h.seq_len), vocab_size_ = static_cast<int>(h.vocab_size);
  token_bytes_ = static_cast<int>(h.token_bytes);
  record_bytes_ = dataset_record_bytes(seq_len_, token_bytes_);
  const size_t payload = size_ - h.header_bytes;
  if (payload / record_bytes_ != n_ || payload % record_bytes_ != 0)
    fail("dataset file '{}' is truncated or has extra bytes: {} bytes of records, expected {} records of {} bytes",
         path, payload, n_, record_bytes_);
  if (n_ == 0) fail("dataset file '{}' holds no examples", path);
  payload_ = map_ + h.header_bytes;
  if (XXH3_64bits(payload_, payload) != h.payload_xxh3)
    fail("dataset file '{}' is corrupted: payload checksum mismatch", path);
  check_contents();
}

void DatasetReader::check_contents() const {
  std::unique_ptr<Task> task;
  try {
    task = make_task(spec_);
  } catch (const Error& e) {
    fail("dataset file '{}' names a task this build refuses: {}", path_, e.what());
  }
  const auto splits = task->splits();  // vocab and len were checked against the task in check_and_parse
  if (std::find(splits.begin(), splits.end(), split_) == splits.end())
    fail("dataset file '{}' does not match its task '{}': split '{}' in the header; the task's splits are {}", path_,
         spec_, split_, fmt::join(splits, ", "));
  const uint32_t vocab = uint32_t(vocab_size_);
  const std::string bad =
      token_bytes_ == 1   ? first_bad_token<uint8_t>(payload_, n_, record_bytes_, seq_len_, vocab)
      : token_bytes_ == 2 ? first_bad_token<uint16_t>(payload_, n_, record_bytes_, seq_len_, vocab)
                          : first_bad_token<uint32_t>(payload_, n_, record_bytes_, seq_len_, vocab);
  if (!bad.empty())
    fail("dataset file '{}' holds data outside its task '{}' (vocabulary of {} tokens): {}", path_, spec_, vocab_size_,
         bad);
}

DatasetReader::~DatasetReader() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
}

void DatasetReader::read(uint64_t index, ExampleView out) const {
  if (index >= n_) fail("dataset file '{}': example {} out of range (it holds {})", path_, index, n_);
  const uint8_t* rec = payload_ + index * record_bytes_;
  const size_t n_t = size_t(seq_len_);
  decode_array(rec, seq_len_, token_bytes_, out.input);
  decode_array(rec + n_t * token_bytes_, seq_len_, token_bytes_, out.target);
  std::memcpy(out.scored, rec + 2 * n_t * token_bytes_, n_t);
}

}  // namespace pb
