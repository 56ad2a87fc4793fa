// `pathbench bench attention`: the speed of one attention kernel (forward, or forward + backward)
// on the GPU at one shape, for side-by-side comparison with PyTorch SDPA (scripts/bench_attention.py).
// bf16 times the tensor-core kernels of kernels/cuda/attention_bf16.h, f32 the fp32 ops of
// kernels/cuda/ops.h. Prints one line:
//   bench attention gpu="..." pe=.. dtype=.. batch=.. seq_len=.. heads=.. head_dim=..
//   pass=fwd|fwd_bwd ms=.. tflops=.. peak_mem_mib=..
// ms: median over --iters of the device time of one call (fwd) or of the forward and its backward
// back to back (fwd_bwd), after --warmup calls, cycling over --rotate input sets so consecutive calls
// do not find their inputs in L2. Each call is timed on its own (cuda::Timer, which waits), so a few
// µs of launch latency per call are included. tflops: the FLOP count of plain causal attention
// (SDPA-equivalent: fwd 4·B·H·T²·D/2, fwd_bwd 3.5× that), the same for every encoding, so the
// figure compares encodings like ms does. peak_mem_mib: the most device memory held through
// cuda::device_alloc from before the inputs were allocated to the end of the run (all --rotate input
// sets, outputs, gradients, scratch), like PyTorch's max_memory_allocated; the transient fp32
// staging of the bf16 upload is not counted (PyTorch draws bf16 directly).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "kernels/ops.h"
#include "models/position/position_encoding.h"
#include "runners/commands.h"
#if PATHBENCH_HAVE_CUDA
#include <Random123/philox.h>

#include "kernels/cuda/attention_bf16.h"
#include "core/cuda/buffer.h"
#include "kernels/cuda/ops.h"
#include "core/cuda/runtime.h"
#endif

