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
  /// Gradient accumulation: micro-batches per step. The (batch, context) batch runs as `accum`
  /// micro-batches of batch / accum rows (forward + backward each, the gradients summed), then
  /// one clip and one AdamW update: the same step up to float32 rounding, with the activations
  /// of one micro-batch. Must divide batch.
  std::int64_t accum = 1;
  /// The attention kernel of the forward and backward passes (mls-gpt train --attention): lab 6's
  /// naive one or lab 4's tiled one (model.hpp's Attention). The same step path either way.
  Attention attention = Attention::Naive;
  AdamWOptions adamw{};
  /// Rows of one micro-batch: batch / accum.
  std::int64_t micro_batch() const { return accum > 0 ? batch / accum : batch; }
  /// Throws mls::Error naming the option for values out of range (accum: >= 1 and a divisor of
  /// batch).
  void validate(const GPTConfig& cfg) const;
};

/// Micro-batch k of `accum` of a (B, T) batch: its rows [k·B/accum, (k+1)·B/accum), as pointers
/// into the batch (no copy; mask null where the batch has none). accum must divide B.
/// (MicroBatch, the pointer view of a batch, is model.hpp's.)
MicroBatch micro_batch(const Batch& b, std::int64_t accum, std::int64_t k);
/// The same for a batch already given as pointers.
MicroBatch micro_batch(const MicroBatch& whole, std::int64_t accum, std::int64_t k);
/// A Batch as pointers (checks that its vectors have B*T entries; mask null when empty).
MicroBatch batch_view(const Batch& b);

/// Student: the gradient half of every training step — the plain Trainer's, the recompute
/// path's and ZeroTrainer's. For each of the `accum` micro-batches of `whole` in order
/// (micro_batch(whole, accum, k)): acc.begin_micro_batch(k), model_forward, add its
/// masked_loss_sum(buf.head().losses, mask, ...) to the running sum, model_backward(..., norm).
/// `norm` divides every micro-batch's loss: the whole batch's mask sum, so that the micro-batches'
/// gradients add up to the whole batch's mean-loss gradient (each row gets exactly the value the
/// whole batch gives it). Returns the sum of mask·loss over the whole batch, in row order.
/// buf is sized for one micro-batch (B / accum, T).
double accumulate_gradients(const GPTConfig& cfg, ModelAccess& acc, const PassBuffers& buf,
                            const MicroBatch& whole, std::int64_t accum, double norm);

struct StepStats {
  double loss = 0;
  double grad_norm = 0;  // before clipping
  double lr = 0;
};

class RematActivations;  // remat.hpp

class Trainer {
 public:
  Trainer(GPTParams params, const TrainOptions& opt);
  /// One step: the gradient of the whole batch's masked mean loss sum(mask·loss) / sum(mask)
  /// from opt.accum micro-batches on acts / dacts of (micro_batch(), context) (every activation
  /// kept), then clip and AdamW once at lr_schedule(adam.step). The batch must be (batch,
  /// context). Returns that loss (the whole batch's). Both step()s run step_on.
  StepStats step(const Batch& batch);
  /// The same step with the blocks under ra's recompute plan (PassBuffers::recompute(ra); ra is
  /// built for one micro-batch): the same result bit for bit, less activation memory.
  StepStats step(const Batch& batch, RematActivations& ra);
  /// The same step with the gradients from the autodiff path (lab 2's tape, path (a)): slower,
  /// the same update up to float32 rounding. The tape takes the whole batch at once (accum is
  /// not used).
  StepStats step_autodiff(const Batch& batch);
  /// Masked mean loss of a batch (any B, T <= block_size), no gradients.
  double eval_loss(const Batch& batch);
  const TrainOptions& options() const { return opt_; }

  GPTParams params;            // the parameters (one flat buffer)
  GPTGrads grads;              // their gradients (same layout)
  AdamWState adam;             // AdamW's moments and step (same layout)
  GPTActivations acts, dacts;  // forward buffers and their gradients for (micro_batch, context)

 private:
  /// Student: the one step on `buf`'s activations. A batch that is not (batch, context) is an
  /// mls::Error "Trainer::step: batch (B, T), expected (batch, context)".
  /// Hint: lr from lr_schedule(adam.step, ...); norm = mask_sum over the whole batch;
  /// grads.zero() once (the backward accumulates); a FlatModel over params and grads;
  /// accumulate_gradients(..., buf, batch_view(batch), opt_.accum, norm); loss = sum / norm (0
  /// when norm is 0); clip_grad_norm; adamw_update.
  StepStats step_on(const Batch& batch, const PassBuffers& buf);
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
