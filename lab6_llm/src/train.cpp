// Student file of lab 6: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 6: the training step.
#include "mls/llm/train.hpp"

#include "mls/common/error.hpp"
#include "mls/llm/autodiff_model.hpp"

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
}

Trainer::Trainer(GPTParams p, const TrainOptions& opt)
    : params(std::move(p)), grads(params.config()), adam(params.size()), opt_(opt) {
  opt.validate(params.config());
  acts = GPTActivations(params.config(), opt.batch, opt.context);
  dacts = GPTActivations(params.config(), opt.batch, opt.context);
}

StepStats Trainer::step(const Batch& b) {
  // BEGIN SOLUTION
  MLS_CHECK(b.B == opt_.batch && b.T == opt_.context, "Trainer::step: batch (", b.B, ", ", b.T,
            "), expected (", opt_.batch, ", ", opt_.context, ")");
  StepStats s;
  s.lr = lr_schedule(adam.step, opt_.warmup, opt_.steps, opt_.lr, opt_.min_lr);
  s.loss = gpt_forward(params, acts, b.inputs.data(), b.targets.data(), b.mask.data(), b.B, b.T);
  grads.zero();
  gpt_backward(params, grads, acts, dacts, b.inputs.data(), b.targets.data(), b.mask.data());
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
