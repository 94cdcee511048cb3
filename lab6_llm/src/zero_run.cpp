// Lab 6, part 2, ZeRO (3 of 3): runs on any backend and the tables of what they measured.
#include "mls/llm/zero.hpp"

#include <chrono>
#include <cstdio>
#include <sstream>

#include "mls/common/error.hpp"

namespace mls::llm {

// ---- runs and their tables ----------------------------------------------------------------------

void zero_batch(const GPTConfig& cfg, std::int64_t B, std::int64_t T, std::uint64_t seed,
                std::int64_t step, int rank, std::int32_t* inputs, std::int32_t* targets) {
  Rng rng(seed, "zero-data/" + std::to_string(step) + "/" + std::to_string(rank));
  const std::int64_t V = cfg.vocab_size;
  for (std::int64_t b = 0; b < B; ++b) {
    std::int64_t x = static_cast<std::int64_t>(rng.next_u64() % static_cast<std::uint64_t>(V));
    for (std::int64_t t = 0; t < T; ++t) {
      inputs[b * T + t] = static_cast<std::int32_t>(x);
      x = (5 * x + 3) % V;
      targets[b * T + t] = static_cast<std::int32_t>(x);
    }
  }
}

ZeroRunReport run_zero(parallel::Communicator& comm, const ZeroRunOptions& o, GPTParams* final_params) {
  o.validate();
  const int rank = comm.rank(), N = comm.size();
  mem::RankScope rs(rank);
  ZeroRunReport rep;
  rep.stage = o.zero.stage;
  rep.ranks = N;
  rep.accum = o.zero.accum;
  rep.micro_batch = o.batch / o.zero.accum;
  rep.precision = o.zero.precision;
  GPTParams init;
  {
    mem::UntrackedScope untracked;  // the trainer copies from it: not part of its memory
    init = init_params(o.cfg, o.seed);
  }
  std::vector<std::int32_t> in(static_cast<std::size_t>(o.batch * o.context)), tg(in.size());
  std::int64_t sent = 0;
  double comm_s = 0, comm_wall = 0;
  const auto t0 = std::chrono::steady_clock::now();
  {
    ZeroTrainer tr(comm, o.cfg, init, o.zero);
    init = GPTParams();
    rep.psi = tr.num_params();
    rep.largest_unit = tr.largest_unit();
    const double m0 = comm.modelled_seconds();
    for (std::int64_t s = 0; s < o.steps; ++s) {
      zero_batch(o.cfg, o.batch, o.context, o.seed, s, rank, in.data(), tg.data());
      const auto ts = std::chrono::steady_clock::now();
      const ZeroStepStats st = tr.step(in.data(), tg.data(), o.batch, o.context, o.lr);
      rep.step_wall_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count());
      sent = st.elements_sent;  // the same every step
      comm_wall += st.comm_wall_s;
      rep.losses.push_back(st.loss);
    }
    comm_s = comm.modelled_seconds() - m0;
    rep.remat = o.zero.remat;
    if (const RematPlan* plan = tr.remat_plan()) {
      rep.plan = plan->to_string();
      rep.recomputed_blocks = plan->recomputed_layers();
      for (std::int64_t l = 0; l < rep.recomputed_blocks; ++l)
        rep.recomputed_params += tr.units()[static_cast<std::size_t>(l) + 1].size;
    }
    rep.activation_bytes = tr.activation_bytes();
    rep.prefetched = tr.prefetched();
    if (final_params || o.zero.stage == 3) {  // collective for stage 3: every rank gathers
      mem::UntrackedScope untracked;
      GPTParams p = tr.gather_params();
      if (final_params) *final_params = std::move(p);
    }
  }
  rep.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Exchange the per-rank figures.
  constexpr int F = mem::kNumTags + 4;
  Tensor t = Tensor::zeros({F}, DType::Float64);
  double* d = t.data<double>();
  for (int g = 0; g < mem::kNumTags; ++g) d[g] = static_cast<double>(mem::global().peak(static_cast<mem::Tag>(g), rank));
  d[mem::kNumTags] = static_cast<double>(sent);
  d[mem::kNumTags + 1] = comm_s;
  d[mem::kNumTags + 2] = static_cast<double>(make_partition(zero_units(o.cfg), N, rank).shard_size);
  d[mem::kNumTags + 3] = comm_wall;
  Tensor all;
  {
    mem::TagScope ts(mem::Tag::Communication, rank);
    all = comm.allgather(t);
  }
  {
    mem::TagScope ts(mem::Tag::Communication, rank);
    Tensor w = Tensor::from_vector(rep.step_wall_s);  // a step lasts as long as its slowest rank
    comm.allreduce(w, parallel::ReduceOp::Max);
    for (std::size_t s = 0; s < rep.step_wall_s.size(); ++s) rep.step_wall_s[s] = w.at({static_cast<std::int64_t>(s)});
  }
  const double* a = all.data<double>();
  for (int r = 0; r < N; ++r) {
    std::array<std::int64_t, mem::kNumTags> pk{};
    for (int g = 0; g < mem::kNumTags; ++g) pk[static_cast<std::size_t>(g)] = static_cast<std::int64_t>(a[r * F + g]);
    rep.peak.push_back(pk);
    rep.elements_sent.push_back(static_cast<std::int64_t>(a[r * F + mem::kNumTags]));
    rep.modelled_comm_s.push_back(a[r * F + mem::kNumTags + 1]);
    rep.shard_sizes.push_back(static_cast<std::int64_t>(a[r * F + mem::kNumTags + 2]));
    rep.comm_wall_s.push_back(a[r * F + mem::kNumTags + 3]);
  }
  return rep;
}