namespace pb {
namespace {

struct BenchAttentionOpts {
  std::string pe, dtype = "bf16";
  int batch = 0, seq_len = 0, heads = 0, head_dim = 0;
  bool backward = false;
  int warmup = 10, iters = 50, rotate = 4;
};

// What one run computes, from the validated options and the encoding's registry entry: its
// attention family picks the kernel, the gate and the bias table are fed random inputs.
struct Plan {
  std::string name;  // the encoding's name
  bool bf16 = true, path = false, sba = false, gated = false, bias = false;
  int block = 64;  // PaTH's UT block (pe spec key `block`)
  AttnShape shape{};
};

// The encodings the options' dtype can time, for the error message.
std::string timed_encodings(bool bf16) {
  std::string names;
  for (const auto& e : encodings())
    if (e.info.cuda && e.info.family != AttentionFamily::Custom && (e.info.bf16 || !bf16))
      names += (names.empty() ? "" : ", ") + e.schema.name;
  return names;
}

Plan make_plan(const BenchAttentionOpts& o) {
  Plan p;
  const Spec pe = resolve_encoding(o.pe);  // pb::Error naming the valid encodings
  const EncodingInfo& info = encoding_entry(pe.name()).info;
  p.name = pe.name();
  if (o.dtype != "bf16" && o.dtype != "f32") fail("--dtype must be bf16 or f32, got '{}'", o.dtype);
  p.bf16 = o.dtype == "bf16";
  p.path = info.family == AttentionFamily::Path;
  p.sba = info.family == AttentionFamily::StickBreaking;
  p.gated = info.gate;
  p.bias = info.takes(AttnInput::Bias);
  if (!info.cuda || info.family == AttentionFamily::Custom)
    fail("bench attention: encoding '{}' has no CUDA attention kernel to time (timed: {})", p.name,
         timed_encodings(false));
  if (p.bf16 && !info.bf16)
    fail("bench attention: encoding '{}' has no bf16 kernel (bf16: {}; f32: {})", p.name, timed_encodings(true),
         timed_encodings(false));
  if (p.path) p.block = int(pe.get_int("block"));
  const std::pair<const char*, int> sizes[] = {
      {"--batch", o.batch}, {"--seq-len", o.seq_len}, {"--heads", o.heads}, {"--head-dim", o.head_dim}};
  for (const auto& [flag, v] : sizes)
    if (v < 1) fail("{} needs a positive integer, got {}", flag, v);
  if (p.bf16 && o.head_dim != 32 && o.head_dim != 64 && o.head_dim != 128)
    fail("--head-dim {}: the bf16 kernels support head dims 32, 64 and 128", o.head_dim);
  const int max_d = p.path ? 128 : 256;
  if (!p.bf16 && o.head_dim > max_d)
    fail("--head-dim {}: the f32 {} kernel supports head dims 1 to {}", o.head_dim, p.name, max_d);
  if (int64_t(o.batch) * o.seq_len * o.heads * o.head_dim >= int64_t(1) << 31)
    fail("bench attention: B·T·H·D = {} elements per tensor: must be below 2^31",
         int64_t(o.batch) * o.seq_len * o.heads * o.head_dim);
  if (o.warmup < 0) fail("--warmup needs an integer >= 0, got {}", o.warmup);
  if (o.iters < 1) fail("--iters needs a positive integer, got {}", o.iters);
  if (o.rotate < 1) fail("--rotate needs a positive integer, got {}", o.rotate);
  p.shape = AttnShape{o.batch, o.seq_len, o.heads, o.head_dim};
  return p;
}

#if PATHBENCH_HAVE_CUDA

// n standard normals of input tensor `tensor` of set `set`: Philox4x32 at counter (group, tensor,
// set), Box-Muller on each pair. A pure function of its arguments, whatever the thread count.
std::vector<float> normals(int64_t n, uint32_t tensor, uint32_t set) {
  std::vector<float> x(n);
  const int64_t groups = (n + 3) / 4;
#pragma omp parallel for schedule(static)
  for (int64_t g = 0; g < groups; ++g) {
    const r123::Philox4x32::ctr_type ctr = {{uint32_t(g), uint32_t(uint64_t(g) >> 32), tensor, set}};
    const r123::Philox4x32::key_type key = {{0x5eedu, 0xa77e4710u}};
    const auto r = r123::Philox4x32()(ctr, key);
    float z[4];
    for (int pair = 0; pair < 2; ++pair) {
      const double u1 = (double(r.v[2 * pair] >> 8) + 1.0) * (1.0 / 16777216.0);  // (0, 1]
      const double u2 = double(r.v[2 * pair + 1] >> 8) * (1.0 / 16777216.0);      // [0, 1)
      const double rad = std::sqrt(-2.0 * std::log(u1)), a = 6.283185307179586 * u2;
      z[2 * pair] = float(rad * std::cos(a)), z[2 * pair + 1] = float(rad * std::sin(a));
    }
    for (int i = 0; i < 4 && 4 * g + i < n; ++i) x[4 * g + i] = z[i];
  }
  return x;
}

template <class T>  // float (f32) or cuda::bf16_bits (bf16) storage of q, k, v, o, do and their gradients
struct InputSet {
  cuda::DeviceBuffer<T> q, k, v, dout;
  cuda::DeviceBuffer<float> w, beta, log_f, bias;  // (B, T, H, D), (B, T, H), (B, T, H), (H, T); empty if unused
};

template <class T>
void upload(cuda::DeviceBuffer<T>& dst, const std::vector<float>& host, cuda::DeviceBuffer<float>& staging) {
  dst.resize(host.size());
  if constexpr (std::is_same_v<T, float>) {
    cuda::copy_to_device(dst.data(), host.data(), host.size() * sizeof(float));
  } else {
    cuda::copy_to_device(staging.data(), host.data(), host.size() * sizeof(float));
    cuda::to_bf16(dst.data(), staging.data(), int64_t(host.size()));
  }
}

template <class T>
void run(const BenchAttentionOpts& o, const Plan& p) {
  const AttnShape s = p.shape;
  const int64_t n4 = int64_t(s.B) * s.T * s.H * s.D, n3 = n4 / s.D;
  const uint64_t base_bytes = cuda::allocated_bytes();
  cuda::reset_peak_allocated();

  // Inputs, --rotate sets of them.
  std::vector<InputSet<T>> sets(o.rotate);
  {
    cuda::DeviceBuffer<float> staging(std::is_same_v<T, float> ? 0 : n4);
    for (int r = 0; r < o.rotate; ++r) {
      InputSet<T>& in = sets[r];
      upload(in.q, normals(n4, 0, r), staging);
      upload(in.k, normals(n4, 1, r), staging);
      upload(in.v, normals(n4, 2, r), staging);
      if (o.backward) upload(in.dout, normals(n4, 3, r), staging);
      if (p.path) {
        std::vector<float> w = normals(n4, 4, r), beta = normals(n3, 5, r);
#pragma omp parallel for schedule(static)
        for (int64_t row = 0; row < n3; ++row) {  // unit rows
          float* x = w.data() + row * s.D;
          double ss = 0;
          for (int d = 0; d < s.D; ++d) ss += double(x[d]) * x[d];
          const double inv = 1.0 / std::sqrt(std::max(ss, 1e-30));
          for (int d = 0; d < s.D; ++d) x[d] = float(x[d] * inv);
        }
        for (float& b : beta) b = float(2.0 / (1.0 + std::exp(-double(b))));  // 2σ(z)
        upload(in.w, w, staging), upload(in.beta, beta, staging);
      }
      if (p.gated) {
        std::vector<float> log_f = normals(n3, 6, r);
        for (float& x : log_f) x = float(-std::log1p(std::exp(-(double(x) + 3.0))));  // log σ(z+3)
        upload(in.log_f, log_f, staging);
      }
      if (p.bias) {  // b_h(r) = −0.1·log(1 + r)·(1 + |z|/4): a decaying table with per-entry noise
        std::vector<float> bias = normals(int64_t(s.H) * s.T, 7, r);
        for (int64_t e = 0; e < int64_t(bias.size()); ++e)
          bias[e] = float(-0.1 * std::log1p(double(e % s.T)) * (1.0 + std::abs(bias[e]) / 4));
        in.bias.resize(bias.size());
        cuda::copy_to_device(in.bias.data(), bias.data(), bias.size() * sizeof(float));
      }
    }
    cuda::synchronize();
  }  // the staging buffer is freed here; the peak below counts inputs, outputs and scratch
  cuda::reset_peak_allocated();

  // Outputs and gradients, shared by every set (overwritten by each call).
  cuda::DeviceBuffer<T> o_(n4), dq, dk, dv;
  cuda::DeviceBuffer<float> lse(n3), dw, dbeta, dlog_f, dbias;
  if (o.backward) {
    dq.resize(n4), dk.resize(n4), dv.resize(n4);
    if (p.path) dw.resize(n4), dbeta.resize(n3);
    if (p.gated) dlog_f.resize(n3);
    if (p.bias) dbias.resize(size_t(s.H) * s.T);
  }
  auto ptr = [](auto& b) { return b.empty() ? nullptr : b.data(); };
  const double scale = 1.0 / std::sqrt(double(s.D));
  const SoftmaxAttentionArgs sargs{s, scale};
  const PathAttentionArgs pargs{s, scale, p.block};
  const StickBreakingArgs sbargs{s, scale};

  auto call = [&](InputSet<T>& in) {
    float* log_f = ptr(in.log_f);
    float* bias = ptr(in.bias);
    if constexpr (std::is_same_v<T, float>) {
      if (p.path) {
        cuda::path_attention_forward(o_.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), in.w.data(),
                                     in.beta.data(), log_f, pargs);
        if (o.backward)
          cuda::path_attention_backward(dq.data(), dk.data(), dv.data(), dw.data(), dbeta.data(), ptr(dlog_f),
                                        in.dout.data(), o_.data(), lse.data(), in.q.data(), in.k.data(),
                                        in.v.data(), in.w.data(), in.beta.data(), log_f, pargs);
      } else if (p.sba) {
        cuda::stick_breaking_forward(o_.data(), in.q.data(), in.k.data(), in.v.data(), sbargs);
        if (o.backward)
          cuda::stick_breaking_backward(dq.data(), dk.data(), dv.data(), in.dout.data(), in.q.data(), in.k.data(),
                                        in.v.data(), sbargs);
      } else {
        cuda::softmax_attention_forward(o_.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), log_f, sargs,
                                        bias);
        if (o.backward)
          cuda::softmax_attention_backward(dq.data(), dk.data(), dv.data(), ptr(dlog_f), in.dout.data(), o_.data(),
                                           lse.data(), in.q.data(), in.k.data(), in.v.data(), log_f, sargs,
                                           ptr(dbias), bias);
      }
    } else {
      if (p.path) {
        cuda::path_attention_bf16_forward(o_.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(),
                                          in.w.data(), in.beta.data(), log_f, pargs);
        if (o.backward)
          cuda::path_attention_bf16_backward(dq.data(), dk.data(), dv.data(), dw.data(), dbeta.data(), ptr(dlog_f),
                                             in.dout.data(), o_.data(), lse.data(), in.q.data(), in.k.data(),
                                             in.v.data(), in.w.data(), in.beta.data(), log_f, pargs);
      } else {
        cuda::flash_attention_bf16_forward(o_.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), log_f,
                                           sargs, bias);
        if (o.backward)
          cuda::flash_attention_bf16_backward(dq.data(), dk.data(), dv.data(), ptr(dlog_f), in.dout.data(),
                                              o_.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), log_f,
                                              sargs, ptr(dbias), bias);
      }
    }
  };

  for (int it = 0; it < o.warmup; ++it) call(sets[it % o.rotate]);
  cuda::synchronize();
  cuda::Timer timer;
  std::vector<double> ms;
  for (int it = 0; it < o.iters; ++it) {
    InputSet<T>& in = sets[(o.warmup + it) % o.rotate];
    timer.start();
    call(in);
    ms.push_back(timer.stop_ms());
  }
  cuda::synchronize();
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  const double med = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  const double fwd_flop = 4.0 * s.B * s.H * double(s.T) * s.T * s.D / 2.0;
  const double flop = o.backward ? 3.5 * fwd_flop : fwd_flop;
  const double peak_mib = double(cuda::peak_allocated_bytes() - base_bytes) / (1024.0 * 1024.0);
  fmt::print("bench attention gpu=\"{}\" pe={} dtype={} batch={} seq_len={} heads={} head_dim={} pass={} "
             "ms={:.4f} tflops={:.2f} peak_mem_mib={:.1f}\n",
             cuda_device_name(0), p.name, o.dtype, s.B, s.T, s.H, s.D, o.backward ? "fwd_bwd" : "fwd", med,
             flop / (med * 1e-3) / 1e12, peak_mib);
}

