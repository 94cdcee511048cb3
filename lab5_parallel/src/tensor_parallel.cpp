// Student file of lab 5: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Tensor parallelism (Megatron-LM): the f/g operators on lab 2's tape, column- and row-parallel
// linears, the parallel MLP and attention blocks, and their unsplit references.
#include "mls/parallel/tensor_parallel.hpp"

#include <cmath>

#include "mls/common/error.hpp"

namespace mls::parallel {

using autodiff::Var;

autodiff::Var copy_to_tp(const autodiff::Var& x, Communicator& tp, TpCounters* counters) {
  // BEGIN SOLUTION
  return autodiff::custom("copy_to_tp", {x}, x.value(),
                    [&tp, counters](const Var& g, const std::vector<bool>& needs) -> std::vector<Var> {
                      if (!needs[0]) return {Var()};
                      Tensor t = g.value().clone();
                      tp.allreduce(t, ReduceOp::Sum);
                      if (counters) ++counters->backward_allreduces;
                      return {Var(t)};
                    });
  // END SOLUTION
}

autodiff::Var reduce_from_tp(const autodiff::Var& x, Communicator& tp, TpCounters* counters) {
  // BEGIN SOLUTION
  Tensor t = x.value().clone();
  tp.allreduce(t, ReduceOp::Sum);
  if (counters) ++counters->forward_allreduces;
  return autodiff::custom("reduce_from_tp", {x}, t,
                    [](const Var& g, const std::vector<bool>&) -> std::vector<Var> { return {g}; });
  // END SOLUTION
}

autodiff::Var column_parallel_linear(const autodiff::Var& x, const autodiff::Var& w, const autodiff::Var& b) {
  MLS_CHECK(x.ndim() >= 1 && w.ndim() == 2 && x.shape().back() == w.shape()[0], "column_parallel_linear: input ",
            shape_str(x.shape()), " does not match the weight shard ", shape_str(w.shape()));
  // BEGIN SOLUTION
  const Var y = autodiff::matmul(x, w);
  return b.defined() ? y + b : y;
  // END SOLUTION
}

autodiff::Var row_parallel_linear(const autodiff::Var& x_shard, const autodiff::Var& w, const autodiff::Var& b, Communicator& tp,
                            TpCounters* counters) {
  MLS_CHECK(x_shard.ndim() >= 1 && w.ndim() == 2 && x_shard.shape().back() == w.shape()[0],
            "row_parallel_linear: input shard ", shape_str(x_shard.shape()), " does not match the weight shard ",
            shape_str(w.shape()));
  // BEGIN SOLUTION
  const Var y = reduce_from_tp(autodiff::matmul(x_shard, w), tp, counters);
  return b.defined() ? y + b : y;
  // END SOLUTION
}

Tensor shard(const Tensor& full, std::int64_t dim, int rank, int parts) {
  MLS_CHECK(full.defined(), "shard: the tensor is undefined");
  dim = normalize_axis(dim, full.ndim(), "shard");
  MLS_CHECK(parts >= 1 && rank >= 0 && rank < parts, "shard: rank ", rank, " of ", parts, " parts");
  const std::int64_t n = full.size(dim);
  MLS_CHECK(n % parts == 0, "shard: dim ", dim, " of shape ", shape_str(full.shape()), " (size ", n,
            ") does not split into ", parts, " equal parts");
  const std::int64_t c = n / parts;
  return full.slice(dim, rank * c, (rank + 1) * c).clone();
}

Tensor unshard(const std::vector<Tensor>& shards, std::int64_t dim) {
  MLS_CHECK(!shards.empty(), "unshard: no shards");
  std::vector<Var> vs;
  for (const Tensor& t : shards) vs.emplace_back(t);
  return autodiff::concat(vs, normalize_axis(dim, shards[0].ndim(), "unshard")).value();
}

autodiff::Var mlp_block(const autodiff::Var& x, const autodiff::Var& w1, const autodiff::Var& b1, const autodiff::Var& w2, const autodiff::Var& b2,
                  const std::string& activation) {
  autodiff::nn::Activation act(activation);
  return autodiff::matmul(act.forward(autodiff::matmul(x, w1) + b1), w2) + b2;
}

ParallelMLP::ParallelMLP(Communicator& tp, const Tensor& w1_full, const Tensor& b1_full, const Tensor& w2_full,
                         const Tensor& b2_full, std::string activation)
    : tp_(&tp), activation_(std::move(activation)) {
  MLS_CHECK(w1_full.ndim() == 2 && w2_full.ndim() == 2 && w1_full.size(1) == w2_full.size(0) &&
                w1_full.size(0) == w2_full.size(1) && b1_full.ndim() == 1 && b1_full.size(0) == w1_full.size(1) &&
                b2_full.ndim() == 1 && b2_full.size(0) == w2_full.size(1),
            "ParallelMLP: weights W1 ", shape_str(w1_full.shape()), ", b1 ", shape_str(b1_full.shape()), ", W2 ",
            shape_str(w2_full.shape()), ", b2 ", shape_str(b2_full.shape()),
            " do not form a block [D, H], [H], [H, D], [D]");
  const int r = tp.rank(), t = tp.size();
  w1 = autodiff::nn::parameter(shard(w1_full, 1, r, t));
  b1 = autodiff::nn::parameter(shard(b1_full, 0, r, t));
  w2 = autodiff::nn::parameter(shard(w2_full, 0, r, t));
  b2 = autodiff::nn::parameter(b2_full.clone());
  autodiff::nn::Activation check(activation_);  // validates the name now
}

autodiff::Var ParallelMLP::forward(const autodiff::Var& x) {
  // BEGIN SOLUTION
  autodiff::nn::Activation act(activation_);
  const Var xr = copy_to_tp(x, *tp_, &counters);
  const Var h = act.forward(column_parallel_linear(xr, w1, b1));
  return row_parallel_linear(h, w2, b2, *tp_, &counters);
  // END SOLUTION
}

std::string ParallelMLP::name() const {
  return "ParallelMLP(D=" + std::to_string(w1.shape()[0]) + ", H/t=" + std::to_string(w1.shape()[1]) +
         ", t=" + std::to_string(tp_->size()) + ")";
}

namespace {
/// [T, T] zeros with a large negative number above the diagonal.
Tensor causal_mask(std::int64_t T, DType dtype) {
  Tensor m = Tensor::zeros({T, T}, DType::Float64);
  for (std::int64_t i = 0; i < T; ++i)
    for (std::int64_t j = i + 1; j < T; ++j) m.set({i, j}, -1e9);
  return m.to(dtype);
}
}  // namespace

autodiff::Var attention_block(const autodiff::Var& x, const autodiff::Var& wq, const autodiff::Var& wk, const autodiff::Var& wv,
                        const autodiff::Var& wo, const autodiff::Var& bo, int heads, bool causal) {
  MLS_CHECK(x.ndim() == 3, "attention_block: x must be [B, T, D], got ", shape_str(x.shape()));
  const std::int64_t D = x.shape()[2], T = x.shape()[1];
  MLS_CHECK(heads >= 1 && D % heads == 0, "attention_block: D = ", D, " does not split into ", heads, " heads");
  const std::int64_t dh = D / heads;
  std::vector<Var> outs;
  for (int h = 0; h < heads; ++h) {
    const Var q = autodiff::matmul(x, autodiff::slice(wq, 1, h * dh, (h + 1) * dh));
    const Var k = autodiff::matmul(x, autodiff::slice(wk, 1, h * dh, (h + 1) * dh));
    const Var v = autodiff::matmul(x, autodiff::slice(wv, 1, h * dh, (h + 1) * dh));
    Var s = autodiff::matmul(q, autodiff::transpose(k)) * (1.0 / std::sqrt(static_cast<double>(dh)));  // [B, T, T]
    if (causal) s = s + Var(causal_mask(T, x.dtype()));
    outs.push_back(autodiff::matmul(autodiff::softmax(s, -1), v));  // [B, T, dh]
  }
  return autodiff::matmul(autodiff::concat(outs, 2), wo) + bo;
}

ParallelAttention::ParallelAttention(Communicator& tp, int heads, const Tensor& wq_full, const Tensor& wk_full,
                                     const Tensor& wv_full, const Tensor& wo_full, const Tensor& bo_full, bool causal)
    : tp_(&tp), heads_(heads), local_heads_(0), causal_(causal) {
  const int t = tp.size(), r = tp.rank();
  MLS_CHECK(wq_full.ndim() == 2 && wq_full.size(0) == wq_full.size(1), "ParallelAttention: wq must be [D, D], got ",
            shape_str(wq_full.shape()));
  const std::int64_t D = wq_full.size(0);
  MLS_CHECK(heads >= 1 && D % heads == 0, "ParallelAttention: D = ", D, " does not split into ", heads, " heads");
  MLS_CHECK(heads % t == 0, "ParallelAttention: ", heads, " heads do not split over ", t, " ranks");
  for (const Tensor* w : {&wk_full, &wv_full, &wo_full})
    MLS_CHECK(w->shape() == wq_full.shape(), "ParallelAttention: every projection must be [", D, ", ", D, "], got ",
              shape_str(w->shape()));
  MLS_CHECK(bo_full.ndim() == 1 && bo_full.size(0) == D, "ParallelAttention: bo must be [", D, "], got ",
            shape_str(bo_full.shape()));
  local_heads_ = heads / t;
  wq = autodiff::nn::parameter(shard(wq_full, 1, r, t));
  wk = autodiff::nn::parameter(shard(wk_full, 1, r, t));
  wv = autodiff::nn::parameter(shard(wv_full, 1, r, t));
  wo = autodiff::nn::parameter(shard(wo_full, 0, r, t));
  bo = autodiff::nn::parameter(bo_full.clone());
}

autodiff::Var ParallelAttention::forward(const autodiff::Var& x) {
  MLS_CHECK(x.ndim() == 3 && x.shape()[2] == wq.shape()[0], "ParallelAttention: x must be [B, T, ",
            wq.shape()[0], "], got ", shape_str(x.shape()));
  // BEGIN SOLUTION
  const std::int64_t B = x.shape()[0], T = x.shape()[1], dl = wq.shape()[1], dh = dl / local_heads_;
  const Var xr = copy_to_tp(x, *tp_, &counters);
  auto heads_of = [&](const Var& w) {  // [B, T, dl] -> [B, hl, T, dh]
    return autodiff::permute(autodiff::reshape(autodiff::matmul(xr, w), {B, T, local_heads_, dh}), {0, 2, 1, 3});
  };
  const Var q = heads_of(wq), k = heads_of(wk), v = heads_of(wv);
  Var s = autodiff::matmul(q, autodiff::transpose(k)) * (1.0 / std::sqrt(static_cast<double>(dh)));  // [B, hl, T, T]
  if (causal_) s = s + Var(causal_mask(T, x.dtype()));
  const Var o = autodiff::reshape(autodiff::permute(autodiff::matmul(autodiff::softmax(s, -1), v), {0, 2, 1, 3}), {B, T, dl});
  return row_parallel_linear(o, wo, bo, *tp_, &counters);
  // END SOLUTION
}

std::string ParallelAttention::name() const {
  return "ParallelAttention(heads=" + std::to_string(heads_) + ", local=" + std::to_string(local_heads_) + ")";
}

}  // namespace mls::parallel
