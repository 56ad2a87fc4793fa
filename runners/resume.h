// Resumable training (docs/run-format.md, resume.safetensors). While it trains, a run writes a
// checkpoint of everything its later steps depend on: the parameters, the AdamW moments, the last
// step trained (which fixes the learning rate, AdamW's bias correction and the data: step s
// trains on examples (s−1)·batch …), the early-stopping state, and the clocks of its time fields.
// `train --resume` and the sweeps continue an interrupted run from it; on the CPU the run then ends
// bit-identical to an uninterrupted one (tests/test_resume.cpp).
#pragma once
#include <string>

#include "core/safetensors.h"
#include "models/params.h"
#include "runners/train_config.h"

namespace pb {

constexpr const char* kResumeFile = "resume.safetensors";  // in the run directory

// The early stopping's memory (EarlyStop in runners/trainer.cpp): the best value of its metric,
// the step of that evaluation (−1: none yet), and the evaluations since without improvement.
struct EarlyStopState {
  double best = 0;
  int best_step = -1, since_best = 0;
};

// The scalar state of a run after a step, beside its tensors.
struct TrainState {
  int step = 0;             // the last step trained
  double eval_s = 0;        // time spent evaluating so far
  double elapsed_s = 0;     // training time so far: the clock of metrics.jsonl's elapsed_s
  EarlyStopState early_stop;
};

// A checkpoint read back and checked against its run's config (read_resume).
struct ResumePoint {
  TrainState state;
  TensorMap tensors;  // the parameters under their names, the moments as adamw.m.NAME, adamw.v.NAME
};

// Whether the run writes a checkpoint after `step`: every cfg.checkpoint_every steps (0: every
// eval_every steps, or every tenth of the steps without periodic evaluations), never after the
// last step (the final evaluation follows).
bool checkpoint_due(const TrainConfig& cfg, int step);

// Writes the checkpoint of `params` (after a step: the moments are complete) to DIR/kResumeFile,
// atomically.
template <class E>
void write_resume(const TrainConfig& cfg, const ParamStore<E>& params, const TrainState& state);

// Sets the parameters and moments of `params` from a checkpoint (a pb::Error naming a missing or
// ill-shaped tensor).
template <class E>
void restore_resume(ParamStore<E>& params, const ResumePoint& point, const std::string& path);

// The checkpoint of the unfinished run in cfg.out, checked: a pb::Error, one line, when the
// directory holds no run, a finished run (result.json), a run of another config (naming the first
// differing key), no checkpoint, or a corrupted one (its XXH3 checksum) or one of another run.
ResumePoint read_resume(const TrainConfig& cfg);

// Keeps the lines of a metrics.jsonl / eval.jsonl whose "step" is at most `step` (rewritten
// atomically; a missing file stays missing). A last line cut short by the interruption is dropped.
void truncate_log(const std::string& path, int step);

}  // namespace pb
