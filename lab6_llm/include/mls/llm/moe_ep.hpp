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
#include "mls/llm/data.hpp"
#include "mls/llm/model.hpp"
#include "mls/llm/remat.hpp"
#include "mls/llm/report.hpp"
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
/// GPTActivations::moe_dispatch to it and the one step path (model_forward / model_backward, every
/// activation kept or under a recompute plan, any number of micro-batches) routes each MoE block's
/// tokens over the group: rank r computes experts [r·E/P, (r+1)·E/P) of every MoE block, on the
/// tokens of every rank routed to them. The views it gets are either a sharded config's
/// (sharded(cfg, P, r): the block's expert tensors hold the local experts only, as `mls-gpt train
/// --ep` allocates them) or, for cfg unsharded, the whole model's (only the local experts' slices
/// are read and written). The MoE losses' weight in backward is the group's: the ranks' `scale`s
/// summed (one scalar allreduce per block).
class EpDispatch final : public MoeDispatch {
 public:
  EpDispatch(const GPTConfig& cfg, parallel::Communicator& comm, std::int64_t n_local);
  void forward(const ParamPtrs& p, const float* x, float* out, std::int64_t N, float* loss) override;
  void backward(const ParamPtrs& p, ParamPtrs& g, const float* dout, float* dx, std::int64_t N,
                float scale) override;
  std::int64_t local_experts() const { return cfg_.moe_experts / comm_->size(); }
  std::int64_t first_expert() const { return comm_->rank() * local_experts(); }
  /// Since reset_counters(): bytes this rank sent and seconds it spent in the exchanges
  /// (ep_exchange; a recomputed block's forward counts again: it exchanges again).
  std::int64_t bytes_sent = 0;
  double exchange_seconds = 0;
  void reset_counters() { bytes_sent = 0, exchange_seconds = 0; }
  /// Collective on the group: the routing of every MoE block's last forward (block order), as
  /// moe_stats gives it on one rank over the group's tokens: rows kept per expert (each owner's
  /// counts gathered), choices, drops and the losses. A recomputed forward routes the same.
  std::vector<MoeBlockStats> stats();

 private:
  EpMoe& block(const ParamPtrs& p);
  /// The expert of a block view's first expert slice: this rank's first for an unsharded config.
  std::int64_t view_first() const { return cfg_.moe_shards == 1 ? first_expert() : 0; }
  GPTConfig cfg_;
  parallel::Communicator* comm_;
  std::int64_t n_local_;
  std::map<const float*, std::unique_ptr<EpMoe>> blocks_;  // by router address: block order
};

// ---- a sharded model's buffers (parameters, gradients, AdamW moments) ---------------------------

/// The part of the whole model's flat buffer `full` (num_params(unsharded(local))) that the
/// sharded layout `local` holds: everything but the experts, and its experts of every block.
std::vector<float> shard_experts(const GPTConfig& local, const std::vector<float>& full);
/// Collective on the EP group (comm.size() == local.moe_shards, rank = moe_shard): the whole
/// model's flat buffer from every rank's sharded one (the replicated part taken from this rank's).
std::vector<float> gather_experts(parallel::Communicator& comm, const GPTConfig& local,
                                  const std::vector<float>& mine);

/// A training run of the GPT with expert parallelism x data parallelism: the EP group is the
/// whole communicator (the usual deployment: EP group = DP group). Every rank allocates the
/// sharded model sharded(cfg, P, r): the replicated part (embeddings, attention, dense MLPs, the
/// routers) and its own E / P experts per MoE block, their gradients and their AdamW moments
/// only. Step s's global batch is P·batch rows (zero_batch(cfg, P·batch, context, seed, s, 0), or
/// TextData::next_train of `text`); with `accum` micro-batches of b = batch / accum rows, rank r's
/// micro-batch k is global rows [(k·P + r)·b, (k·P + r + 1)·b), so micro-batch k of the group is
/// micro-batch k of one rank over the global batch. The dense parameters' gradients are summed
/// over the ranks (one allreduce of the dense part, the router's already summed by EpMoe), the
/// experts' are complete on their owners; then AdamW at a constant lr on every rank. Under a
/// recompute plan (remat) the blocks run as the single-rank path runs them (the recomputed MoE
/// blocks exchange again). On one rank it is the plain single-rank step (no dispatch): the reference.
struct EpRunOptions {
  GPTConfig cfg{};            // the whole model (unsharded)
  std::int64_t batch = 4;     // rows per rank per step
  std::int64_t context = 16;
  std::int64_t steps = 10;   // the total (a resumed run continues to it)
  std::int64_t accum = 1;     // micro-batches per step (divides batch)
  double lr = 1e-3;
  std::uint64_t seed = 1337;
  AdamWOptions adam{};
  /// bf16 mixed precision (`--precision bf16`, as ZeRO's): the step computes with the parameters
  /// rounded to bf16 (held in fp32 buffers: this CPU multiplies in fp32), the gradient is rounded
  /// to bf16 (once per step, and again after the dense allreduce) and AdamW updates fp32 master
  /// weights, which final_params and the checkpoint hold.
  bool bf16 = false;
  RecomputeKind remat{};          // none | sqrt | optimal (gpt_plan over one micro-batch)
  std::int64_t remat_budget = 0;  // optimal's activation bytes (0: sqrt's)
  /// A text corpus to train on (`train --ep --data`); null: the synthetic stream. Its tokenizer's
  /// vocabulary is cfg.vocab_size; `tokenizer` (Tokenizer::serialize) goes into the checkpoint.
  std::shared_ptr<const TextData> text;
  std::string tokenizer;
  /// Continue from this checkpoint (the whole model: parameters, AdamW moments, step and the data
  /// position; every rank reads it and keeps its own experts), e.g. one a single-rank run saved:
  /// steps [its step, steps) run. `init_from`: its parameters only, from step 0.
  std::string resume, init_from;
  /// After the last step, rank 0 writes the whole model here (parameters and AdamW moments
  /// gathered from their owners, config unsharded): a single-rank run loads it.
  std::string save;
  /// An mls::Error naming the value for: a dense config, experts not divisible by `ranks`,
  /// ranks < 1, batch < 1, accum not dividing batch, context outside (0, block_size], steps < 1,
  /// lr <= 0, a text whose vocabulary is not cfg.vocab_size.
  void validate(int ranks) const;
};
struct EpRunReport {
  int ranks = 1;
  std::int64_t first_step = 0;           // the step the run started at (a resumed run: the checkpoint's)
  std::vector<double> losses;            // per step run: the cross-entropy over the global batch
  std::vector<std::int64_t> dropped;     // per step: choices dropped, summed over the MoE blocks
  std::vector<MoeRow> moe;               // per step: the group's expert utilisation (report.hpp)
  std::vector<double> step_s;            // per step: wall seconds (this rank's)
  std::vector<double> exchange_s;        // per step: seconds in ep_exchange (this rank's)
  std::int64_t bytes_sent_per_step = 0;  // this rank, the last step (exchanges and reductions)
  std::int64_t param_floats = 0;         // parameters this rank holds (num_params of its layout)
  std::int64_t expert_floats = 0;        // ... of which its experts' (the four expert tensors)
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
