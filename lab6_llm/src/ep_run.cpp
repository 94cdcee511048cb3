// Lab 6: expert parallelism inside the GPT — the MoE blocks' dispatch over an EP group
// (EpDispatch, on the one step path) and the training run of `mls-gpt train --ep N`.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "mls/common/error.hpp"
#include "mls/common/timer.hpp"
#include "mls/llm/checkpoint.hpp"
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
  MLS_CHECK(cfg.moe_shards == 1 || (cfg.moe_shards == comm.size() && cfg.moe_shard == comm.rank()),
            "EpDispatch: a config of expert shard ", cfg.moe_shard, " of ", cfg.moe_shards, " on rank ",
            comm.rank(), " of ", comm.size(), ", expected shard = rank of the group's size (or unsharded)");
}

namespace {
/// The block view `p` from expert `first` on: the local experts' slices (EpMoe's view). A sharded
/// config's view holds them only: first is 0.
ParamPtrs local_experts_view(const ParamPtrs& p, std::int64_t first, std::int64_t C) {
  ParamPtrs q = p;
  if (first == 0) return q;
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
  ep.forward(local_experts_view(p, view_first(), cfg_.n_embd), x, out);
  loss[0] = static_cast<float>(ep.balance_loss);
  loss[1] = static_cast<float>(ep.z_loss);
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
  ParamPtrs gl = local_experts_view(g, view_first(), cfg_.n_embd);
  ep.backward(local_experts_view(p, view_first(), cfg_.n_embd), gl, dout, dx,
              static_cast<float>(s.data<double>()[0]));
  exchange_seconds += ep.exchange_seconds - s0;
  bytes_sent += ep.bytes_sent - b0;
}

std::vector<MoeBlockStats> EpDispatch::stats() {
  const std::int64_t El = local_experts(), nb = static_cast<std::int64_t>(blocks_.size());
  std::vector<std::int64_t> mine;  // (blocks, El): the rows this rank's experts kept
  for (const auto& [router, ep] : blocks_) mine.insert(mine.end(), ep->local_count.begin(), ep->local_count.end());
  const Tensor all = comm_->allgather(Tensor::from_vector(mine, {nb * El}));  // [P, blocks·El]
  std::vector<MoeBlockStats> out;
  std::int64_t b = 0;
  for (const auto& [router, ep] : blocks_) {
    MoeBlockStats s;
    s.layer = moe_block_layer(cfg_, b);
    for (std::int64_t q = 0; q < comm_->size(); ++q)
      for (std::int64_t e = 0; e < El; ++e) s.tokens.push_back(all.data<std::int64_t>()[q * nb * El + b * El + e]);
    s.choices = n_local_ * comm_->size() * cfg_.moe_top_k;
    s.dropped = ep->dropped;
    s.balance_loss = ep->balance_loss;
    s.z_loss = ep->z_loss;
    out.push_back(std::move(s));
    ++b;
  }
  return out;
}

// ---- a sharded model's buffers --------------------------------------------------------------------

namespace {
/// Calls f(full_at, local_at, n) for every run of `n` floats the sharded layout `local` holds,
/// in order: the replicated prefix (the 16 tensors and the routers), then each expert tensor's
/// local experts of every block.
template <typename F>
void for_each_shard_run(const GPTConfig& local, F&& f) {
  const GPTConfig whole = unsharded(local);
  const auto fo = moe_param_offsets(whole), lo = moe_param_offsets(local);
  const auto fs = moe_param_shapes(whole);
  f(std::int64_t{0}, std::int64_t{0}, fo[kMoeFcw]);  // same offsets up to the first expert tensor
  const std::int64_t Lm = num_moe_blocks(whole), E = whole.moe_experts, El = moe_local_experts(local),
                     e0 = local.moe_shard * El;
  for (int i = kMoeFcw; i < kNumMoeTensors; ++i) {
    std::int64_t numel = 1;
    for (auto d : fs[static_cast<std::size_t>(i)]) numel *= d;
    const std::int64_t per = numel / (Lm * E);  // one expert's slice
    for (std::int64_t m = 0; m < Lm; ++m)
      f(fo[static_cast<std::size_t>(i)] + (m * E + e0) * per, lo[static_cast<std::size_t>(i)] + m * El * per, El * per);
  }
}
}  // namespace

std::vector<float> shard_experts(const GPTConfig& local, const std::vector<float>& full) {
  MLS_CHECK(static_cast<std::int64_t>(full.size()) == num_params(unsharded(local)), "shard_experts: ",
            full.size(), " values, the whole model has ", num_params(unsharded(local)));
  std::vector<float> out(static_cast<std::size_t>(num_params(local)));
  for_each_shard_run(local, [&](std::int64_t f, std::int64_t l, std::int64_t n) {
    std::copy(full.begin() + f, full.begin() + f + n, out.begin() + l);
  });
  return out;
}

std::vector<float> gather_experts(Communicator& comm, const GPTConfig& local, const std::vector<float>& mine) {
  MLS_CHECK(comm.size() == local.moe_shards && comm.rank() == local.moe_shard, "gather_experts: shard ",
            local.moe_shard, " of ", local.moe_shards, " on rank ", comm.rank(), " of ", comm.size(),
            ", expected shard = rank of the group's size");
  MLS_CHECK(static_cast<std::int64_t>(mine.size()) == num_params(local), "gather_experts: ", mine.size(),
            " values, the shard has ", num_params(local));
  const std::int64_t n = num_params(local), rep = moe_param_offsets(local)[kMoeFcw];
  Tensor t = Tensor::from_vector(std::vector<float>(mine.begin() + rep, mine.end()), {n - rep});
  const Tensor all = comm.allgather(t);  // [P, n - rep]: every rank's experts
  std::vector<float> full(static_cast<std::size_t>(num_params(unsharded(local))));
  std::copy(mine.begin(), mine.begin() + rep, full.begin());
  for (std::int64_t q = 0; q < comm.size(); ++q) {
    const GPTConfig lq = sharded(unsharded(local), local.moe_shards, q);
    const float* src = all.data<float>() + q * (n - rep);  // rank q's experts, from offset rep on
    for_each_shard_run(lq, [&](std::int64_t f, std::int64_t l, std::int64_t k) {
      if (l >= rep) std::copy(src + (l - rep), src + (l - rep) + k, full.begin() + f);
    });
  }
  return full;
}

// ---- the training run ---------------------------------------------------------------------------

void EpRunOptions::validate(int ranks) const {
  cfg.validate();
  MLS_CHECK(ranks >= 1, "train --ep: ", ranks, " ranks, expected >= 1");
  MLS_CHECK(is_moe(cfg), "train --ep ", ranks, ": a dense model (--moe-experts 0), expected an MoE config "
            "(--moe-experts E with E divisible by ", ranks, ")");
  MLS_CHECK(cfg.moe_shards == 1, "train --ep ", ranks, ": a config of expert shard ", cfg.moe_shard, " of ",
            cfg.moe_shards, ", expected the whole model (the run shards it)");
  MLS_CHECK(cfg.moe_experts % ranks == 0, "train --ep ", ranks, ": --moe-experts ", cfg.moe_experts,
            " is not divisible by the expert-parallel group's ", ranks, " ranks");
  MLS_CHECK(batch >= 1, "train --ep: batch = ", batch, ", expected >= 1 rows per rank");
  MLS_CHECK(accum >= 1 && batch % accum == 0, "train --ep: accum = ", accum, " with batch = ", batch,
            ", expected accum >= 1 dividing the rows per rank");
  MLS_CHECK(context > 0 && context <= cfg.block_size, "train --ep: context = ", context,
            ", expected 0 < context <= block_size = ", cfg.block_size);
  MLS_CHECK(steps >= 1, "train --ep: steps = ", steps, ", expected >= 1");
  MLS_CHECK(lr > 0, "train --ep: lr = ", lr, ", expected > 0");
  MLS_CHECK(resume.empty() || init_from.empty(), "train --ep: --resume ", resume, " and --init-from ", init_from,
            ", expected one of them (resume continues a run, init-from starts from its weights)");
  if (text) {
    std::int32_t top = 0;
    for (auto t : text->train_tokens()) top = std::max(top, t);
    for (auto t : text->val_tokens()) top = std::max(top, t);
    MLS_CHECK(top < cfg.vocab_size, "train --ep --data: token ", top, " in the text, the model's vocab_size is ",
              cfg.vocab_size, ", expected the tokenizer's vocabulary");
  }
  MLS_CHECK(remat_budget >= 0, "train --ep: remat budget ", remat_budget, " bytes, expected >= 0");
}

namespace {
/// Step s's global batch (P·batch rows): the synthetic stream or the text's next train batch.
void global_batch(const EpRunOptions& o, TextData* text, std::int64_t rows, std::int64_t s, std::int32_t* in,
                  std::int32_t* tg) {
  if (!text) return zero_batch(o.cfg, rows, o.context, o.seed, s, 0, in, tg);
  const Batch b = text->next_train(rows, o.context);
  std::copy(b.inputs.begin(), b.inputs.end(), in);
  std::copy(b.targets.begin(), b.targets.end(), tg);
}
}  // namespace

EpRunReport run_ep(Communicator& comm, const EpRunOptions& o) {
  const int P = comm.size(), r = comm.rank();
  o.validate(P);
  mem::RankScope rank_scope(r);  // the memory tracker counts this rank's buffers as its own
  // The whole model on one rank, this rank's shard of it on several: its own experts only.
  const GPTConfig cfg = P > 1 ? sharded(o.cfg, P, r) : o.cfg;
  const std::int64_t b = o.batch / o.accum, bt = b * o.context, BT = o.batch * o.context;
  std::unique_ptr<TextData> text;
  if (o.text) {
    MLS_CHECK(o.text->block_size() >= o.context, "train --ep --data: the text's block size ",
              o.text->block_size(), " < context ", o.context);
    text = std::make_unique<TextData>(*o.text);  // this rank's copy of the stream
  }
  GPTParams params = init_params(cfg, o.seed);
  GPTGrads grads(cfg);
  AdamWState adam(params.size());
  const std::string& from = o.resume.empty() ? o.init_from : o.resume;
  if (!from.empty()) {  // the whole model's checkpoint: this rank keeps its experts
    const std::string op = std::string("train --ep ") + (o.resume.empty() ? "--init-from " : "--resume ") + from;
    const Checkpoint ck = load_checkpoint(from);
    check_moe_compatible(op, ck.config, o.cfg);
    check_resume_compatible(unsharded(ck.config), o.cfg);
    auto mine = [&](const char* prefix) {
      std::vector<float> full = get_params(ck, prefix);
      return P > 1 ? shard_experts(cfg, full) : full;
    };
    params.vec() = mine("");
    if (!o.resume.empty()) {  // continue: the moments, the step and the data stream's position
      adam.m = mine("m/");
      adam.v = mine("v/");
      adam.step = ck.step;
      MLS_CHECK(adam.step < o.steps, op, ": the checkpoint is at step ", adam.step, ", expected fewer than --steps ",
                o.steps, " (the total)");
      if (text) text->seek(ck.counter("data_position"));
    }
  }
  // bf16 (ZeRO's mixed precision, emulated as its compute copies are): the step computes with the
  // parameters rounded to bf16, its gradient is rounded to bf16 (once per step, and again after the
  // dense allreduce), and AdamW updates the fp32 master weights (`params`).
  std::unique_ptr<GPTParams> work;
  auto round_work = [&] {
    for (std::int64_t i = 0; i < params.size(); ++i) work->data()[i] = round_bf16(params.data()[i]);
  };
  auto round_grads = [&](std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) grads.data()[i] = round_bf16(grads.data()[i]);
  };
  if (o.bf16) {
    work = std::make_unique<GPTParams>(cfg);
    round_work();
  }
  GPTParams& compute = o.bf16 ? *work : params;
  // Every activation of one micro-batch kept, or a recompute plan's checkpoints and one segment.
  GPTActivations acts, dacts;
  std::unique_ptr<RematActivations> ra;
  if (!(o.remat == RecomputeKind::None))
    ra = std::make_unique<RematActivations>(cfg, b, o.context, gpt_plan(o.remat, cfg, b, o.context, o.remat_budget));
  else
    acts = GPTActivations(cfg, b, o.context), dacts = GPTActivations(cfg, b, o.context);
  std::unique_ptr<EpDispatch> ep;
  if (P > 1) {  // one rank: the plain single-rank MoE (the reference)
    ep = std::make_unique<EpDispatch>(cfg, comm, bt);
    acts.moe_dispatch = ep.get();
    if (ra) ra->seg.moe_dispatch = ep.get();
  }
  MoeRecord record;  // one rank under a recompute plan: each block's forward records its routing
  if (ra && !ep) ra->seg.moe_record = &record;
  const PassBuffers buf = ra ? PassBuffers::recompute(*ra) : PassBuffers::keep(acts, &dacts);
  const std::int64_t dense = moe_param_offsets(cfg)[0];  // [0, dense): replicated, summed over ranks
  std::vector<std::int32_t> in(static_cast<std::size_t>(P * BT)), tg(in.size()), min(static_cast<std::size_t>(BT)),
      mtg(min.size());
  EpRunReport rep;
  rep.ranks = P;
  rep.first_step = adam.step;
  rep.param_floats = params.size();
  rep.expert_floats = params.size() - moe_param_offsets(cfg)[kMoeFcw];
  for (std::int64_t s = adam.step; s < o.steps; ++s) {
    const std::int64_t sent0 = comm.traffic().total.bytes_sent;
    Timer t;
    global_batch(o, text.get(), P * o.batch, s, in.data(), tg.data());
    // Micro-batch k of this rank: global rows [(k·P + r)·b, ... + b) (see EpRunOptions).
    for (std::int64_t k = 0; k < o.accum; ++k) {
      const std::int64_t from = (k * P + r) * bt;
      std::copy(in.begin() + from, in.begin() + from + bt, min.begin() + k * bt);
      std::copy(tg.begin() + from, tg.begin() + from + bt, mtg.begin() + k * bt);
    }
    const MicroBatch mb{min.data(), mtg.data(), nullptr, o.batch, o.context};
    const double norm = static_cast<double>(P * BT);  // the global batch's mean
    grads.zero();
    if (ep) ep->reset_counters();
    FlatModel model(cfg, compute.views(), grads.views());
    Tensor num = Tensor::from_vector(std::vector<double>{accumulate_gradients(cfg, model, buf, mb, o.accum, norm)}, {1});
    if (o.bf16) round_grads(params.size());
    std::vector<MoeBlockStats> routed;
    if (ep) {
      // Data parallel: the dense gradients summed (each rank's is its rows' share of the mean).
      // The router's is already the group's (EpMoe), the experts' complete on their owners.
      Tensor g = Tensor::empty({dense}, DType::Float32);
      std::memcpy(g.data<float>(), grads.data(), sizeof(float) * static_cast<std::size_t>(dense));
      comm.allreduce(g, ReduceOp::Sum);
      std::memcpy(grads.data(), g.data<float>(), sizeof(float) * static_cast<std::size_t>(dense));
      if (o.bf16) round_grads(dense);
      comm.allreduce(num, ReduceOp::Sum);
      routed = ep->stats();
    } else {
      routed = ra ? record.stats(cfg) : moe_stats(cfg, acts);
    }
    adamw_update(params, grads, adam, o.adam, o.lr);
    if (o.bf16) round_work();
    rep.losses.push_back(num.data<double>()[0] / norm);
    rep.moe.push_back(moe_row(s, routed));
    rep.dropped.push_back(rep.moe.back().dropped);
    rep.step_s.push_back(t.seconds());
    rep.exchange_s.push_back(ep ? ep->exchange_seconds : 0.0);
    rep.bytes_sent_per_step = comm.traffic().total.bytes_sent - sent0;
  }
  // Every expert from its owner (the moments too, for the checkpoint).
  rep.final_params = P > 1 ? gather_experts(comm, cfg, params.vec()) : params.vec();
  if (!o.save.empty()) {
    std::vector<float> m = P > 1 ? gather_experts(comm, cfg, adam.m) : adam.m,
                       v = P > 1 ? gather_experts(comm, cfg, adam.v) : adam.v;
    if (r == 0) {
      Checkpoint ck;
      ck.config = o.cfg;
      ck.tokenizer = o.tokenizer;
      ck.step = adam.step;
      ck.counters["seed"] = o.seed;
      ck.counters["data_position"] = text ? text->position() : static_cast<std::uint64_t>(adam.step);
      ck.settings["lr"] = std::to_string(o.lr);
      ck.settings["ep_ranks"] = std::to_string(P);
      add_params(ck, "", rep.final_params);
      add_params(ck, "m/", m);
      add_params(ck, "v/", v);
      save_checkpoint(o.save, ck);
    }
    comm.barrier();
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
    std::snprintf(buf, sizeof buf, "%5lld %12.6f %8lld %10.3f %12.3f %8.3f\n",
                  static_cast<long long>(r.first_step + static_cast<std::int64_t>(s)), r.losses[s],
                  static_cast<long long>(r.dropped[s]), 1e3 * r.step_s[s], 1e3 * r.exchange_s[s],
                  r.step_s[s] > 0 ? r.exchange_s[s] / r.step_s[s] : 0.0);
    o << buf;
  }
  return o.str();
}

}  // namespace mls::llm
