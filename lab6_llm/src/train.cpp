// Student file of lab 6: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 6: the training step.
#include "mls/llm/train.hpp"

#include "mls/common/error.hpp"
#include "mls/llm/autodiff_model.hpp"
#include "mls/llm/remat.hpp"

namespace mls::llm {

void TrainOptions::validate(const GPTConfig& cfg) const {
  MLS_CHECK(batch > 0, "train: batch = ", batch, ", expected > 0");
  MLS_CHECK(context > 0 && context <= cfg.block_size, "train: context = ", context,
            ", expected 0 < context <= block_size = ", cfg.block_size);
  MLS_CHECK(steps >= 0, "train: steps = ", steps, ", expected >= 0");
  MLS_CHECK(warmup >= 0, "train: warmup = ", warmup, ", expected >= 0");
  MLS_CHECK(lr > 0 && min_lr >= 0 && min_lr <= lr, "train: lr = ", lr, ", min_lr = ", min_lr,
            ", expected 0 <= min_lr <= lr and lr > 0");
  MLS_CHECK(adamw.beta1 >= 0 && adamw.beta1 < 1 && adamw.beta2 >= 0 && adamw.beta2 < 1,
            "train: beta1 = ", adamw.beta1, ", beta2 = ", adamw.beta2, ", expected in [0, 1)");
  MLS_CHECK(adamw.weight_decay >= 0, "train: weight_decay = ", adamw.weight_decay,
            ", expected >= 0");
  MLS_CHECK(accum >= 1, "train: accum = ", accum, ", expected >= 1 micro-batches per step");
  MLS_CHECK(batch % accum == 0, "train: accum = ", accum, " does not divide batch = ", batch,
            ", expected a divisor of the batch (micro-batch = batch / accum)");
}

MicroBatch batch_view(const Batch& b) {
  MLS_CHECK(b.inputs.size() == static_cast<std::size_t>(b.B * b.T) && b.targets.size() == b.inputs.size() &&
                (b.mask.empty() || b.mask.size() == b.inputs.size()),
            "micro_batch: a batch of (", b.B, ", ", b.T, ") with ", b.inputs.size(), " inputs, ",
            b.targets.size(), " targets and ", b.mask.size(), " mask values, expected B*T = ", b.B * b.T);
  return MicroBatch{b.inputs.data(), b.targets.data(), b.mask.empty() ? nullptr : b.mask.data(),
                    b.B, b.T};
}

MicroBatch micro_batch(const MicroBatch& whole, std::int64_t accum, std::int64_t k) {
  MLS_CHECK(accum >= 1 && whole.B % accum == 0, "micro_batch: accum = ", accum,
            ", expected a divisor of the batch's B = ", whole.B);
  MLS_CHECK(k >= 0 && k < accum, "micro_batch: k = ", k, ", expected 0 <= k < accum = ", accum);
  const std::int64_t rows = whole.B / accum, off = k * rows * whole.T;
  MicroBatch m;
  m.inputs = whole.inputs + off;
  m.targets = whole.targets + off;
  m.mask = whole.mask ? whole.mask + off : nullptr;
  m.B = rows;
  m.T = whole.T;
  return m;
}

MicroBatch micro_batch(const Batch& b, std::int64_t accum, std::int64_t k) {
  MLS_CHECK(accum >= 1 && b.B % accum == 0, "micro_batch: accum = ", accum,
            ", expected a divisor of the batch's B = ", b.B);
  MLS_CHECK(k >= 0 && k < accum, "micro_batch: k = ", k, ", expected 0 <= k < accum = ", accum);
  return micro_batch(batch_view(b), accum, k);
}

double accumulate_gradients(const GPTConfig& cfg, ModelAccess& acc, const PassBuffers& buf,
                            const MicroBatch& whole, std::int64_t accum, double norm) {
  // BEGIN SOLUTION
  double num = 0.0;
  for (std::int64_t k = 0; k < accum; ++k) {
    const MicroBatch m = micro_batch(whole, accum, k);
    acc.begin_micro_batch(k);
    model_forward(cfg, acc, buf, m);
    num = masked_loss_sum(buf.head().losses, m.mask, m.B * m.T, num);
    model_backward(cfg, acc, buf, m, norm);
  }
  return num;
  // END SOLUTION
}

Trainer::Trainer(GPTParams p, const TrainOptions& opt)
    : params(std::move(p)), grads(params.config()), adam(params.size()), opt_(opt) {
  opt.validate(params.config());
  acts = GPTActivations(params.config(), opt.micro_batch(), opt.context, opt.attention);
  dacts = GPTActivations(params.config(), opt.micro_batch(), opt.context, opt.attention);
}

StepStats Trainer::step(const Batch& b) { return step_on(b, PassBuffers::keep(acts, &dacts)); }

StepStats Trainer::step(const Batch& b, RematActivations& ra) {
  MLS_CHECK(ra.B == opt_.micro_batch() && ra.T == opt_.context, "Trainer::step: activations for (",
            ra.B, ", ", ra.T, "), expected the micro-batch (", opt_.micro_batch(), ", ", opt_.context,
            ") = batch ", opt_.batch, " / accum ", opt_.accum);
  return step_on(b, PassBuffers::recompute(ra));
}

StepStats Trainer::step_on(const Batch& b, const PassBuffers& buf) {
  // BEGIN SOLUTION
  MLS_CHECK(b.B == opt_.batch && b.T == opt_.context, "Trainer::step: batch (", b.B, ", ", b.T,
            "), expected (", opt_.batch, ", ", opt_.context, ")");
  StepStats s;
  s.lr = lr_schedule(adam.step, opt_.warmup, opt_.steps, opt_.lr, opt_.min_lr);
  // Every micro-batch divides by the whole batch's count of targets: the sum of their gradients
  // is the gradient of the whole batch's mean loss (each row gets exactly its accum-1 value).
  const MicroBatch whole = batch_view(b);
  const double norm = mask_sum(whole.mask, b.B * b.T);
  grads.zero();
  const GPTConfig& cfg = params.config();
  FlatModel model(cfg, params.views(), grads.views());
  const double num = accumulate_gradients(cfg, model, buf, whole, opt_.accum, norm);
  s.loss = norm > 0 ? num / norm : 0.0;
  s.grad_norm = clip_grad_norm(grads, opt_.grad_clip);
  adamw_update(params, grads, adam, opt_.adamw, s.lr);
  return s;
  // END SOLUTION
}

StepStats Trainer::step_autodiff(const Batch& b) {
  MLS_CHECK(b.B == opt_.batch && b.T == opt_.context, "Trainer::step_autodiff: batch (", b.B, ", ",
            b.T, "), expected (", opt_.batch, ", ", opt_.context, ")");
  StepStats s;
  s.lr = lr_schedule(adam.step, opt_.warmup, opt_.steps, opt_.lr, opt_.min_lr);
  auto leaves = tape::to_leaves(params, DType::Float32);
  mls::autodiff::Var loss = tape::gpt_loss(params.config(), leaves, tape::ids_tensor(b.inputs, b.B, b.T),
                                     tape::ids_tensor(b.targets, b.B, b.T),
                                     tape::mask_tensor(b.mask, b.B, b.T, DType::Float32));
  loss.backward();
  s.loss = loss.value().item();
  grads = tape::grads_of(params.config(), leaves);
  s.grad_norm = clip_grad_norm(grads, opt_.grad_clip);
  adamw_update(params, grads, adam, opt_.adamw, s.lr);
  return s;
}

double Trainer::eval_loss(const Batch& b) {
  GPTActivations a(params.config(), b.B, b.T);
  return gpt_forward(params, a, b.inputs.data(), b.targets.data(), b.mask.data(), b.B, b.T);
}

Checkpoint trainer_checkpoint(const Trainer& tr, const std::string& tokenizer,
                              std::uint64_t data_position) {
  Checkpoint ck;
  ck.config = tr.params.config();
  ck.tokenizer = tokenizer;
  ck.step = tr.adam.step;
  ck.counters["data_position"] = data_position;
  add_params(ck, "", tr.params.vec());
  add_params(ck, "m/", tr.adam.m);
  add_params(ck, "v/", tr.adam.v);
  return ck;
}

std::uint64_t restore_trainer(Trainer& tr, const Checkpoint& ck) {
  check_resume_compatible(ck.config, tr.params.config());
  tr.params.vec() = get_params(ck, "");
  tr.adam.m = get_params(ck, "m/");
  tr.adam.v = get_params(ck, "v/");
  tr.adam.step = ck.step;
  return ck.counter("data_position");
}

}  // namespace mls::llm
