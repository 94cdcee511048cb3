#pragma once
/// Lab 5: tensor parallelism, Megatron-LM style, on lab 2's eager tape.
///
/// An MLP block y = act(x W1 + b1) W2 + b2 over t ranks: W1 [D, H] is split by columns (rank r
/// holds W1[:, r H/t : (r+1) H/t] and that slice of b1), W2 [H, D] by rows (the same H slice), so
/// rank r computes a partial sum act(x W1_r + b1_r) W2_r [.., D] with no communication in between,
/// and one allreduce adds the partial sums. Attention splits the same way by heads: Wq, Wk, Wv by
/// columns (whole heads per rank), Wo by rows.
///
/// The two conjugate operators make the tape do the communication (Megatron's f and g):
///   f = copy_to_tp:     forward identity,   backward allreduce(sum) of the gradient;
///   g = reduce_from_tp: forward allreduce,  backward identity.
/// A block is f -> column-parallel -> act -> row-parallel -> g: one allreduce in forward (g) and
/// one in backward (f). Both are lab 2 custom ops (mls::autodiff::custom) and count their allreduces.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mls/autodiff/nn.hpp"
#include "mls/parallel/comm.hpp"

namespace mls::parallel {

/// Allreduces issued by the f/g operators of a block (forward: g, backward: f).
struct TpCounters {
  std::int64_t forward_allreduces = 0, backward_allreduces = 0;
};

/// Megatron's f: returns x unchanged; on the tape its backward allreduces (sums) the gradient over
/// `tp` (every rank's partial gradient of its replicated input). Counts in counters->backward_allreduces.
/// Hint: autodiff::custom(name, {x}, value, backward) with a backward that clones g, allreduces it.
autodiff::Var copy_to_tp(const autodiff::Var& x, Communicator& tp, TpCounters* counters = nullptr);
/// Megatron's g: returns the allreduce (sum over `tp`) of x; its backward passes the gradient
/// through unchanged (each rank's partial sum contributed with weight one).
/// Counts in counters->forward_allreduces.
autodiff::Var reduce_from_tp(const autodiff::Var& x, Communicator& tp, TpCounters* counters = nullptr);

/// The column-parallel linear of rank r: x [.., D] (replicated, already passed through f) times the
/// column shard w [D, H/t], plus the bias shard b [H/t] (undefined: none). No communication.
autodiff::Var column_parallel_linear(const autodiff::Var& x, const autodiff::Var& w, const autodiff::Var& b);
/// The row-parallel linear of rank r: x_shard [.., H/t] times the row shard w [H/t, D] gives a
/// partial sum, reduced over `tp` by g; then the full bias b [D] (replicated; undefined: none) is
/// added once. Exactly one allreduce.
autodiff::Var row_parallel_linear(const autodiff::Var& x_shard, const autodiff::Var& w, const autodiff::Var& b, Communicator& tp,
                            TpCounters* counters = nullptr);

/// Chunk `rank` of `parts` equal chunks of `full` along `dim` (a compact copy). Errors when the
/// size does not divide.
Tensor shard(const Tensor& full, std::int64_t dim, int rank, int parts);
/// Concatenates shards along `dim` (the inverse of shard over every rank).
Tensor unshard(const std::vector<Tensor>& shards, std::int64_t dim);

/// The unsplit MLP block act(x w1 + b1) w2 + b2 (the reference): w1 [D, H], w2 [H, D].
autodiff::Var mlp_block(const autodiff::Var& x, const autodiff::Var& w1, const autodiff::Var& b1, const autodiff::Var& w2, const autodiff::Var& b2,
                  const std::string& activation = "gelu");

/// The tensor-parallel MLP block on rank tp.rank() of tp.size().
class ParallelMLP : public autodiff::nn::Module {
 public:
  /// Keeps this rank's shards of the full weights (identical on every rank): w1 [D, H], b1 [H],
  /// w2 [H, D], b2 [D]. H must divide by tp.size().
  ParallelMLP(Communicator& tp, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
              std::string activation = "gelu");
  /// f -> column-parallel (W1, b1) -> activation -> row-parallel (W2) -> g -> + b2.
  autodiff::Var forward(const autodiff::Var& x) override;
  /// {w1 shard, b1 shard, w2 shard, b2}.
  std::vector<autodiff::nn::Parameter> parameters() override { return {w1, b1, w2, b2}; }
  std::string name() const override;
  /// The dim each parameter is sharded along (-1: replicated), in parameters() order.
  static constexpr std::array<std::int64_t, 4> kShardDims{1, 0, 0, -1};
  autodiff::nn::Parameter w1, b1, w2, b2;
  TpCounters counters;

 private:
  Communicator* tp_;
  std::string activation_;
};

/// The unsplit multi-head self-attention (the reference): x [B, T, D], wq/wk/wv/wo [D, D], bo [D],
/// `heads` heads of size D / heads, softmax(q k^T / sqrt(dh)) v per head (causal: masked above the
/// diagonal), heads concatenated, times wo, plus bo. Computed head by head.
autodiff::Var attention_block(const autodiff::Var& x, const autodiff::Var& wq, const autodiff::Var& wk, const autodiff::Var& wv,
                        const autodiff::Var& wo, const autodiff::Var& bo, int heads, bool causal = true);

/// Tensor-parallel attention: rank r owns heads r H/t .. (r+1) H/t - 1 (the matching columns of
/// wq, wk, wv and rows of wo); bo is replicated. f -> local heads -> row-parallel wo -> g -> + bo.
class ParallelAttention : public autodiff::nn::Module {
 public:
  ParallelAttention(Communicator& tp, int heads, const Tensor& wq, const Tensor& wk, const Tensor& wv,
                    const Tensor& wo, const Tensor& bo, bool causal = true);
  /// x [B, T, D] -> [B, T, D].
  autodiff::Var forward(const autodiff::Var& x) override;
  std::vector<autodiff::nn::Parameter> parameters() override { return {wq, wk, wv, wo, bo}; }
  std::string name() const override;
  static constexpr std::array<std::int64_t, 5> kShardDims{1, 1, 1, 0, -1};
  autodiff::nn::Parameter wq, wk, wv, wo, bo;
  TpCounters counters;

 private:
  Communicator* tp_;
  int heads_, local_heads_;
  bool causal_;
};

}  // namespace mls::parallel