#endif  // PATHBENCH_HAVE_CUDA

void run_bench_attention(const BenchAttentionOpts& o) {
  [[maybe_unused]] const Plan p = make_plan(o);
  if (!cuda_built())
    fail("bench attention: this build has no CUDA engine (build with nvcc present, -DPATHBENCH_CUDA=ON)");
  if (cuda_device_count() == 0) fail("bench attention: no CUDA device is visible on this machine");
#if PATHBENCH_HAVE_CUDA
  cuda::set_device(0);
  if (p.bf16) run<cuda::bf16_bits>(o, p);
  else run<float>(o, p);
#endif
}

}  // namespace

void add_bench_attention_command(CLI::App& bench) {
  auto o = std::make_shared<BenchAttentionOpts>();
  auto* cmd = bench.add_subcommand(
      "attention", "Time one attention kernel on the GPU (fwd or fwd+bwd): median ms, TFLOP/s, peak memory");
  cmd->add_option("--pe", o->pe,
                  "encoding (its attention kernel with random gate / bias inputs; rope is timed as nope: the "
                  "rotation is a separate op); --dtype bf16 only where the encoding has a bf16 kernel")
      ->required();
  cmd->add_option("--dtype", o->dtype, "bf16 (attention_bf16.h kernels) | f32 (ops.h kernels)")->capture_default_str();
  cmd->add_option("--batch", o->batch, "B")->required();
  cmd->add_option("--seq-len", o->seq_len, "T")->required();
  cmd->add_option("--heads", o->heads, "H")->required();
  cmd->add_option("--head-dim", o->head_dim, "D (bf16: 32, 64, 128)")->required();
  cmd->add_flag("--backward", o->backward, "time forward + backward together (pass=fwd_bwd)");
  cmd->add_option("--warmup", o->warmup, "untimed calls first")->capture_default_str();
  cmd->add_option("--iters", o->iters, "timed calls (median reported)")->capture_default_str();
  cmd->add_option("--rotate", o->rotate, "distinct input sets, cycled (keeps inputs out of L2)")->capture_default_str();
  cmd->callback([o] { run_bench_attention(*o); });
}

}  // namespace pb
