// Lab 6: expert parallelism inside the GPT — the MoE blocks' dispatch over an EP group
// (EpDispatch, on the one step path) and the training run of `mls-gpt train --ep N`.
#include <cstdio>
#include <cstring>
#include <sstream>

#include "mls/common/error.hpp"
#include "mls/common/timer.hpp"
#include "mls/llm/moe_ep.hpp"
#include "mls/llm/train.hpp"
#include "mls/llm/zero.hpp"

namespace mls::llm {

using parallel::Communicator;
using parallel::ReduceOp;

// ---- the dispatch -------------------------------------------------------------------------------

EpDispatch::EpDispatch(const GPTConfig& cfg, Communicator& comm, std::int64_t n_local)
    : cfg_(cfg), comm_(&comm), n_local_(n_local) {
  cfg.validate();
  MLS_CHECK(is_moe(cfg), "EpDispatch: a dense config (moe_experts = 0): nothing to shard");
  MLS_CHECK(cfg.moe_experts % comm.size() == 0, "EpDispatch: moe_experts = ", cfg.moe_experts,
            " is not divisible by the expert-parallel group's ", comm.size(), " ranks");
  MLS_CHECK(n_local >= 1, "EpDispatch: n_local = ", n_local, ", expected >= 1 tokens per rank");
}

namespace {
/// The block view `p` from expert `first` on: the local experts' slices (EpMoe's view).
ParamPtrs local_experts_view(const ParamPtrs& p, std::int64_t first, std::int64_t C) {
  ParamPtrs q = p;
  q.moe_fcw += first * 4 * C * C;
  q.moe_fcb += first * 4 * C;
  q.moe_fcprojw += first * C * 4 * C;
  q.moe_fcprojb += first * C;
  return q;
}
}  // namespace

EpMoe& EpDispatch::block(const ParamPtrs& p) {
  MLS_CHECK(p.moe_router != nullptr, "EpDispatch: not an MoE block's view");
  auto& slot = blocks_[p.moe_router];
  if (!slot) slot = std::make_unique<EpMoe>(cfg_, *comm_, n_local_);
  return *slot;
}

void EpDispatch::forward(const ParamPtrs& p, const float* x, float* out, std::int64_t N, float* loss) {
  MLS_CHECK(N == n_local_, "EpDispatch::forward: ", N, " tokens, expected the ", n_local_,
            " tokens per rank it was built for");
  EpMoe& ep = block(p);
  ep.forward(local_experts_view(p, first_expert(), cfg_.n_embd), x, out);
  loss[0] = static_cast<float>(ep.balance_loss);
  loss[1] = static_cast<float>(ep.z_loss);
  dropped += ep.dropped;
  bytes_sent += ep.bytes_sent;
  exchange_seconds += ep.exchange_seconds;
}

void EpDispatch::backward(const ParamPtrs& p, ParamPtrs& g, const float* dout, float* dx, std::int64_t N,
                          float scale) {
  MLS_CHECK(N == n_local_, "EpDispatch::backward: ", N, " tokens, expected ", n_local_);
  EpMoe& ep = block(p);
  // The MoE losses are the group's: their weight is every rank's share of them, summed.
  Tensor s = Tensor::from_vector(std::vector<double>{static_cast<double>(scale)}, {1});
  comm_->allreduce(s, ReduceOp::Sum);
  const double s0 = ep.exchange_seconds;
  const std::int64_t b0 = ep.bytes_sent;
  ParamPtrs gl = local_experts_view(g, first_expert(), cfg_.n_embd);
  ep.backward(local_experts_view(p, first_expert(), cfg_.n_embd), gl, dout, dx,
              static_cast<float>(s.data<double>()[0]));
  exchange_seconds += ep.exchange_seconds - s0;
  bytes_sent += ep.bytes_sent - b0;
}

// ---- the training run ---------------------------------------------------------------------------

void EpRunOptions::validate(int ranks) const {
  cfg.validate();
  MLS_CHECK(ranks >= 1, "train --ep: ", ranks, " ranks, expected >= 1");
  MLS_CHECK(is_moe(cfg), "train --ep ", ranks, ": a dense model (--moe-experts 0), expected an MoE config "
            "(--moe-experts E with E divisible by ", ranks, ")");
  MLS_CHECK(cfg.moe_experts % ranks == 0, "train --ep ", ranks, ": --moe-experts ", cfg.moe_experts,
            " is not divisible by the expert-parallel group's ", ranks, " ranks");
  MLS_CHECK(batch >= 1, "train --ep: batch = ", batch, ", expected >= 1 rows per rank");
  MLS_CHECK(context > 0 && context <= cfg.block_size, "train --ep: context = ", context,
            ", expected 0 < context <= block_size = ", cfg.block_size);
  MLS_CHECK(steps >= 1, "train --ep: steps = ", steps, ", expected >= 1");
  MLS_CHECK(lr > 0, "train --ep: lr = ", lr, ", expected > 0");
}

EpRunReport run_ep(Communicator& comm, const EpRunOptions& o) {
  const int P = comm.size(), r = comm.rank();
  o.validate(P);
  const GPTConfig& cfg = o.cfg;
  const std::int64_t BT = o.batch * o.context;
  GPTParams params = init_params(cfg, o.seed);
  GPTGrads grads(cfg);
  AdamWState adam(params.size());
  GPTActivations acts(cfg, o.batch, o.context), dacts(cfg, o.batch, o.context);
  std::unique_ptr<EpDispatch> ep;
  if (P > 1) {  // one rank: the plain single-rank MoE (the reference)
    ep = std::make_unique<EpDispatch>(cfg, comm, BT);
    acts.moe_dispatch = ep.get();
  }
  const PassBuffers buf = PassBuffers::keep(acts, &dacts);
  const std::int64_t dense = moe_param_offsets(cfg)[0];  // [0, dense): replicated, summed over ranks
  std::vector<std::int32_t> in(static_cast<std::size_t>(P * BT)), tg(in.size());
  EpRunReport rep;
  rep.ranks = P;
  for (std::int64_t s = 0; s < o.steps; ++s) {
    const std::int64_t sent0 = comm.traffic().total.bytes_sent;
    Timer t;
    zero_batch(cfg, P * o.batch, o.context, o.seed, s, 0, in.data(), tg.data());
    const MicroBatch mb{in.data() + r * BT, tg.data() + r * BT, nullptr, o.batch, o.context};
    const double norm = static_cast<double>(P * BT);  // the global batch's mean
    grads.zero();
    if (ep) ep->reset_counters();
    FlatModel model(cfg, params.views(), grads.views());
    Tensor num = Tensor::from_vector(std::vector<double>{accumulate_gradients(cfg, model, buf, mb, 1, norm)}, {1});
    std::int64_t dropped = 0;
    if (ep) {
      // Data parallel: the dense gradients summed (each rank's is its rows' share of the mean).
      // The router's is already the group's (EpMoe), the experts' complete on their owners.
      Tensor g = Tensor::empty({dense}, DType::Float32);
      std::memcpy(g.data<float>(), grads.data(), sizeof(float) * static_cast<std::size_t>(dense));
      comm.allreduce(g, ReduceOp::Sum);
      std::memcpy(grads.data(), g.data<float>(), sizeof(float) * static_cast<std::size_t>(dense));
      comm.allreduce(num, ReduceOp::Sum);
      dropped = ep->dropped;
    } else {
      for (const MoeBlockStats& b : moe_stats(cfg, acts)) dropped += b.dropped;
    }
    adamw_update(params, grads, adam, o.adam, o.lr);
    rep.losses.push_back(num.data<double>()[0] / norm);
    rep.dropped.push_back(dropped);
    rep.step_s.push_back(t.seconds());
    rep.exchange_s.push_back(ep ? ep->exchange_seconds : 0.0);
    rep.bytes_sent_per_step = comm.traffic().total.bytes_sent - sent0;
  }
  // Every expert from its owner: the others' slices are zero here, so a sum assembles them.
  rep.final_params = params.vec();
  if (P > 1) {
    const auto off = moe_param_offsets(cfg);
    const auto shapes = moe_param_shapes(cfg);
    const std::int64_t end = params.size(), Lm = num_moe_blocks(cfg), E = cfg.moe_experts, El = E / P;
    Tensor x = Tensor::zeros({end - off[1]}, DType::Float32);
    for (int i = 1; i < kNumMoeTensors; ++i) {
      std::int64_t numel = 1;
      for (auto d : shapes[static_cast<std::size_t>(i)]) numel *= d;
      const std::int64_t per = numel / (Lm * E);  // one expert's slice
      for (std::int64_t m = 0; m < Lm; ++m) {
        const std::int64_t at = off[static_cast<std::size_t>(i)] + (m * E + r * El) * per;
        std::memcpy(x.data<float>() + (at - off[1]), params.data() + at, sizeof(float) * static_cast<std::size_t>(El * per));
      }
    }
    comm.allreduce(x, ReduceOp::Sum);
    std::memcpy(rep.final_params.data() + off[1], x.data<float>(), sizeof(float) * static_cast<std::size_t>(end - off[1]));
  }
  return rep;
}

EpRunReport run_ep_simulated(int ranks, const EpRunOptions& opts) {
  opts.validate(ranks);  // before any rank starts
  std::vector<EpRunReport> reps(static_cast<std::size_t>(ranks));
  parallel::run_simulated(ranks, [&](Communicator& c) { reps[static_cast<std::size_t>(c.rank())] = run_ep(c, opts); });
  return reps[0];
}

std::string ep_run_table(const EpRunReport& r) {
  std::ostringstream o;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%5s %12s %8s %10s %12s %8s\n", "step", "loss", "dropped", "step_ms", "exchange_ms",
                "share");
  o << buf;
  for (std::size_t s = 0; s < r.losses.size(); ++s) {
    std::snprintf(buf, sizeof buf, "%5zu %12.6f %8lld %10.3f %12.3f %8.3f\n", s, r.losses[s],
                  static_cast<long long>(r.dropped[s]), 1e3 * r.step_s[s], 1e3 * r.exchange_s[s],
                  r.step_s[s] > 0 ? r.exchange_s[s] / r.step_s[s] : 0.0);
    o << buf;
  }
  return o.str();
}

}  // namespace mls::llm