ZeroRunReport run_zero_simulated(int ranks, const ZeroRunOptions& opts, GPTParams* final_params) {
  MLS_CHECK(ranks >= 1, "run_zero_simulated: ranks = ", ranks, ", expected >= 1");
  opts.validate();  // before any rank starts
  mem::global().set_enabled(true);
  mem::global().reset();
  std::vector<ZeroRunReport> reps(static_cast<std::size_t>(ranks));
  GPTParams fin;
  const parallel::SimReport sim = parallel::run_simulated(ranks, [&](parallel::Communicator& c) {
    GPTParams p;
    reps[static_cast<std::size_t>(c.rank())] = run_zero(c, opts, c.rank() == 0 && final_params ? &p : nullptr);
    if (c.rank() == 0 && final_params) fin = std::move(p);
  });
  if (final_params) *final_params = std::move(fin);
  ZeroRunReport r = reps[0];
  r.wall_s = sim.wall_seconds;
  return r;
}

ZeroBytes expected_bytes(const ZeroRunReport& r, int rank) {
  const PrecisionBytes pb = precision_bytes(r.precision);
  const double S = static_cast<double>(r.shard_sizes.at(static_cast<std::size_t>(rank)));
  const double P = static_cast<double>(r.psi);
  ZeroBytes b;
  b.params = pb.param * (r.stage >= 3 ? S + static_cast<double>(r.largest_unit) : P);
  b.grads = pb.grad * (r.stage >= 2 ? S : P);
  b.optimizer = pb.k * (r.stage >= 1 ? S : P);
  b.total = b.params + b.grads + b.optimizer;
  return b;
}

