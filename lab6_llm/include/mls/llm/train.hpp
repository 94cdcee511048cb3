#pragma once
/// Lab 6: the training step. The Trainer owns the four kinds of state (GPTParams, GPTGrads,
/// AdamWState, GPTActivations) and nothing else, so a checkpoint is exactly {params, optimizer
/// state, data position} and a resumed run repeats the same steps bit for bit.
#include <cstdint>
#include <string>

#include "mls/llm/checkpoint.hpp"
#include "mls/llm/data.hpp"
#include "mls/llm/model.hpp"

namespace mls::llm {

struct TrainOptions {
  std::int64_t batch = 12;    // B
  std::int64_t context = 64;  // T (<= block_size)
  std::int64_t steps = 1000;  // total steps (the cosine schedule ends here)
  std::int64_t warmup = 50;   // linear warmup steps
  double lr = 1e-3, min_lr = 1e-4;
  double grad_clip = 1.0;  // global norm; <= 0: off
  AdamWOptions adamw{};
  /// Throws mls::Error naming the option for values out of range.
  void validate(const GPTConfig& cfg) const;
};

struct StepStats {
  double loss = 0;
  double grad_norm = 0;  // before clipping
  double lr = 0;
};

class Trainer {
 public:
  Trainer(GPTParams params, const TrainOptions& opt);
  /// One step: forward, backward, clip, AdamW at lr_schedule(opt.step). The batch must be
  /// (batch, context).
  /// Hint: lr from lr_schedule(adam.step, ...); grads.zero() before gpt_backward (it
  /// accumulates); clip_grad_norm; adamw_update.
  StepStats step(const Batch& batch);
  /// The same step with the gradients from the autodiff path (lab 2's tape, path (a)): slower,
  /// the same update up to float32 rounding.
  StepStats step_autodiff(const Batch& batch);
  /// Masked mean loss of a batch (any B, T <= block_size), no gradients.
  double eval_loss(const Batch& batch);
  const TrainOptions& options() const { return opt_; }

  GPTParams params;            // the parameters (one flat buffer)
  GPTGrads grads;              // their gradients (same layout)
  AdamWState adam;             // AdamW's moments and step (same layout)
  GPTActivations acts, dacts;  // forward buffers and their gradients for (batch, context)

 private:
  TrainOptions opt_;
};

/// A checkpoint of the trainer's state: its config, `tokenizer` (serialised), the step, the
/// parameters (arrays "wte".."lnfb"), AdamW's moments ("m/...", "v/...") and the counter
/// "data_position".
Checkpoint trainer_checkpoint(const Trainer& tr, const std::string& tokenizer,
                              std::uint64_t data_position);
/// Restores parameters, moments and step from `ck` (its config must equal the trainer's: an
/// mls::Error names the first field that differs). Returns ck's "data_position".
std::uint64_t restore_trainer(Trainer& tr, const Checkpoint& ck);

}  // namespace mls::llm
