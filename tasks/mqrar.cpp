// MQRAR-N (docs/tasks-sources.md: our reading of the paper): a stream of len/2 assignments "key value"
// with uniform keys and values; at each key with ≥ n_back earlier assignments the target is the
// value of its n_back-th most recent earlier assignment. Keys are tokens 0..n_keys-1, values
// n_keys..n_keys+n_values-1.
#include <array>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "tasks/builtin.h"

namespace pb {

namespace {

// The assignments of a stream seen so far, key by key: next(key, at) gives the position of the
// value of key's n_back-th most recent earlier assignment (−1 when it has fewer), then records this
// one, whose value sits at position `at`. Shared by the generator (the target is the token there)
// and the recall distances.
class NBack {
 public:
  NBack(int n_keys, int n_back) : at_(size_t(n_keys) * n_back), count_(size_t(n_keys), 0), n_back_(n_back) {}
  int32_t next(int32_t key, int32_t at) {
    int32_t* ring = &at_[size_t(key) * n_back_];
    const int64_t c = count_[size_t(key)]++;
    const int slot = static_cast<int>(c % n_back_);  // holds assignment c − n_back, if any
    const int32_t back = c >= n_back_ ? ring[slot] : -1;
    ring[slot] = at;
    return back;
  }

 private:
  std::vector<int32_t> at_;     // (n_keys, n_back) ring of value positions
  std::vector<int64_t> count_;  // (n_keys,) assignments so far
  int n_back_;
};

class Mqrar final : public Task {
 public:
  explicit Mqrar(const Spec& spec) : spec_(spec) {
    len_ = static_cast<int>(spec_int_in(spec, "len", 2, kMaxSeqLen, true));
    n_keys_ = static_cast<int>(spec_int_in(spec, "n_keys", 1, 1 << 20));
    n_values_ = static_cast<int>(spec_int_in(spec, "n_values", 1, (1 << 24) - n_keys_));
    n_back_ = static_cast<int>(spec_int_in(spec, "n_back", 1, 1 << 10));
    if (n_back_ >= len_ / 2)  // a key needs n_back earlier assignments before it is scored
      fail("task 'mqrar': n_back={} scores nothing with len={} ({} assignments); len must be >= {}", n_back_, len_,
           len_ / 2, 2 * (n_back_ + 1));
    if (int64_t(n_keys_) * n_back_ > (1 << 24))
      fail("task 'mqrar': n_keys × n_back = {} values per example's history; at most {}", int64_t(n_keys_) * n_back_,
           1 << 24);
    stream_ = {stream_id("train"), stream_id("val"), stream_id("test")};
  }

  const Spec& spec() const override { return spec_; }
  int seq_len() const override { return len_; }
  int vocab_size() const override { return n_keys_ + n_values_; }
  int target_every() const override { return 2; }  // targets at keys, the even positions
  std::vector<std::string> splits() const override { return {"train", "val", "test"}; }

  std::vector<std::string> vocab() const override {
    std::vector<std::string> v;
    for (int k = 0; k < n_keys_; ++k) v.push_back(fmt::format("k{}", k));
    for (int x = 0; x < n_values_; ++x) v.push_back(fmt::format("v{}", x));
    return v;
  }

  nlohmann::json meta() const override {
    return {{"first_key_token", 0}, {"first_value_token", n_keys_}, {"n_back", n_back_}};
  }

  void generate(uint64_t seed, int split, uint64_t index, ExampleView out) const override {
    Rng rng(seed, stream_[split], index);
    NBack recall(n_keys_, n_back_);
    for (int j = 0; j < len_ / 2; ++j) {
      const int32_t key = static_cast<int32_t>(rng.below(n_keys_));
      const int32_t value = n_keys_ + static_cast<int32_t>(rng.below(n_values_));
      const int32_t back = recall.next(key, 2 * j + 1);
      out.input[2 * j] = key;
      out.input[2 * j + 1] = value;
      out.target[2 * j] = back >= 0 ? out.input[back] : -1;
      out.scored[2 * j] = back >= 0;
      out.target[2 * j + 1] = -1;
      out.scored[2 * j + 1] = 0;
    }
  }

  bool distances(const int32_t* input, int32_t* distance) const override {
    NBack recall(n_keys_, n_back_);
    for (int j = 0; j < len_ / 2; ++j) {
      const int32_t key = input[2 * j];
      const int32_t back = key >= 0 && key < n_keys_ ? recall.next(key, 2 * j + 1) : -1;  // a key token, else none
      distance[2 * j] = back >= 0 ? 2 * j - back : 0;
      distance[2 * j + 1] = 0;
    }
    return true;
  }

 private:
  Spec spec_;
  int len_ = 0, n_keys_ = 0, n_values_ = 0, n_back_ = 0;
  std::array<uint32_t, 3> stream_{};  // train, val, test
};

}  // namespace

Schema mqrar_schema() {
  return {"mqrar",
          "MQRAR-N: at each key, output the value of its n_back-th most recent earlier assignment",
          {{"n_keys", ParamType::Int, "32", "number of variables (key tokens)", {}},
           {"n_values", ParamType::Int, "64", "number of value tokens", {}},
           {"len", ParamType::Int, "768", "tokens per example (even): len/2 assignments", {}},
           {"n_back", ParamType::Int, "1", "N: recall the N-th most recent earlier assignment", {}}}};
}

std::unique_ptr<Task> make_mqrar(const Spec& spec) { return std::make_unique<Mqrar>(spec); }

}  // namespace pb
