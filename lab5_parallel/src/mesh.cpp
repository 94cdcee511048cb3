// 3-D parallelism: the mesh of sub-communicators and the toy stack trained on it.
#include "mls/parallel/mesh.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/parallel/data_parallel.hpp"
#include "mls/parallel/tensor_parallel.hpp"

namespace mls::parallel {

namespace {
int checked_size(Communicator& world, int dp, int tp, int pp) {
  MLS_CHECK(dp >= 1 && tp >= 1 && pp >= 1 && dp * tp * pp == world.size(), "Mesh3D: dp x tp x pp = ", dp, " x ",
            tp, " x ", pp, " does not match the world of ", world.size(), " ranks");
  return world.rank();
}
}  // namespace

Mesh3D::Mesh3D(Communicator& world, int dp, int tp, int pp)
    : dp_(dp), tp_(tp), pp_(pp), coord_(coord_of(checked_size(world, dp, tp, pp), tp, pp)),
      dp_comm_(world.split(coord_.s * tp + coord_.t, coord_.d)),
      tp_comm_(world.split(coord_.d * pp + coord_.s, coord_.t)),
      pp_comm_(world.split(coord_.d * tp + coord_.t, coord_.s)) {}

std::array<Tensor, 4> stack_block_weights(const StackConfig& c, int b) {
  Rng rng(c.seed, "stack-block-" + std::to_string(b));
  const double sd = 1.0 / std::sqrt(static_cast<double>(c.d_model)), sh = 1.0 / std::sqrt(static_cast<double>(c.d_hidden));
  return {Tensor::randn({c.d_model, c.d_hidden}, rng, 0.0, sd, c.dtype),
          Tensor::randn({c.d_hidden}, rng, 0.0, 0.1, c.dtype),
          Tensor::randn({c.d_hidden, c.d_model}, rng, 0.0, sh, c.dtype),
          Tensor::randn({c.d_model}, rng, 0.0, 0.1, c.dtype)};
}

std::array<Tensor, 2> stack_batch(const StackConfig& c, int step) {
  Rng data(c.seed, "stack-data-" + std::to_string(step));
  Rng target(c.seed, "stack-target");
  const Tensor x = Tensor::randn({c.batch, c.d_model}, data, 0.0, 1.0, c.dtype);
  const Tensor a = Tensor::randn({c.d_model, c.d_model}, target, 0.0, 1.0 / std::sqrt(static_cast<double>(c.d_model)), c.dtype);
  const Tensor y = mls::tanh(autodiff::matmul(autodiff::Var(x), autodiff::Var(a)).value());
  return {x, y};
}

void add_traffic(Traffic& into, const Traffic& from) {
  auto add = [](Traffic::Counts& a, const Traffic::Counts& b) {
    a.messages_sent += b.messages_sent, a.bytes_sent += b.bytes_sent;
    a.messages_recv += b.messages_recv, a.bytes_recv += b.bytes_recv;
    a.steps += b.steps;
  };
  add(into.total, from.total);
  for (const auto& [op, c] : from.by_op) add(into.by_op[op], c);
}

StackResult train_stack_single(const StackConfig& c) {
  MLS_CHECK(c.blocks >= 1 && c.steps >= 0, "train_stack_single: blocks = ", c.blocks, ", steps = ", c.steps);
  std::vector<std::array<autodiff::nn::Parameter, 4>> ps;
  std::vector<autodiff::nn::Parameter> all;
  for (int b = 0; b < c.blocks; ++b) {
    const auto w = stack_block_weights(c, b);
    std::array<autodiff::nn::Parameter, 4> p;
    for (std::size_t k = 0; k < 4; ++k) {
      p[k] = autodiff::nn::parameter(w[k].clone());
      all.push_back(p[k]);
    }
    ps.push_back(p);
  }
  autodiff::nn::SGD opt(all, c.lr);
  StackResult r;
  for (int step = 0; step < c.steps; ++step) {
    const auto [x, y] = stack_batch(c, step);
    opt.zero_grad();
    autodiff::Var h(x);
    for (const auto& p : ps) h = h + mlp_block(h, p[0], p[1], p[2], p[3]);
    const autodiff::Var loss = autodiff::mse_loss(h, autodiff::Var(y));
    loss.backward();
    opt.step();
    r.losses.push_back(loss.value().item());
  }
  for (const auto& p : ps) r.params.push_back({p[0].value(), p[1].value(), p[2].value(), p[3].value()});
  return r;
}

namespace {
/// One pipeline stage of the 3-D stack: x + ParallelMLP(x).
class ResidualStage : public autodiff::nn::Module {
 public:
  explicit ResidualStage(std::unique_ptr<ParallelMLP> mlp) : mlp_(std::move(mlp)) {}
  autodiff::Var forward(const autodiff::Var& x) override { return x + mlp_->forward(x); }
  std::vector<autodiff::nn::Parameter> parameters() override { return mlp_->parameters(); }
  std::string name() const override { return "Residual(" + mlp_->name() + ")"; }
  /// forward() with the parameters seen through ddp.hook(i) (in parameters() order): the MLP's
  /// members are swapped for the hooked views for this one forward and restored after it.
  autodiff::Var forward_hooked(const autodiff::Var& x, DataParallel& ddp) {
    autodiff::nn::Parameter* ps[] = {&mlp_->w1, &mlp_->b1, &mlp_->w2, &mlp_->b2};
    std::array<autodiff::nn::Parameter, 4> saved;
    for (std::size_t i = 0; i < 4; ++i) saved[i] = *ps[i];
    struct Restore {
      autodiff::nn::Parameter** ps;
      std::array<autodiff::nn::Parameter, 4>& saved;
      ~Restore() {
        for (std::size_t i = 0; i < 4; ++i) *ps[i] = saved[i];
      }
    } restore{ps, saved};
    for (std::size_t i = 0; i < 4; ++i) *ps[i] = ddp.hook(i);
    return forward(x);
  }

