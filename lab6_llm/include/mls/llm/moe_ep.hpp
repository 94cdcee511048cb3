#pragma once
/// Lab 6: expert parallelism (EP) — one MoE MLP (moe.hpp) with its E experts sharded over the P
/// ranks of an expert-parallel group (lab 5's Communicator): rank r holds experts
/// [r·E/P, (r+1)·E/P) and its own N_r tokens; the router is replicated.
///
///   forward:  route locally (top-k) -> capacity decided globally (an allgather of each rank's
///             choices per (k, expert): the choice-major order of the single-rank MoE over the
///             tokens of rank 0, then rank 1, ...) -> DISPATCH: all_to_allv of the kept tokens'
///             rows to their experts' owners -> local expert GEMMs -> COMBINE: the reverse
///             all_to_allv -> out[t] = Σ_k g_k y_k
///   backward: mirrors it: dy rows to the owners (all_to_allv), local expert backward, dx rows
///             back (the reverse all_to_allv); the router's gradient allreduced over the group.
///
/// On the same tokens (rank r's = rows [Σ_{s<r} N_s, ...) of the single-rank batch) it computes
/// what moe_mlp_forward / moe_mlp_backward compute (the MoE part, after ln2): the same routing,
/// drops and expert rows; equal up to float32 rounding (the router's GEMM and its gradient's sum
/// run over other row blocks), tested over 10 SGD steps.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mls/llm/moe.hpp"
#include "mls/llm/model.hpp"
#include "mls/parallel/comm.hpp"

namespace mls::llm {

/// Student: one exchange of expert parallelism. `send` holds rows of `row` elements (1-D, rows
/// consecutive), send_rows[s] of them for rank s, in rank order. When `recv_rows` is empty, the
/// receive counts are learnt first (an all_to_all of the counts: rank r learns send_rows[r] of
/// every rank) and stored in it; otherwise it gives them (the combine, which reverses a
/// dispatch). Returns the received rows, rank 0's first. Hint: counts in elements = rows · row;
/// Communicator::all_to_all on an int64 [P, 1] tensor, then all_to_allv.
Tensor ep_exchange(parallel::Communicator& comm, const Tensor& send, std::int64_t row,
                   const std::vector<std::int64_t>& send_rows, std::vector<std::int64_t>& recv_rows);

/// One MoE MLP under expert parallelism on `comm` (the EP group). cfg gives E, K, F and the loss
/// coefficients (moe_experts % comm.size() == 0, else an mls::Error naming both); n_local
/// tokens per rank (the same on every rank).
class EpMoe {
 public:
  EpMoe(const GPTConfig& cfg, parallel::Communicator& comm, std::int64_t n_local);
  std::int64_t local_experts() const { return El_; }
  std::int64_t first_expert() const { return e0_; }
  /// out (N_l, C) = the MoE of x (N_l, C), this rank's tokens. `p`: the router (E, C) in
  /// p.moe_router and this rank's El experts in p.moe_fc* (El-expert slices).
  void forward(const ParamPtrs& p, const float* x, float* out);
  /// From dout (N_l, C): dx (N_l, C) written; accumulates into g's router (allreduced over the
  /// group: every rank gets the whole gradient) and its local experts' gradients. `scale`
  /// multiplies the balancing and z-losses' gradients (1: their whole weight).
  void backward(const ParamPtrs& p, ParamPtrs& g, const float* dout, float* dx, float scale = 1.f);

  // After forward, over the whole group: the balancing and z-losses (coefficients applied), the
  // kept rows of this rank's experts, the dropped choices.
  double balance_loss = 0, z_loss = 0;
  std::vector<std::int32_t> local_count;  // (El)
  std::int64_t dropped = 0;
  /// The traffic of the last forward's and backward's exchanges (bytes this rank sent), and the
  /// wall seconds spent in them (ep_exchange: the dispatch and combine all_to_allv, their counts).
  std::int64_t bytes_sent = 0;
  double exchange_seconds = 0;

