// Student file of lab 6: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 6, part 2: the memory planner — ZeRO stage × recompute plan × micro-batch under a per-rank
// budget, costed by lab 5's α-β-γ model and the counted FLOPs.
#include "mls/llm/planner.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "mls/common/error.hpp"
#include "mls/common/memory.hpp"
#include "mls/llm/model.hpp"
#include "mls/llm/zero.hpp"

namespace mls::llm {

void PlannerInput::validate() const {
  cfg.validate();
  MLS_CHECK(cfg.vocab_size > 0, "planner: vocab_size = ", cfg.vocab_size, ", expected > 0");
  MLS_CHECK(batch > 0, "planner: batch = ", batch, ", expected > 0");
  MLS_CHECK(context > 0 && context <= cfg.block_size, "planner: context = ", context,
            ", expected 0 < context <= block_size = ", cfg.block_size);
  MLS_CHECK(ranks >= 1, "planner: ranks = ", ranks, ", expected >= 1");
  MLS_CHECK(budget_bytes > 0, "planner: memory budget = ", budget_bytes, " bytes, expected > 0");
  MLS_CHECK(param_bytes > 0 && grad_bytes > 0 && k >= 0, "planner: bytes per parameter ",
            param_bytes, ", gradient ", grad_bytes, ", optimizer ", k, ", expected > 0");
  MLS_CHECK(flops_per_s > 0, "planner: flops_per_s = ", flops_per_s, ", expected > 0");
}

RecomputeKind remat_label(const RematPlan& plan) {
  if (plan == no_remat_plan(plan.n)) return RecomputeKind::None;
  if (plan == sqrt_plan(plan.n)) return RecomputeKind::Sqrt;
  return RecomputeKind::Optimal;
}

std::vector<std::int64_t> micro_batches(std::int64_t batch) {
  MLS_CHECK(batch > 0, "micro_batches: batch = ", batch, ", expected > 0");
  std::vector<std::int64_t> out;
  for (std::int64_t b = batch; b >= 1; --b)
    if (batch % b == 0) out.push_back(b);
  return out;
}

namespace {

[[maybe_unused]] double collective_s(const PlannerInput& in, const char* what, double bytes, double elem_bytes) {
  return parallel::estimate(in.comm, what, "ring", in.ranks, static_cast<std::int64_t>(bytes),
                            std::max(1, static_cast<int>(elem_bytes)))
      .seconds;
}

}  // namespace

PlanCandidate evaluate_candidate(const PlannerInput& in, int stage, std::int64_t micro_batch,
                                 const RematPlan& plan) {
  // BEGIN SOLUTION
  in.validate();
  MLS_CHECK(stage >= 0 && stage <= 3, "evaluate_candidate: ZeRO stage ", stage,
            ", expected 0, 1, 2 or 3");
  MLS_CHECK(micro_batch > 0 && in.batch % micro_batch == 0, "evaluate_candidate: micro-batch ",
            micro_batch, ", expected a divisor of the batch ", in.batch);
  PlanCandidate c;
  c.stage = stage;
  c.micro_batch = micro_batch;
  c.accum = in.batch / micro_batch;
  c.plan = plan;
  c.remat = remat_label(plan);
  const GPTConfig& cfg = in.cfg;
  const double psi = static_cast<double>(num_params(cfg));
  const auto units = zero_units(cfg);
  double largest = 0;
  for (const auto& u : units) largest = std::max(largest, static_cast<double>(u.size));
  c.state_bytes = stage == 3
                      ? zero3_peak_bytes(psi, in.ranks, largest, in.k, in.param_bytes, in.grad_bytes)
                      : zero_memory(stage, psi, in.ranks, in.k, in.param_bytes, in.grad_bytes).total;
  c.act_bytes = static_cast<double>(remat_activation_bytes(cfg, micro_batch, in.context, plan));
  c.total_bytes = c.state_bytes + c.act_bytes;
  c.fits = c.total_bytes <= in.budget_bytes;
  // Compute: the step's training FLOPs, plus every micro-batch's recomputed blocks.
  const double tokens = static_cast<double>(in.batch * in.context);
  c.recompute_flops = static_cast<double>(c.accum) *
                      static_cast<double>(plan.recomputed_layers()) *
                      block_forward_flops(cfg, micro_batch, in.context);
  c.flops = tokens * train_flops_per_token(cfg, in.context) + c.recompute_flops;
  c.compute_s = c.flops / in.flops_per_s;
  // Communication (nothing moves on one rank: estimate returns 0).
  const double gb = psi * in.grad_bytes, pb = psi * in.param_bytes;
  const double A = static_cast<double>(c.accum);
  switch (stage) {
    case 0:
      c.comm_s = collective_s(in, "allreduce", gb, in.grad_bytes);
      break;
    case 1:
      c.comm_s = collective_s(in, "reduce_scatter", gb, in.grad_bytes) +
                 collective_s(in, "allgather", pb, in.param_bytes);
      break;
    case 2:
      c.comm_s = A * collective_s(in, "reduce_scatter", gb, in.grad_bytes) +
                 collective_s(in, "allgather", pb, in.param_bytes);
      break;
    default:
      for (const auto& u : units) {
        const double n = static_cast<double>(u.size);
        c.comm_s += A * (2.0 * collective_s(in, "allgather", n * in.param_bytes, in.param_bytes) +
                         collective_s(in, "reduce_scatter", n * in.grad_bytes, in.grad_bytes));
      }
  }
  c.total_s = c.compute_s + c.comm_s;
  return c;
  // END SOLUTION
}

namespace {

/// The most whole activation bytes a with state + a <= budget, summed as evaluate_candidate
/// sums them: floor(budget - state) can be one byte short once the subtraction rounds, and then
/// a budget equal to a candidate's own footprint would not fit it.
[[maybe_unused]] std::int64_t activation_budget(double state, double budget) {
  const double left = std::min(budget - state, 9.0e18);
  auto a = static_cast<std::int64_t>(std::floor(left));
  if (left < 0x1p52) {  // below 2^52 a byte more or less is representable
    if (state + static_cast<double>(a + 1) <= budget) ++a;
    if (a > 0 && state + static_cast<double>(a) > budget) --a;
  }
  return a;
}

/// a is better than b: cheaper; then the larger micro-batch (faster GEMMs, which the model does
/// not see); then fewer bytes; then the lower stage.
[[maybe_unused]] bool better(const PlanCandidate& a, const PlanCandidate& b) {
  if (a.total_s != b.total_s) return a.total_s < b.total_s;
  if (a.micro_batch != b.micro_batch) return a.micro_batch > b.micro_batch;
  if (a.total_bytes != b.total_bytes) return a.total_bytes < b.total_bytes;
  return a.stage < b.stage;
}

}  // namespace

PlannerResult plan_memory(const PlannerInput& in) {
  // BEGIN SOLUTION
  in.validate();
  PlannerResult r;
  double smallest = std::numeric_limits<double>::infinity();
  bool any = false;
  const std::int64_t L = in.cfg.n_layer;
  for (int stage = 0; stage <= 3; ++stage) {
    bool found = false;
    PlanCandidate best;
    double stage_smallest = std::numeric_limits<double>::infinity();
    for (const std::int64_t mb : micro_batches(in.batch)) {
      // What the states leave for activations; the plan recomputing the fewest blocks in it.
      const PlanCandidate probe = evaluate_candidate(in, stage, mb, no_remat_plan(L));
      const double left = in.budget_bytes - probe.state_bytes;
      // The smallest footprint of this micro-batch (over every k), for the message.
      for (std::int64_t k = in.remat ? 1 : L; k <= L; ++k)
        stage_smallest = std::min(
            stage_smallest, probe.state_bytes + static_cast<double>(remat_activation_bytes(
                                                    in.cfg, mb, in.context, last_segment_plan(L, k))));
      if (left <= 0) continue;
      RematPlan plan = no_remat_plan(L);
      if (in.remat) {
        try {
          plan = gpt_optimal_plan(in.cfg, mb, in.context,
                                  activation_budget(probe.state_bytes, in.budget_bytes));
        } catch (const Error&) {
          continue;  // this micro-batch does not fit with any plan
        }
      }
      const PlanCandidate c = evaluate_candidate(in, stage, mb, plan);
      if (!c.fits) continue;
      if (!found || better(c, best)) best = c;
      found = true;
    }
    smallest = std::min(smallest, stage_smallest);
    std::ostringstream why;
    why << "stage " << stage << ": ";
    if (found) {
      r.per_stage.push_back(best);
      why << "micro-batch " << best.micro_batch << " x " << best.accum << ", remat " << best.remat
          << " " << best.plan.to_string() << ", " << mem::human_bytes(best.total_bytes) << " ("
          << mem::human_bytes(best.state_bytes) << " states + " << mem::human_bytes(best.act_bytes)
          << " activations), " << best.total_s * 1e3 << " ms/step (compute "
          << best.compute_s * 1e3 << " ms, of which recompute "
          << best.recompute_flops / in.flops_per_s * 1e3 << " ms; comm " << best.comm_s * 1e3
          << " ms)";
      if (!any || better(best, r.best)) r.best = best;
      any = true;
    } else {
      why << "does not fit: at least " << mem::human_bytes(stage_smallest) << " (states "
          << mem::human_bytes(evaluate_candidate(in, stage, 1, no_remat_plan(L)).state_bytes)
          << " + the smallest activations: micro-batch 1, "
          << (in.remat ? "one block per segment" : "no remat") << ") > budget "
          << mem::human_bytes(in.budget_bytes);
    }
    r.why.push_back(why.str());
  }
  MLS_CHECK(any, "plan_memory: no ZeRO stage, recompute plan and micro-batch fits a budget of ",
            mem::human_bytes(in.budget_bytes), " per rank (", in.ranks,
            " ranks); the smallest needs ", mem::human_bytes(smallest),
            ", expected a larger budget, more ranks or a smaller model");
  return r;
  // END SOLUTION
}

std::string explain(const PlannerInput& in, const PlannerResult& r) {
  std::ostringstream os;
  const PlanCandidate& b = r.best;
  os << "model: " << in.cfg.n_layer << " layers, " << in.cfg.n_head << " heads, " << in.cfg.n_embd
     << " wide, vocab " << in.cfg.vocab_size << ", " << num_params(in.cfg) << " parameters\n";
  os << "budget: " << mem::human_bytes(in.budget_bytes) << " per rank, " << in.ranks << " ranks, batch "
     << in.batch << " x " << in.context << " tokens per rank, bytes per parameter "
     << in.param_bytes << " + " << in.grad_bytes << " + " << in.k << "\n";
  os << "choice: ZeRO stage " << b.stage << ", remat " << b.remat << " " << b.plan.to_string()
     << ", micro-batch " << b.micro_batch << " (" << b.accum << " accumulation steps)\n";
  os << "memory: " << mem::human_bytes(b.total_bytes) << " = " << mem::human_bytes(b.state_bytes)
     << " model states + " << mem::human_bytes(b.act_bytes) << " activations\n";
  os << "time:   " << b.total_s * 1e3 << " ms/step modelled = compute " << b.compute_s * 1e3
     << " ms (" << b.flops << " FLOPs, recompute " << b.recompute_flops << ") + comm "
     << b.comm_s * 1e3 << " ms\n";
  os << "why (the best of each stage; the cheapest that fits wins):\n";
  for (const auto& w : r.why) os << "  " << w << "\n";
  return os.str();
}

std::string train_command(const PlannerInput& in, const PlanCandidate& c, const std::string& model_args) {
  MLS_CHECK(c.stage >= 0 && c.stage <= 3 && c.micro_batch >= 1 && c.accum >= 1 &&
                c.micro_batch * c.accum == in.batch,
            "train_command: a candidate of stage ", c.stage, ", micro-batch ", c.micro_batch, " x accum ",
            c.accum, ", expected stage 0..3 and micro-batch x accum = the batch ", in.batch);
  const PrecisionBytes f32 = precision_bytes(Precision::FP32), b16 = precision_bytes(Precision::BF16);
  auto is = [&](const PrecisionBytes& p) {
    return in.param_bytes == p.param && in.grad_bytes == p.grad && in.k == p.k;
  };
  MLS_CHECK(is(f32) || is(b16), "train_command: bytes per parameter ", in.param_bytes, " + ",
            in.grad_bytes, " + ", in.k, ", expected fp32's 4 + 4 + 8 or bf16's 2 + 2 + 12 (mls-gpt "
            "train --precision)");
  std::ostringstream os;
  os << "mls-gpt train --zero " << c.stage << " --ranks " << in.ranks << " --precision "
     << (is(b16) ? "bf16" : "fp32") << " " << model_args << " --zero-vocab " << in.cfg.vocab_size
     << " --context " << in.context << " --batch " << in.batch << " --accum " << c.accum
     << " --remat " << c.remat;
  if (c.remat == "optimal")
    os << " --remat-budget "
       << static_cast<std::int64_t>(std::min(in.budget_bytes - c.state_bytes, 9.0e18));
  return os.str();
}

double parse_bytes(const std::string& text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    fail("parse_bytes: '", text, "' is not a size, expected e.g. 512MiB, 1.5GiB, 800MB or 1e9");
  }
  std::string unit = text.substr(used);
  const std::pair<const char*, double> units[] = {
      {"", 1},         {"B", 1},          {"KiB", 1024.0},   {"MiB", 1048576.0},
      {"GiB", 1073741824.0}, {"KB", 1e3}, {"MB", 1e6},       {"GB", 1e9}};
  for (const auto& [name, mult] : units)
    if (unit == name) {
      MLS_CHECK(v > 0 && std::isfinite(v), "parse_bytes: '", text, "' is not a positive size");
      return v * mult;
    }
  fail("parse_bytes: '", text, "' has unit '", unit, "', expected B, KiB, MiB, GiB, KB, MB or GB");
}

GPTConfig family_config(std::int64_t L, std::int64_t context, std::int64_t vocab) {
  MLS_CHECK(L >= 1, "family_config: L = ", L, ", expected >= 1");
  GPTConfig c;
  c.n_layer = L;
  c.n_head = L;
  c.n_embd = 64 * L;
  c.block_size = context;
  c.vocab_size = vocab;
  c.validate();
  return c;
}

std::int64_t largest_fitting(const PlannerInput& in, int stage, std::int64_t max_layers) {
  MLS_CHECK(stage >= 0 && stage <= 3, "largest_fitting: ZeRO stage ", stage,
            ", expected 0, 1, 2 or 3");
  std::int64_t best = 0;
  for (std::int64_t L = 1; L <= max_layers; ++L) {
    PlannerInput q = in;
    q.cfg = family_config(L, in.context, in.cfg.vocab_size);
    try {
      const PlannerResult r = plan_memory(q);
      bool fits = false;
      for (const auto& c : r.per_stage) fits = fits || c.stage == stage;
      if (!fits) break;  // the family only grows
      best = L;
    } catch (const Error&) {
      break;  // nothing fits at this size, nor at any larger one
    }
  }
  return best;
}

}  // namespace mls::llm
