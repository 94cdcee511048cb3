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
#include <vector>

#include "mls/llm/moe.hpp"
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

}  // namespace mls::llm
