#pragma once
/// Lab 6, part 2, beyond the slides: the memory planner. Given a per-rank memory budget, the
/// model and the data-parallel setup, pick the cheapest (ZeRO stage, recompute plan, micro-batch)
/// that fits, and say why.
///
/// Memory per rank = the model states of zero.hpp (zero_memory; stage 3 adds the largest gathered
/// unit) + the fused path's activations for one micro-batch (remat_activation_bytes).
/// Time per step (per rank), with A = batch / micro_batch accumulation steps:
///   compute  = (training FLOPs of `batch` sequences + A · recomputed blocks' forward FLOPs) / flops_per_s
///   comm     = lab 5's α-β-γ model (parallel::estimate, ring algorithms) of what the stage sends:
///     stage 0: one allreduce of the gradients per step
///     stage 1: one reduce-scatter of the gradients + one all-gather of the parameters per step
///     stage 2: A reduce-scatters of the gradients (they are partitioned, so every micro-batch's
///              gradients leave at once) + one all-gather of the parameters per step
///     stage 3: per micro-batch, per unit: two all-gathers of its parameters (forward, backward)
///              and one reduce-scatter of its gradients
/// For each (stage, micro-batch), the best recompute plan is the one with the fewest recomputed
/// blocks that fits what the states leave (gpt_optimal_plan); the cheapest over all of them wins
/// (ties: the larger micro-batch, then fewer bytes, then the lower stage).
#include <cstdint>
#include <string>
#include <vector>

#include "mls/llm/config.hpp"
#include "mls/llm/remat.hpp"
#include "mls/parallel/cost.hpp"

namespace mls::llm {

struct PlannerInput {
  GPTConfig cfg;               // vocab_size set
  std::int64_t batch = 8;      // sequences per rank per optimizer step
  std::int64_t context = 64;   // T
  int ranks = 1;               // data-parallel ranks
  double budget_bytes = 0;     // per rank
  double param_bytes = 4, grad_bytes = 4, k = 8;  // fp32 with Adam (bf16 mixed: 2, 2, 12)
  double flops_per_s = 20e9;   // sustained FLOP/s of one rank
  parallel::CostModel comm{};  // α, β, γ
  bool remat = true;           // false: keep every activation (plan "none" only)
  /// Throws mls::Error naming the field when out of range.
  void validate() const;
};

/// One candidate, its bytes and its modelled time.
struct PlanCandidate {
  int stage = 0;
  std::int64_t micro_batch = 1, accum = 1;
  RematPlan plan;
  RecomputeKind remat;  // none, sqrt or optimal (a plan that is neither of the first two)
  double state_bytes = 0, act_bytes = 0, total_bytes = 0;
  double flops = 0, recompute_flops = 0;
  double compute_s = 0, comm_s = 0, total_s = 0;
  bool fits = false;
};

/// The bytes and time of one candidate (fits = total <= budget).
PlanCandidate evaluate_candidate(const PlannerInput& in, int stage, std::int64_t micro_batch,
                                 const RematPlan& plan);
/// "none" / "sqrt" / "optimal" for a plan of L layers.
RecomputeKind remat_label(const RematPlan& plan);
/// Micro-batch sizes: the divisors of batch, largest first.
std::vector<std::int64_t> micro_batches(std::int64_t batch);

struct PlannerResult {
  PlanCandidate best;
  std::vector<PlanCandidate> per_stage;  // the best of each stage that fits (absent: none fits)
  std::vector<std::string> why;          // one line per stage: its best, or why nothing fits
};
/// The cheapest candidate that fits. Throws mls::Error naming the budget and the smallest
/// footprint of any candidate when nothing fits.
PlannerResult plan_memory(const PlannerInput& in);
/// The planner's answer as text: the input, the choice, and a line per stage.
std::string explain(const PlannerInput& in, const PlannerResult& r);

/// The `mls-gpt train` command line that runs candidate `c` of `in` on simulated ranks:
/// `mls-gpt train --zero <stage> --ranks <N> --precision <fp32|bf16> <model_args> --zero-vocab <V>
/// --context <T> --batch <in.batch> --accum <c.accum> --remat <none|sqrt|optimal>` (+ for
/// "optimal" `--remat-budget <bytes>`: what plan_memory gave gpt_optimal_plan, the budget less
/// the states, so the trainer builds the same plan). --batch is the batch per rank per step, run
/// as --accum micro-batches of c.micro_batch rows. `model_args` name in.cfg's shape (e.g.
/// "--config nano"). The bytes per parameter must be fp32's (4, 4, 8) or bf16's (2, 2, 12):
/// others have no --precision (an mls::Error).
std::string train_command(const PlannerInput& in, const PlanCandidate& c, const std::string& model_args);

/// Parses "512MiB", "1.5GiB", "800MB", "1e9" (bytes). Throws mls::Error naming the text.
double parse_bytes(const std::string& text);

/// The model family of `mls-gpt plan --largest`: L layers of width C = 64·L with L heads
/// (GPT-2's aspect: 12 layers of 768), block `context`, vocabulary `vocab`.
GPTConfig family_config(std::int64_t L, std::int64_t context, std::int64_t vocab);
/// The deepest member of the family (L <= max_layers) that fits `in` at ZeRO `stage` (any
/// recompute plan, any micro-batch); 0 when none does. in.cfg is ignored.
std::int64_t largest_fitting(const PlannerInput& in, int stage, std::int64_t max_layers = 64);

}  // namespace mls::llm