std::string memory_table(const ZeroRunReport& r) {
  std::ostringstream o;
  char buf[512];
  const PrecisionBytes pb = precision_bytes(r.precision);
  std::snprintf(buf, sizeof buf,
                "memory per rank (bytes, peak): ZeRO stage %d, %d ranks, %s (param %g B, grad %g B, "
                "K = %g), psi = %lld, largest unit %lld\n",
                r.stage, r.ranks, to_string(r.precision), pb.param, pb.grad, pb.k,
                static_cast<long long>(r.psi), static_cast<long long>(r.largest_unit));
  o << buf;
  if (!r.plan.empty()) {
    std::snprintf(buf, sizeof buf,
                  "remat %s: segments %s, recomputes %lld blocks per micro-batch; micro-batch %lld x "
                  "accum %lld; activation buffers %lld bytes per rank\n",
                  r.remat.name(), r.plan.c_str(), static_cast<long long>(r.recomputed_blocks),
                  static_cast<long long>(r.micro_batch), static_cast<long long>(r.accum),
                  static_cast<long long>(r.activation_bytes));
    o << buf;
  }
  std::snprintf(buf, sizeof buf, "%4s %10s %12s %12s %12s %12s %12s %6s %12s %12s %12s\n", "rank", "shard",
                "params", "grads", "optimizer", "states", "formula", "match", "activation",
                "workspace", "comm");
  o << buf;
  for (int k = 0; k < r.ranks; ++k) {
    const auto& p = r.peak[static_cast<std::size_t>(k)];
    const ZeroBytes e = expected_bytes(r, k);
    const std::int64_t states = p[0] + p[1] + p[2];
    const bool ok = p[0] == static_cast<std::int64_t>(e.params) && p[1] == static_cast<std::int64_t>(e.grads) &&
                    p[2] == static_cast<std::int64_t>(e.optimizer);
    std::snprintf(buf, sizeof buf, "%4d %10lld %12lld %12lld %12lld %12lld %12.0f %6s %12lld %12lld %12lld\n", k,
                  static_cast<long long>(r.shard_sizes[static_cast<std::size_t>(k)]),
                  static_cast<long long>(p[0]), static_cast<long long>(p[1]), static_cast<long long>(p[2]),
                  static_cast<long long>(states), e.total, ok ? "yes" : "NO", static_cast<long long>(p[3]),
                  static_cast<long long>(p[4]), static_cast<long long>(p[5]));
    o << buf;
  }
  return o.str();
}

std::string comm_table(const ZeroRunReport& r) {
  std::ostringstream o;
  char buf[512];
  const double theory = zero_comm_elements_remat(r.stage, static_cast<double>(r.psi), r.ranks,
                                                 static_cast<double>(r.recomputed_params), r.accum);
  const bool extra = r.stage == 3 && r.recomputed_params > 0;
  std::string formula = r.stage == 3 ? "3*psi*(N-1)/N" : "2*psi*(N-1)/N";
  if (extra) formula += " + recomputed*(N-1)/N (re-gathered for the recompute)";
  if (r.accum > 1 && r.stage == 3) formula = "accum * (" + formula + ")";
  if (r.accum > 1 && r.stage == 2) formula = "(accum + 1)*psi*(N-1)/N (a reduce-scatter per micro-batch)";
  if (r.accum > 1 && r.stage <= 1) formula += " (the accumulated gradient is reduced once)";
  std::snprintf(buf, sizeof buf,
                "communication per rank per step: ZeRO stage %d, %d ranks, accum %lld; theory %s = %.1f "
                "elements\n",
                r.stage, r.ranks, static_cast<long long>(r.accum), formula.c_str(), theory);
  o << buf;
  std::snprintf(buf, sizeof buf, "%4s %14s %14s %10s %14s\n", "rank", "elements_sent", "theory", "ratio",
                "modelled_s");
  o << buf;
  std::int64_t sum = 0;
  for (int k = 0; k < r.ranks; ++k) {
    const double e = static_cast<double>(r.elements_sent[static_cast<std::size_t>(k)]);
    sum += r.elements_sent[static_cast<std::size_t>(k)];
    std::snprintf(buf, sizeof buf, "%4d %14.0f %14.1f %10.6f %14.6g\n", k, e, theory,
                  theory > 0 ? e / theory : 1.0, r.modelled_comm_s[static_cast<std::size_t>(k)]);
    o << buf;
  }
  std::snprintf(buf, sizeof buf, "sum over ranks %lld elements (theory %.0f)\n", static_cast<long long>(sum),
                theory * r.ranks);
  o << buf;
  return o.str();
}

}  // namespace mls::llm