 private:
  std::unique_ptr<ParallelMLP> mlp_;
};
}  // namespace

namespace {
/// The divisors of n, as "1, 2, 4, 8 or 16" (the values a knob that must divide n may take; the
/// first 12, then "...").
std::string divisors_text(std::int64_t n) {
  std::vector<std::int64_t> ds;
  bool more = false;
  for (std::int64_t k = 1; k <= n; ++k)
    if (n % k == 0) {
      if (ds.size() == 12) {
        more = true;
        break;
      }
      ds.push_back(k);
    }
  std::string out;
  for (std::size_t i = 0; i < ds.size(); ++i)
    out += (i == 0 ? "" : i + 1 == ds.size() && !more ? " or " : ", ") + std::to_string(ds[i]);
  return more ? out + ", ..." : out;
}
}  // namespace

void validate_stack_3d(const StackConfig& c, int dp, int tp, int pp, const StackNames& n) {
  const std::string& op = n.op;
  for (const auto& [name, v] : {std::pair<const std::string&, std::int64_t>{n.dp, dp}, {n.tp, tp}, {n.pp, pp},
                                {n.d_model, c.d_model}, {n.d_hidden, c.d_hidden}, {n.batch, c.batch},
                                {n.micro, c.micro_batches}, {n.bucket_bytes, c.bucket_bytes}})
    MLS_CHECK(v >= 1, op, ": ", name, " ", v, " must be >= 1");
  MLS_CHECK(c.steps >= 0, op, ": ", n.steps, " ", c.steps, " must be >= 0");
  MLS_CHECK(std::isfinite(c.lr), op, ": ", n.lr, " ", c.lr, " must be a finite number");
  MLS_CHECK(c.d_hidden % tp == 0, op, ": ", n.tp, " ", tp, " must divide ", n.d_hidden, " ", c.d_hidden,
            " (the tensor-parallel ranks split the MLP's hidden units equally): tensor-parallel sizes ",
            divisors_text(c.d_hidden), " fit, or a ", n.d_hidden, " that is a multiple of ", tp);
  MLS_CHECK(c.batch % dp == 0, op, ": ", n.batch, " ", c.batch, " must split evenly over ", n.dp, " ", dp,
            " data-parallel replicas: use a ", n.batch, " that is a multiple of ", dp);
  const std::int64_t rows = c.batch / dp;
  MLS_CHECK(rows % c.micro_batches == 0, op, ": ", n.micro, " ", c.micro_batches, " must divide the ", rows,
            " rows of each data-parallel replica (", n.batch, " ", c.batch, " / dp ", dp,
            ") into equal micro-batches: ", n.micro, " ", divisors_text(rows), " fits");
  MLS_CHECK(c.blocks == pp, op, ": the stack has ", c.blocks, " blocks, expected one per stage (", n.pp, " ", pp, ")");
}

StackResult train_stack_3d(Communicator& world, const StackConfig& c, int dp, int tp, int pp, PipelineStats* stats) {
  validate_stack_3d(c, dp, tp, pp);
  Mesh3D mesh(world, dp, tp, pp);
  const MeshCoord me = mesh.coord();
  const auto w = stack_block_weights(c, me.s);
  ResidualStage stage(std::make_unique<ParallelMLP>(mesh.tp(), w[0], w[1], w[2], w[3]));
  DataParallelOptions dopt;
  dopt.bucket_bytes = c.bucket_bytes;
  dopt.overlap = c.overlap;
  DataParallel ddp(mesh.dp(), stage.parameters(), dopt);
  autodiff::nn::SGD opt(stage.parameters(), c.lr);
  PipelineOptions po;
  po.kind = c.schedule;
  po.micro_batches = c.micro_batches;
  po.dtype = c.dtype;
  if (c.overlap) po.last_forward = [&](const autodiff::Var& in) { return stage.forward_hooked(in, ddp); };
  StackResult r;
  for (int step = 0; step < c.steps; ++step) {
    const auto [x, y] = stack_batch(c, step);
    opt.zero_grad();
    const PipelineStats st = pipeline_step(mesh.pp(), stage, shard_batch(x, me.d, dp), shard_batch(y, me.d, dp), po);
    ddp.allreduce_gradients();
    opt.step();
    Tensor l = Tensor::scalar(st.loss, DType::Float64);
    mesh.dp().allreduce(l, ReduceOp::Avg);
    r.losses.push_back(l.item());
    if (stats) *stats = st;
  }
  const auto ps = stage.parameters();
  r.params.push_back({ps[0].value(), ps[1].value(), ps[2].value(), ps[3].value()});
  for (Communicator* cm : {&mesh.dp(), &mesh.tp(), &mesh.pp()}) add_traffic(r.traffic, cm->traffic());
  r.overlapped_buckets = ddp.overlapped_buckets();
  r.modelled_seconds = std::max({mesh.dp().modelled_seconds(), mesh.tp().modelled_seconds(), mesh.pp().modelled_seconds()});
  return r;
}

}  // namespace mls::parallel