 private:
  GPTConfig cfg_;
  parallel::Communicator* comm_;
  std::int64_t P_, r_, N_, Ntot_, E_, K_, C_, El_, e0_, cap_;
  std::vector<float> x_, probs_, lse_, gate_, frac_;
  std::vector<std::int32_t> expert_, send_index_;  // send_index_: (t·K + k) of each sent row
  std::vector<std::int64_t> send_rows_, recv_rows_, recv_slot_;  // recv_slot_: local row of each received row
  std::vector<float> xin_, h_, hg_, y_, yback_;  // expert rows (El·cap) and the combined rows
  std::vector<std::int64_t> choice_row_;         // (N·K): index into yback_, -1 dropped
};

// ---- expert parallelism inside the GPT: `mls-gpt train --moe-experts E --ep N` -----------------

/// The MoeDispatch of expert parallelism: every MoE block of the GPT runs as an EpMoe on `comm`
/// (one EpMoe per block, found by the address of the block's router). Set
/// GPTActivations::moe_dispatch to it and the one step path (model_forward / model_backward)
/// routes each MoE block's tokens over the group: rank r computes experts [r·E/P, (r+1)·E/P) of
/// every MoE block, on the tokens of every rank routed to them. The views it gets are the full
/// model's (every expert's slice exists on every rank; only the local experts' are read and
/// written). The MoE losses' weight in backward is the group's: the ranks' `scale`s summed (one
/// scalar allreduce per block).
class EpDispatch final : public MoeDispatch {
 public:
  EpDispatch(const GPTConfig& cfg, parallel::Communicator& comm, std::int64_t n_local);
  void forward(const ParamPtrs& p, const float* x, float* out, std::int64_t N, float* loss) override;
  void backward(const ParamPtrs& p, ParamPtrs& g, const float* dout, float* dx, std::int64_t N,
                float scale) override;
  std::int64_t local_experts() const { return cfg_.moe_experts / comm_->size(); }
  std::int64_t first_expert() const { return comm_->rank() * local_experts(); }
  /// Since reset_counters(): bytes this rank sent and seconds it spent in the exchanges
  /// (ep_exchange), choices dropped (the group's, summed over the blocks' forwards).
  std::int64_t bytes_sent = 0, dropped = 0;
  double exchange_seconds = 0;
  void reset_counters() { bytes_sent = 0, dropped = 0, exchange_seconds = 0; }

 private:
  EpMoe& block(const ParamPtrs& p);
  GPTConfig cfg_;
  parallel::Communicator* comm_;
  std::int64_t n_local_;
  std::map<const float*, std::unique_ptr<EpMoe>> blocks_;
};

/// A training run of the GPT with expert parallelism x data parallelism: the EP group is the
/// whole communicator (the usual deployment: EP group = DP group). Rank r trains on its own
/// micro-batch, rows [r·batch, (r+1)·batch) of the step's global batch zero_batch(cfg, P·batch,
/// context, seed, step, 0); the dense parameters' gradients are summed over the ranks (one
/// allreduce of the dense part, the router's already summed by EpMoe), the experts' are complete
/// on their owners; then AdamW at a constant lr on every rank. On one rank it is the plain
/// single-rank step (no dispatch): the reference.
struct EpRunOptions {
  GPTConfig cfg{};
  std::int64_t batch = 4;    // rows per rank per step
  std::int64_t context = 16;
  std::int64_t steps = 10;
  double lr = 1e-3;
  std::uint64_t seed = 1337;
  AdamWOptions adam{};
  /// An mls::Error naming the value for: a dense config, experts not divisible by `ranks`,
  /// ranks < 1, batch < 1, context outside (0, block_size], steps < 1, lr <= 0.
  void validate(int ranks) const;
};
struct EpRunReport {
  int ranks = 1;
  std::vector<double> losses;            // per step: the cross-entropy over the global batch
  std::vector<std::int64_t> dropped;     // per step: choices dropped, summed over the MoE blocks
  std::vector<double> step_s;            // per step: wall seconds (this rank's)
  std::vector<double> exchange_s;        // per step: seconds in ep_exchange (this rank's)
  std::int64_t bytes_sent_per_step = 0;  // this rank, the last step (exchanges and reductions)
  std::vector<float> final_params;       // every expert gathered from its owner
};
/// Collective on `comm`: every rank returns the same losses, drops and final parameters.
EpRunReport run_ep(parallel::Communicator& comm, const EpRunOptions& opts);
/// run_ep on `ranks` simulated ranks (opts.validate(ranks) first).
EpRunReport run_ep_simulated(int ranks, const EpRunOptions& opts);
/// The table `mls-gpt train --ep` prints: per step loss, dropped choices, step time and the
/// exchanges' share of it.
std::string ep_run_table(const EpRunReport& r);

}  // namespace mls::llm
