#include "runners/decoding.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "core/io.h"
#include "models/decoder.h"

namespace pb {

nlohmann::json read_run_json(const std::string& run) {
  const std::string path = run + "/config.json";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("'{}' is not valid JSON: {}", path, e.what());
  }
  if (!j.is_object()) fail("'{}' is not a pathbench run config", path);
  return j;
}

TrainConfig read_run_config(const std::string& run) {
  return config_from_json(read_run_json(run), run + "/config.json");
}

template <class E>
EvalResult evaluate_decoding(const Transformer<E>& model, const Task& task, int split, int n_examples,
                             int batch) {
  EvalTally tally(task.splits()[split], task);
  const int T = task.seq_len(), V = model.config().vocab;
  Batch b;
  std::vector<int32_t> column(batch), target(batch), pred(size_t(batch) * T), argmax(batch);  // (B), (B), (B, T), (B)
  std::vector<float> loss(size_t(batch) * T), row_loss(batch);                               // (B, T), (B)
  typename E::template Buffer<int32_t> target_e(batch), argmax_e(batch);  // (B) in E's memory
  typename E::template Buffer<float> row_loss_e(batch);                   // (B)
  for (int first = 0; first < n_examples; first += batch) {
    const int B = std::min(batch, n_examples - first);
    fill_batch(b, task, kEvalSeed, split, first, B);
    Decoder<E> dec(model, B, T);
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < B; ++i) column[i] = b.input[size_t(i) * T + t], target[i] = b.target[size_t(i) * T + t];
      const float* logits = dec.step(column.data());  // (B, V) in E's memory
      E::upload(target_e.data(), target.data(), B);
      E::cross_entropy_forward(row_loss_e.data(), argmax_e.data(), logits, target_e.data(), B, V);
      E::download(argmax.data(), argmax_e.data(), B);
      E::download(row_loss.data(), row_loss_e.data(), B);
      for (int i = 0; i < B; ++i) pred[size_t(i) * T + t] = argmax[i], loss[size_t(i) * T + t] = row_loss[i];
    }
    tally.add(b, B, T, pred.data(), loss.data(), first);
  }
  return tally.result();
}
template EvalResult evaluate_decoding<Cpu32>(const Transformer<Cpu32>&, const Task&, int, int, int);
#if PATHBENCH_HAVE_CUDA
template EvalResult evaluate_decoding<CudaEngine>(const Transformer<CudaEngine>&, const Task&, int, int, int);
#endif

std::vector<int32_t> parse_prompt(const std::string& line, const std::vector<std::string>& vocab,
                                  const std::string& where) {
  std::vector<int32_t> ids;
  std::istringstream words(line);
  for (std::string w; words >> w;) {
    const auto it = std::find(vocab.begin(), vocab.end(), w);
    if (it == vocab.end()) {
      std::string names;
      for (const auto& v : vocab) names += (names.empty() ? "" : " ") + v;
      fail("{}: unknown token '{}'; the task's tokens: {}", where, w, names);
    }
    ids.push_back(int32_t(it - vocab.begin()));
  }
  if (ids.empty()) fail("{}: empty prompt (one prompt per line, tokens separated by spaces)", where);
  return ids;
}

template <class E>
std::vector<int32_t> greedy_continuation(const Transformer<E>& model, const std::vector<int32_t>& prompt,
                                         int max_new) {
  const int V = model.config().vocab;
  Decoder<E> dec(model, 1, int(prompt.size()) + max_new);
  std::vector<float> logits(V);  // (1, V) on the host
  auto step = [&](int32_t token) { E::download(logits.data(), dec.step(&token), size_t(V)); };
  for (int32_t token : prompt) step(token);
  std::vector<int32_t> out;
  for (int i = 0; i < max_new; ++i) {
    out.push_back(int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    if (i + 1 < max_new) step(out.back());
  }
  return out;
}
template std::vector<int32_t> greedy_continuation<Cpu32>(const Transformer<Cpu32>&, const std::vector<int32_t>&, int);
#if PATHBENCH_HAVE_CUDA
template std::vector<int32_t> greedy_continuation<CudaEngine>(const Transformer<CudaEngine>&,
                                                              const std::vector<int32_t>&, int);
#endif

}  // namespace pb
