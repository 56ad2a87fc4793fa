// Group word problems (Merrill, Petty, Sabharwal 2024; docs/tasks-sources.md): read group elements
// g_1..g_T, output the prefix product p_t = g_t ∘ p_{t-1} (p_0 = e) at every position. With `bos`
// (the default, as in the authors' code), position 0 holds a BOS token (id |G|, no target) and
// element t sits at position t; without it a causal transformer cannot tell "g g" from "g": the
// values it mixes are equal and the attention weights sum to 1, so p_2 = g² is out of reach for
// every encoding whenever g_1 = g_2 ≠ e (tasks/README.md).
// Split membership is a pure function of the elements (XXH3 of their ids h: val iff h % 5 == 0,
// test iff h % 5 == 1, else train; 3/5 train, 1/5 each for selection and the held-out report);
// each split rejection-samples uniform sequences until one belongs to it, so splits are disjoint.
#include "core/xxhash.h"

#include <array>

#include "core/error.h"
#include "core/rng.h"
#include "tasks/builtin.h"
#include "tasks/groups.h"

namespace pb {

namespace {

// Split of a sequence of element ids (0 train, 1 val, 2 test): XXH3-64 (seed 0) of the int32
// little-endian ids, modulo 5.
int sequence_split(const int32_t* ids, int n) {
  const uint64_t r = XXH3_64bits(ids, sizeof(int32_t) * size_t(n)) % 5;
  return r < 2 ? int(r) + 1 : 0;
}

class WordProblem final : public Task {
 public:
  explicit WordProblem(const Spec& spec) : spec_(spec), group_(PermGroup::make(spec.get_string("group"))) {
    bos_ = static_cast<int>(spec_int_in(spec, "bos", 0, 1));
    len_ = static_cast<int>(spec_int_in(spec, "len", 1, kMaxSeqLen - bos_));
    stream_ = {stream_id("train"), stream_id("val"), stream_id("test")};
    check_splits_nonempty();
  }

  const Spec& spec() const override { return spec_; }
  int seq_len() const override { return bos_ + len_; }
  int vocab_size() const override { return group_.order() + bos_; }
  std::vector<std::string> splits() const override { return {"train", "val", "test"}; }

  std::vector<std::string> vocab() const override {
    std::vector<std::string> v;
    for (int i = 0; i < group_.order(); ++i) v.push_back(group_.element_name(i));
    if (bos_) v.push_back("[BOS]");
    return v;
  }

  nlohmann::json meta() const override {
    nlohmann::json elems = nlohmann::json::array();
    for (int i = 0; i < group_.order(); ++i) elems.push_back(group_.element(i));
    return {{"group", group_.name()},
            {"order", group_.order()},
            {"degree", group_.degree()},
            {"composition", "(a∘b)(x) = a(b(x)); target p_t = g_t ∘ p_{t-1}, p_0 = identity (id 0)"},
            {"split_rule", "h = XXH3_64(element ids as int32 LE, seed 0) % 5: val iff h == 0, test iff h == 1, else train"},
            {"bos", bos_ ? nlohmann::json{{"id", group_.order()}, {"position", 0}} : nlohmann::json(nullptr)},
            {"elements", elems}};
  }

  void generate(uint64_t seed, int split, uint64_t index, ExampleView out) const override {
    Rng rng(seed, stream_[split], index);
    const uint32_t n = static_cast<uint32_t>(group_.order());
    int32_t* g = out.input + bos_;  // (len) the elements
    do {
      for (int t = 0; t < len_; ++t) g[t] = static_cast<int32_t>(rng.below(n));
    } while (sequence_split(g, len_) != split);
    if (bos_) out.input[0] = group_.order(), out.target[0] = -1, out.scored[0] = 0;
    int p = 0;
    for (int t = 0; t < len_; ++t) {
      p = group_.compose(g[t], p);
      out.target[bos_ + t] = p;
      out.scored[bos_ + t] = 1;
    }
  }

 private:
  Spec spec_;
  PermGroup group_;
  int bos_ = 1, len_ = 0;  // BOS tokens (0 or 1) before the len elements
  std::array<uint32_t, 3> stream_{};

  // With very few sequences (len 1: |G| of them) a split could be empty and rejection would spin.
  void check_splits_nonempty() const {
    if (len_ > 2) return;
    std::vector<int32_t> ids(len_, 0);  // (len,) odometer over all |G|^len sequences
    std::array<int, 3> n{};             // sequences per split
    for (bool more = true; more;) {
      ++n[size_t(sequence_split(ids.data(), len_))];
      more = false;
      for (int t = 0; t < len_ && !more; ++t) {
        more = ++ids[t] < group_.order();
        if (!more) ids[t] = 0;
      }
    }
    for (size_t s = 0; s < n.size(); ++s)
      if (n[s] == 0) fail("task 'wordproblem': len={} leaves split '{}' empty; use a larger len", len_, splits()[s]);
  }
};

}  // namespace

Schema wordproblem_schema() {
  return {"wordproblem",
          "group word problem (Merrill et al. 2024): output the running product of group elements",
          {{"group", ParamType::String, "a5", "a5 | s5 | a4xz5 | z60", PermGroup::group_names()},
           {"len", ParamType::Int, "16", "elements per example", {}},
           {"bos", ParamType::Int, "1", "1: a BOS token before the elements (0: none, so g g reads as g)", {}}}};
}

std::unique_ptr<Task> make_wordproblem(const Spec& spec) { return std::make_unique<WordProblem>(spec); }

}  // namespace pb
