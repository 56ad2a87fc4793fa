#include "runners/resume.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/io.h"
#include "git_commit.h"

namespace pb {
namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "pathbench-resume";
constexpr const char* kStateTensor = "train_state";  // F64 (6), TrainState: under the data checksum
constexpr std::array<const char*, 3> kPrefixes = {"", "adamw.m.", "adamw.v."};  // params, m, v

template <class E>
auto buffers(ParamStore<E>& p) {  // in the order of kPrefixes
  return std::array{&p.params, &p.m, &p.v};
}
template <class E>
auto buffers(const ParamStore<E>& p) {
  return std::array{&p.params, &p.m, &p.v};
}

// The state as a (6) vector: step, eval_s, elapsed_s, early stop's best, best_step, since_best.
std::vector<double> state_values(const TrainState& s) {
  return {double(s.step), s.eval_s, s.elapsed_s, s.early_stop.best, double(s.early_stop.best_step),
          double(s.early_stop.since_best)};
}

TrainState state_of(const std::vector<double>& v) {
  TrainState s;
  s.step = int(v[0]), s.eval_s = v[1], s.elapsed_s = v[2];
  s.early_stop = {v[3], int(v[4]), int(v[5])};
  return s;
}

}  // namespace

bool checkpoint_due(const TrainConfig& cfg, int step) {
  const int every = cfg.checkpoint_every > 0 ? cfg.checkpoint_every
                    : cfg.eval_every > 0     ? cfg.eval_every
                                             : std::max(1, cfg.steps / 10);
  return step < cfg.steps && step % every == 0;
}

template <class E>
void write_resume(const TrainConfig& cfg, const ParamStore<E>& params, const TrainState& state) {
  std::vector<typename E::Scalar> host(params.size());  // (n): one of the flat buffers
  TensorMap m;
  const auto bufs = buffers(params);
  for (size_t b = 0; b < bufs.size(); ++b) {
    E::download(host.data(), bufs[b]->data(), host.size());
    for (const auto& e : params.entries) {
      Tensor t;
      t.shape = e.spec.shape;
      t.data.assign(host.begin() + e.offset, host.begin() + e.offset + e.size);
      m.emplace(kPrefixes[b] + e.spec.name, std::move(t));
    }
  }
  Tensor s;
  s.dtype = "F64", s.data = state_values(state), s.shape = {int64_t(s.data.size())};
  m.emplace(kStateTensor, std::move(s));
  write_safetensors(cfg.out + "/" + kResumeFile, m,
                    {{"format", kFormat}, {"run_id", run_id(cfg)}, {"commit", PATHBENCH_GIT_COMMIT}});
}

template <class E>
void restore_resume(ParamStore<E>& params, const ResumePoint& point, const std::string& path) {
  std::vector<typename E::Scalar> host(params.size());  // (n)
  const auto bufs = buffers(params);
  for (size_t b = 0; b < bufs.size(); ++b) {
    for (const auto& e : params.entries) {
      const Tensor& t = require_tensor(point.tensors, kPrefixes[b] + e.spec.name, e.spec.shape, path);
      std::copy(t.data.begin(), t.data.end(), host.begin() + e.offset);
    }
    E::upload(bufs[b]->data(), host.data(), host.size());
  }
}

ResumePoint read_resume(const TrainConfig& cfg) {
  const std::string dir = cfg.out, config_path = dir + "/config.json", path = dir + "/" + kResumeFile;
  if (fs::exists(dir + "/result.json"))
    fail("--resume: '{}' holds a finished run (result.json); there is nothing to resume", dir);
  if (!fs::exists(config_path)) fail("--resume: '{}' holds no run (no config.json)", dir);
  nlohmann::json stored;
  try {
    stored = nlohmann::json::parse(read_file(config_path));
  } catch (const nlohmann::json::exception& e) {
    fail("--resume: '{}' is not valid JSON ({})", config_path, e.what());
  }
  if (!stored.is_object()) fail("--resume: '{}' is not a pathbench run config", config_path);
  const std::string key = first_semantic_difference(stored, cfg);
  if (!key.empty())
    fail("--resume: the run in '{}' has another config: {} is {} there, {} here", dir, key,
         stored.contains(key) ? stored[key].dump() : "unset", to_json(cfg)[key].dump());
  if (!fs::exists(path))
    fail("--resume: '{}' has no checkpoint ({}): the run stopped before its first one; start it again without --resume",
         dir, kResumeFile);
  std::map<std::string, std::string> meta;
  ResumePoint point;
  point.tensors = read_safetensors(path, &meta);
  if (meta["format"] != kFormat) fail("--resume: '{}' is not a resume checkpoint (format '{}')", path, meta["format"]);
  if (meta["run_id"] != run_id(cfg))
    fail("--resume: '{}' belongs to run {}, not to this run {}", path, meta["run_id"], run_id(cfg));
  const std::vector<double>& state = require_tensor(point.tensors, kStateTensor, {6}, path).data;
  if (!(state[0] >= 1 && state[0] < cfg.steps) || state[0] != std::floor(state[0]))
    fail("--resume: '{}' holds step {}, not one of 1 … {} of this run", path, state[0], cfg.steps - 1);
  point.state = state_of(state);
  return point;
}

void truncate_log(const std::string& path, int step) {
  if (!fs::exists(path)) return;
  const std::string text = read_file(path);
  std::string kept;
  int line_no = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? text.size() : end + 1;
    ++line_no;
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      if (end == std::string::npos) break;  // cut short by the interruption
      fail("--resume: '{}' line {} is not JSON", path, line_no);
    }
    if (!row.is_object() || !row.contains("step") || !row["step"].is_number_integer())
      fail("--resume: '{}' line {} has no integer \"step\"", path, line_no);
    if (row["step"].get<int64_t>() <= step) kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

#define PB_INSTANTIATE(E)                                                                 \
  template void write_resume<E>(const TrainConfig&, const ParamStore<E>&, const TrainState&); \
  template void restore_resume<E>(ParamStore<E>&, const ResumePoint&, const std::string&);
PB_INSTANTIATE(Cpu32)
#if PATHBENCH_HAVE_CUDA
PB_INSTANTIATE(CudaEngine)
#endif
#undef PB_INSTANTIATE

}  // namespace pb
