// Flip-flop language (Liu et al. 2023; docs/tasks-sources.md): (instruction, bit) pairs, first w,
// last r; the bit after r repeats the bit of the most recent w. Hot path of `gen`: one 32-bit draw
// per instruction (exact thresholds at 2^-32 resolution), one draw per 32 bits, no allocation.
#include <array>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "tasks/builtin.h"

namespace pb {

namespace {

enum Token : int32_t { kW = 0, kR = 1, kI = 2, kZero = 3, kOne = 4 };

class FlipFlop final : public Task {
 public:
  explicit FlipFlop(const Spec& spec) : spec_(spec) {
    len_ = static_cast<int>(spec_int_in(spec, "len", 4, kMaxSeqLen, true));
    const double p_train = spec.get_float("p_ignore");
    if (!(p_train >= 0 && p_train <= 1))
      fail("task 'flipflop': key 'p_ignore' must be in [0, 1], got {}", p_train);
    p_ignore_ = {p_train, 0.8, 0.98, 0.1};
    for (size_t s = 0; s < kSplits.size(); ++s) {
      stream_[s] = stream_id(kSplits[s]);
      thr_ignore_[s] = static_cast<uint64_t>(std::llround(p_ignore_[s] * 4294967296.0));
      thr_write_[s] = thr_ignore_[s] + (4294967296ull - thr_ignore_[s]) / 2;
    }
  }

  const Spec& spec() const override { return spec_; }
  int seq_len() const override { return len_; }
  int vocab_size() const override { return 5; }
  std::vector<std::string> vocab() const override { return {"w", "r", "i", "0", "1"}; }
  std::vector<std::string> splits() const override { return {kSplits.begin(), kSplits.end()}; }

  nlohmann::json meta() const override {
    nlohmann::json p = nlohmann::json::object();
    for (size_t s = 0; s < kSplits.size(); ++s) p[kSplits[s]] = p_ignore_[s];
    return {{"p_ignore", p}};
  }

  void generate(uint64_t seed, int split, uint64_t index, ExampleView out) const override {
    Rng rng(seed, stream_[split], index);
    const uint64_t thr_i = thr_ignore_[split], thr_w = thr_write_[split];
    const int n_pairs = len_ / 2;
    int32_t memory = 0;
    uint32_t bits = 0;
    for (int j = 0; j < n_pairs; ++j) {
      if ((j & 31) == 0) bits = rng.next_u32();
      int32_t instr = kR;
      if (j == 0) {
        instr = kW;
      } else if (j + 1 < n_pairs) {
        const uint64_t u = rng.next_u32();
        instr = u < thr_i ? kI : (u < thr_w ? kW : kR);
      }
      int32_t bit = static_cast<int32_t>(bits & 1u);
      bits >>= 1;
      memory = instr == kW ? bit : memory;
      bit = instr == kR ? memory : bit;
      out.input[2 * j] = instr;
      out.input[2 * j + 1] = kZero + bit;
    }
    for (int t = 0; t + 1 < len_; ++t) {
      out.target[t] = out.input[t + 1];
      out.scored[t] = out.input[t] == kR;
    }
    out.target[len_ - 1] = -1;
    out.scored[len_ - 1] = 0;
  }

  bool distances(const int32_t* input, int32_t* distance) const override {
    int written = -1;  // position of the last write's bit
    for (int t = 0; t < len_; ++t) {
      distance[t] = t % 2 == 0 && input[t] == kR && written >= 0 ? t - written : 0;
      if (t % 2 == 0 && input[t] == kW) written = t + 1;
    }
    return true;
  }

 private:
  static constexpr std::array<const char*, 4> kSplits = {"train", "val", "val_sparse", "val_dense"};
  Spec spec_;
  int len_ = 0;
  std::array<double, 4> p_ignore_{};
  std::array<uint32_t, 4> stream_{};
  std::array<uint64_t, 4> thr_ignore_{}, thr_write_{};  // draw u < thr_ignore: i; < thr_write: w
};

}  // namespace

Schema flipflop_schema() {
  return {"flipflop",
          "flip-flop language (Liu et al. 2023): remember the bit of the last write, output it at each read",
          {{"len", ParamType::Int, "512", "tokens per example (even, >= 4)", {}},
           {"p_ignore", ParamType::Float, "0.8", "p(i) of the train split (val 0.8, val_sparse 0.98, val_dense 0.1)", {}}}};
}

std::unique_ptr<Task> make_flipflop(const Spec& spec) { return std::make_unique<FlipFlop>(spec); }

}  // namespace pb
