// mls-zero-bench: time per training step of ZeRO stages 0-3 relative to stage 0, of each
// recompute plan relative to none, the measured communication time next to the α-β-γ model's,
// and bf16 vs fp32 step time (lab 6, part 2).
//
//   mls-zero-bench --ranks 2                         (simulated ranks: threads of one process)
//   mls-zero-bench --ranks 2 --batch 8 --accum 4     (each step as 4 micro-batches of 2 rows)
//   lab5_parallel/tests/run_mpi.sh 2 mls-zero-bench --backend mpi     (2 MPI processes)
//
// Prints lines "ratio <name> <value>" (<backend> is sim or mpi):
//   zero<s>_step_vs_zero0_<backend>          seconds per step of stage s / stage 0 (best of --reps)
//   remat_<plan>_step_vs_none_zero<s>_<backend>  seconds per step under the plan (sqrt, optimal)
//                                            / without recompute, at ZeRO stage s
//   zero<s>_comm_measured_vs_modelled_<backend>  wall seconds inside collectives / the α-β-γ
//                                            model's seconds for the same messages (the
//                                            simulated backend's clock, lab 5's default model)
//   bf16_step_vs_fp32_<backend>              seconds per step, stage 0, bf16 / fp32
// and whether this CPU has AVX-512 BF16 (this code widens bf16 to fp32 for the GEMMs either way).
//
// With --overlap it measures instead how much communication the overlapped step hides (issue 30),
// for stages 0-1 (each unit's gradient allreduce / reduce-scatter issued from backward), stage 2
// (asynchronous reduce-scatter) and stage 3 (also --prefetch units gathered ahead):
//   t_compute  seconds per step on a no-op communicator of the same size (no communication)
//   t_comm     the step's collectives alone: one blocking step is recorded (every collective's
//              kind, elements and dtype: Communicator spans), then replayed back to back with no
//              compute between them, between a barrier and a max over the ranks, best of --reps
//              (as mls-dp-bench does). Not the blocking run's time inside collectives: that counts
//              the wait for a slower rank's compute, which is not communication.
//   t_step     seconds per step of the overlapped run (and of the blocking one)
// Each (t_compute and t_step alike) is a run's fastest step after its first (ZeroRunReport::
// step_wall_s, the slowest rank's), best of --reps: the first step allocates the activations and
// learns stage 3's gather order, so it prefetches nothing, and a run's wall time also holds the
// trainer's construction and stage 3's final gather of every unit — none of it a step.
// --svg FILE draws stage 3's timeline (after the figures): a blocking and an overlapped step
// (each the third of its trainer), per rank a compute lane (forward/backward, the waits for a
// collective or the blocking collectives, the optimizer step: ZeroTrainer::record_phases) and
// a communication lane (each all-gather, reduce-scatter, allreduce: Communicator spans), and
// prints how long the overlapped step's collectives started after they could have (issued, the
// one before done: Span::issued), summed — the communication thread's wake-ups.
// The efficiency is at most 1 exactly when t_step >= max(t_compute, t_comm): an overlapped step
// runs the same compute and the same collectives, so only noise can make it faster than either
// alone; the three are best-of-reps minima measured alike. Where noise still gives t_step <
// max(t_compute, t_comm), the efficiency is printed as 1 and the line says "(clamped: ...)".
//   ratio zero<s>_overlap_efficiency_<backend>     (t_compute + t_comm − t_step) / min(t_compute, t_comm)
//   ratio zero<s>_overlap_step_over_max_<backend>  t_step / max(t_compute, t_comm)
//   ratio zero<s>_overlap_speedup_<backend>        blocking / overlapped seconds per step
//   ratio zero<s>_overlap_step_over_max_floor_<backend>  the least step/max the ceiling (below)
//     allows: lab 5's step_over_max_floor, (t_compute + t_comm − ceiling·min) / max, which is
//     2 − ceiling at t_comm = t_compute (so step/max <= 1.15 needs a ceiling >= 0.85)
//   ratio zero<s>_overlap_efficiency_ceiling_<backend>  the most the step's collectives allow:
//     some of them cannot overlap whatever the schedule: stage 3's first two all-gathers (the
//     embeddings' and block 0's: before block 0's forward only the embedding lookup runs, a copy
//     of rows), the last two gradient collectives (block 0's and the embeddings': after block 0's
//     backward only the embeddings' scatter-add runs) and whatever follows them (stages 1-2's
//     all-gathers of the updated parameters, after the optimizer step). So at most
//     min(t_comm − those, t_compute) can hide, over min(t_compute, t_comm) (each collective timed
//     alone in t_comm's replay). An upper bound: the compute that cannot overlap (forward at
//     stages 0-2, the optimizer step) is not subtracted, so it is tighter for stage 3 than for
//     stages 0-2 — up to stage 3's optimizer step, under which the next step's first all-gathers
//     run (ZeroTrainer::unit_updated: a few percent of the step, AdamW on 1/N of the parameters).
// With MLS_LINK_GBPS / MLS_LINK_US the link is emulated (lab 5's link.hpp) and the output says so.
// --link-auto (MPI, with --overlap) sets the emulated bandwidth instead, so that stage 3's t_comm
// ≈ its t_compute (the goal is stated for a link where communication ≈ compute): it
// measures stage 3's t_compute, its collectives on the plain link and the bytes they send, sets
// the bandwidth that makes them equal, corrects it twice by the measured ratio (MLS_LINK_US, if
// set, stays the latency), and every stage is then measured on that link (printed, labelled).
// Runs take seconds; the figures are only meaningful on a quiet machine.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "mls/common/error.hpp"
#include "mls/common/file.hpp"
#include "mls/llm/zero.hpp"
#include "mls/parallel/link.hpp"
#include "mls/parallel/sim.hpp"
#include "mls/parallel/timeline.hpp"
#ifdef MLS_HAVE_MPI
#include "mls/parallel/mpi.hpp"
#endif

using namespace mls;
using namespace mls::llm;

namespace {

/// One step's collectives replayed alone (collectives_alone).
struct CommAlone {
  double seconds = std::numeric_limits<double>::infinity();  // best round, slowest rank
  double unhideable = 0;  // of that round: the collectives no schedule can overlap (see the top)
  double head = 0;        // of those: stage 3's first all-gathers (the rest: the last gradient collectives and after)
  std::int64_t bytes_sent = 0, messages_sent = 0;  // by this rank, per round
};

/// The collectives of one step on `c`, replayed with no compute (t_comm of --overlap): a trainer
/// of `o` (blocking) runs one step to settle its plan, then one step with span recording on; its
/// collectives (allreduce, reduce_scatter, allgather: ZeroTrainer's allgather_inplace over
/// chunk_bounds) are replayed `reps` times back to back. Returns the best seconds, the max over
/// the ranks (collective), with the unhideable ones' share of that round.
CommAlone collectives_alone(parallel::Communicator& c, ZeroRunOptions o, int reps) {
  o.zero.overlap = false;
  ZeroTrainer tr(c, o.cfg, init_params(o.cfg, o.seed), o.zero);
  const auto n = static_cast<std::size_t>(o.batch * o.context);
  std::vector<std::int32_t> in(n), tg(n);
  zero_batch(o.cfg, o.batch, o.context, o.seed, 0, c.rank(), in.data(), tg.data());
  tr.step(in.data(), tg.data(), o.batch, o.context, o.lr);
  c.set_span_recording(false);
  c.set_span_recording(true);
  tr.step(in.data(), tg.data(), o.batch, o.context, o.lr);
  const std::vector<parallel::Communicator::Span> spans = c.spans();
  c.set_span_recording(false);
  std::vector<Tensor> bufs;
  for (const auto& s : spans) {
    MLS_CHECK(s.op == "allreduce" || s.op == "reduce_scatter" || s.op == "allgather",
              "mls-zero-bench: cannot replay a ZeRO step's '", s.op, "' (expected allreduce, reduce_scatter, allgather)");
    bufs.push_back(Tensor::ones({s.numel}, static_cast<DType>(s.dtype)));
  }
  // which cannot overlap (see the top): the last two gradient collectives (reduce-scatters, or
  // allreduces of more than one element: a one-element allreduce is a statistic of the step, the
  // loss) — the first block's and the embeddings': only the embeddings' backward, a scatter-add,
  // runs after the first block's — and everything after them; stage 3's first two all-gathers
  // (the embeddings' and the first block's: only the embedding lookup runs before block 0)
  std::vector<bool> fixed(spans.size(), false);
  std::vector<std::size_t> grads;
  for (std::size_t k = 0; k < spans.size(); ++k)
    if (spans[k].op == "reduce_scatter" || (spans[k].op == "allreduce" && spans[k].numel > 1)) grads.push_back(k);
  const std::size_t tail = grads.empty() ? spans.size() : grads[grads.size() >= 2 ? grads.size() - 2 : 0];
  for (std::size_t k = tail; k < spans.size(); ++k) fixed[k] = true;
  if (o.zero.stage == 3)
    for (std::size_t k = 0; k < std::min<std::size_t>(2, spans.size()) && spans[k].op == "allgather"; ++k) fixed[k] = true;
  CommAlone out;
  for (int r = 0; r < reps; ++r) {
    c.barrier();
    const parallel::Traffic::Counts before = c.traffic().total;
    const double t0 = parallel::Communicator::wall_now();
    double unhideable = 0, head = 0;
    for (std::size_t k = 0; k < spans.size(); ++k) {
      const double tk = parallel::Communicator::wall_now();
      Tensor& b = bufs[k];
      const parallel::Algo ring = b.dtype() == DType::Float32 ? parallel::Algo::Ring : parallel::Algo::Auto;
      if (spans[k].op == "allreduce")
        c.allreduce(b, parallel::ReduceOp::Sum, ring);
      else if (spans[k].op == "reduce_scatter")
        (void)c.reduce_scatter(b, parallel::ReduceOp::Sum, ring);
      else
        c.allgather_inplace(b, parallel::chunk_bounds(b.numel(), c.size()));
      if (fixed[k]) (k < tail ? head : unhideable) += parallel::Communicator::wall_now() - tk;
    }
    const double total = parallel::Communicator::wall_now() - t0;
    out.bytes_sent = c.traffic().total.bytes_sent - before.bytes_sent;
    out.messages_sent = c.traffic().total.messages_sent - before.messages_sent;
    unhideable += head;
    Tensor e = Tensor::from_vector(std::vector<double>{total, unhideable, head});
    c.allreduce(e, parallel::ReduceOp::Max);
    if (e.at({0}) < out.seconds) out.seconds = e.at({0}), out.unhideable = e.at({1}), out.head = e.at({2});
  }
  return out;
}

/// The timeline of one step (--svg): the compute thread's phases (ZeroTrainer::record_phases)
/// and the collectives' spans (Communicator spans), relative to the step's start. The trainer
/// of `o` runs `warm` steps first (the overlapped one learns its gather order), then the
/// recorded one, between barriers. Collective.
enum TimelineKind { kCompute, kCommWait, kOptimizer, kAllgather, kReduceScatter, kAllreduce };
const std::vector<std::string> kTimelineKinds = {"forward/backward", "waiting/blocking collective", "optimizer step",
                                                 "all-gather", "reduce-scatter", "allreduce"};

struct StepTimeline {
  parallel::RankTimeline tl;
  double start_delay = 0;  // the collectives' start delays, summed (below)
};
StepTimeline step_timeline(parallel::Communicator& c, const ZeroRunOptions& o, int warm) {
  ZeroTrainer tr(c, o.cfg, init_params(o.cfg, o.seed), o.zero);
  const auto n = static_cast<std::size_t>(o.batch * o.context);
  std::vector<std::int32_t> in(n), tg(n);
  zero_batch(o.cfg, o.batch, o.context, o.seed, 0, c.rank(), in.data(), tg.data());
  // The recorded step follows the last warm one with nothing between them, as in a run: the
  // first all-gathers the overlapped stage 3 starts for it under the warm step's optimizer step
  // are still in flight when it starts (a barrier between them would wait for them: issue order)
  // and are drawn from the step's start. The barrier comes before the last warm step.
  for (int s = 0; s <= warm; ++s) {
    if (s == std::max(warm - 1, 0)) {
      c.barrier();
      c.set_span_recording(false);
      c.set_span_recording(true);
    }
    if (s < warm) tr.step(in.data(), tg.data(), o.batch, o.context, o.lr);
  }
  tr.record_phases(true);
  const double t0 = parallel::Communicator::wall_now();
  tr.step(in.data(), tg.data(), o.batch, o.context, o.lr);
  const double t1 = parallel::Communicator::wall_now();
  c.barrier();
  parallel::RankTimeline tl{{0, kCompute, 0.0, t1 - t0}};
  for (int pass = 0; pass < 2; ++pass)  // the optimizer first, the waits drawn over it (stages 1-2 gather inside it)
    for (const ZeroPhase& p : tr.phases())
      if ((p.kind == ZeroPhase::Optimizer) == (pass == 0))
        tl.push_back({0, p.kind == ZeroPhase::Optimizer ? kOptimizer : kCommWait, p.start - t0, p.end - t0});
  // a collective's start delay: from when it could start (issued, and the one before it done)
  // to when it started — the communication thread waking up and getting the core
  double delay = 0, prev_end = t0;
  for (const auto& sp : c.spans()) {
    if (sp.end < t0 || sp.start > t1) continue;  // the step's own (and the head still in flight at its start)
    const int kind = sp.op == "allgather" ? kAllgather : sp.op == "reduce_scatter" ? kReduceScatter : kAllreduce;
    tl.push_back({1, kind, std::max(sp.start, t0) - t0, sp.end - t0});
    if (sp.start >= t0) delay += std::max(0.0, sp.start - std::max(sp.issued, prev_end));
    prev_end = sp.end;
  }
  c.set_span_recording(false);
  return {tl, delay};
}

/// --svg: stage 3's blocking and overlapped step on `c`, drawn side by side (rank 0 writes it).
void write_timeline(parallel::Communicator& c, ZeroRunOptions o, int prefetch, const std::string& file,
                    const std::string& link) {
  o.zero.stage = 3;
  o.zero.overlap = false;
  const auto blocking = parallel::gather_timeline(c, step_timeline(c, o, 2).tl);
  o.zero.overlap = true;
  o.zero.prefetch = prefetch;
  const StepTimeline over = step_timeline(c, o, 2);
  const auto overlapped = parallel::gather_timeline(c, over.tl);
  Tensor d = Tensor::scalar(over.start_delay, DType::Float64);
  c.allreduce(d, parallel::ReduceOp::Max);
  if (c.rank() != 0) return;
  std::printf("stage 3 overlapped step (the timeline's): the collectives started %.3f ms in all after they could "
              "have (issued, the one before done): the communication thread waking up and getting the core "
              "(slowest rank)\n", 1e3 * d.item());
  const std::string title = "ZeRO-3 step, " + std::to_string(c.size()) + " ranks (" + c.backend() +
                            "): blocking vs overlapped (prefetch " + std::to_string(prefetch) + ")";
  write_file_atomic(file, parallel::timeline_svg({{"blocking", blocking}, {"overlapped (--overlap)", overlapped}},
                                                 kTimelineKinds, title, link.empty() ? "shared-memory link" : link));
  std::printf("timeline: %s\n", file.c_str());
}

struct Result {
  double step_s = std::numeric_limits<double>::infinity();
  double comm_wall_s = 0, modelled_s = 0;
};

struct Setup {
  std::string config = "nano";
  std::int64_t batch = 8, steps = 10, layers = 0, accum = 1;
  int reps = 3;
};

ZeroRunOptions options(const Setup& su, int stage, Precision p, const std::string& remat = "none") {
  ZeroRunOptions o;
  o.cfg = config_by_name(su.config);
  o.cfg.vocab_size = 256;
  if (su.layers > 0) o.cfg.n_layer = su.layers;
  o.zero.stage = stage;
  o.zero.precision = p;
  o.zero.remat = remat;
  o.zero.accum = su.accum;
  o.batch = su.batch;
  o.context = o.cfg.block_size;
  o.steps = su.steps;
  return o;
}

/// Best of `reps` runs; fn returns a report. The run's seconds per step: its wall time over its
/// steps, or with `steady` its fastest step after the first (the first step allocates the
/// activations and learns stage 3's gather order, so it prefetches nothing; the run's wall time
/// also holds the trainer's construction and stage 3's final gather_params).
template <class F>
Result best(int reps, std::int64_t steps, F&& fn, bool steady = false) {
  Result r;
  for (int i = 0; i < reps; ++i) {
    const ZeroRunReport rep = fn();
    double s = rep.wall_s / static_cast<double>(steps);
    if (steady && !rep.step_wall_s.empty()) {
      const auto first = rep.step_wall_s.size() > 1 ? rep.step_wall_s.begin() + 1 : rep.step_wall_s.begin();
      s = *std::min_element(first, rep.step_wall_s.end());
    }
    if (s < r.step_s) {
      r.step_s = s;
      r.comm_wall_s = *std::max_element(rep.comm_wall_s.begin(), rep.comm_wall_s.end()) / steps;
      r.modelled_s = *std::max_element(rep.modelled_comm_s.begin(), rep.modelled_comm_s.end()) / steps;
    }
  }
  return r;
}

const char* kPlans[] = {"none", "sqrt", "optimal"};

/// The whole grid on one backend. run(stage, precision, plan) returns a report (collective on
/// MPI); model(stage) the simulated clock's report for the same messages (rank 0 only on MPI).
template <class Run, class Model>
void measure(const std::string& backend, const Setup& su, bool root, Run&& run, Model&& model) {
  Result r[4][3];  // stage x plan
  for (int s = 0; s < 4; ++s)
    for (int k = 0; k < 3; ++k)
      r[s][k] = best(su.reps, su.steps, [&] { return run(s, Precision::FP32, kPlans[k]); });
  const Result f = r[0][0];
  const Result b = best(su.reps, su.steps, [&] { return run(0, Precision::BF16, "none"); });
  double modelled[4] = {0, 0, 0, 0};
  for (int s = 0; s < 4; ++s) modelled[s] = model(s);
  if (!root) return;
  std::printf("%-6s %12s %12s %12s %10s %16s %16s\n", "stage", "ms none", "ms sqrt", "ms optimal",
              "vs stage0", "comm ms (wall)", "comm ms (model)");
  for (int s = 0; s < 4; ++s)
    std::printf("%-6d %12.3f %12.3f %12.3f %10.3f %16.3f %16.3f\n", s, 1e3 * r[s][0].step_s,
                1e3 * r[s][1].step_s, 1e3 * r[s][2].step_s, r[s][0].step_s / r[0][0].step_s,
                1e3 * r[s][0].comm_wall_s, 1e3 * modelled[s]);
  for (int s = 1; s < 4; ++s)
    std::printf("ratio zero%d_step_vs_zero0_%s %.4f\n", s, backend.c_str(), r[s][0].step_s / r[0][0].step_s);
  for (int s = 0; s < 4; ++s)
    for (int k = 1; k < 3; ++k)
      std::printf("ratio remat_%s_step_vs_none_zero%d_%s %.4f\n", kPlans[k], s, backend.c_str(),
                  r[s][k].step_s / r[s][0].step_s);
  for (int s = 0; s < 4; ++s)
    if (modelled[s] > 0)
      std::printf("ratio zero%d_comm_measured_vs_modelled_%s %.4f\n", s, backend.c_str(),
                  r[s][0].comm_wall_s / modelled[s]);
  std::printf("stage 0: fp32 %.3f ms/step, bf16 %.3f ms/step\n", 1e3 * f.step_s, 1e3 * b.step_s);
  std::printf("ratio bf16_step_vs_fp32_%s %.4f\n", backend.c_str(), b.step_s / f.step_s);
}

/// The overlap figures of stages 0-3 (--overlap). run(options) returns a report (collective
/// on MPI); compute(options) one on a no-op communicator of the same size; comm(options) the
/// seconds of one step's collectives alone (collectives_alone).
template <class Run, class Compute, class Comm>
void measure_overlap(const std::string& backend, const Setup& su, int prefetch, bool root, Run&& run,
                     Compute&& compute, Comm&& comm, const std::string& link) {
  const char* tag = link.empty() ? "" : " [emulated link]";
  if (root && !link.empty()) std::printf("%s\n", link.c_str());
  for (int s : {0, 1, 2, 3}) {
    ZeroRunOptions o = options(su, s, Precision::FP32);
    const Result tc = best(su.reps, su.steps, [&] { return compute(o); }, true);
    const CommAlone alone = comm(o);
    const double t_comm = alone.seconds;
    const Result blocking = best(su.reps, su.steps, [&] { return run(o); }, true);
    o.zero.overlap = true;
    o.zero.prefetch = prefetch;
    const Result over = best(su.reps, su.steps, [&] { return run(o); }, true);
    if (!root) continue;
    const double eff = (tc.step_s + t_comm - over.step_s) / std::min(tc.step_s, t_comm);
    std::printf("stage %d%s: t_compute %.3f ms  t_comm %.3f ms  t_step blocking %.3f ms  overlapped %.3f ms%s\n", s,
                s == 3 ? (" (prefetch " + std::to_string(prefetch) + ")").c_str() : "", 1e3 * tc.step_s, 1e3 * t_comm,
                1e3 * blocking.step_s, 1e3 * over.step_s, tag);
    std::printf("ratio zero%d_overlap_efficiency_%s %.3f%s%s\n", s, backend.c_str(), std::min(eff, 1.0), tag,
                eff > 1.0 ? " (clamped: t_step < max(t_compute, t_comm), noise)" : "");
    const double hideable = std::max(0.0, std::min(t_comm - alone.unhideable, tc.step_s));
    const double ceiling = std::min(1.0, hideable / std::min(tc.step_s, t_comm));
    const double step_floor = t_comm > 0 && tc.step_s > 0 ? parallel::step_over_max_floor(tc.step_s, t_comm, ceiling) : 1.0;
    char parts[160];
    if (s == 3)
      std::snprintf(parts, sizeof parts, ": the first two all-gathers %.3f ms, the last two reduce-scatters and the "
                    "loss's allreduce %.3f ms", 1e3 * alone.head, 1e3 * (alone.unhideable - alone.head));
    else
      std::snprintf(parts, sizeof parts, ": the last two gradient collectives and what follows them");
    std::printf("ratio zero%d_overlap_efficiency_ceiling_%s %.3f%s (collectives that cannot overlap: %.3f ms%s; "
                "so t_step / max(t_compute, t_comm) >= %.3f: (t_compute + t_comm - ceiling * min) / max, "
                "2 - ceiling at t_comm = t_compute)\n",
                s, backend.c_str(), ceiling, tag, 1e3 * alone.unhideable, parts, step_floor);
    std::printf("ratio zero%d_overlap_step_over_max_%s %.3f%s\n", s, backend.c_str(),
                over.step_s / std::max(tc.step_s, t_comm), tag);
    std::printf("ratio zero%d_overlap_step_over_max_floor_%s %.3f%s\n", s, backend.c_str(), step_floor, tag);
    std::printf("ratio zero%d_overlap_speedup_%s %.3f%s\n", s, backend.c_str(), blocking.step_s / over.step_s, tag);
  }
  if (root) std::printf("communication thread scheduling: %s\n", parallel::Communicator::comm_thread_policy());
}

#ifdef MLS_HAVE_MPI
/// --link-auto: the emulated bandwidth that makes stage 3's t_comm ≈ its t_compute (see the top;
/// `o` is stage 3, measured as measure_overlap measures it). Every rank computes the same figures (maxima over
/// the ranks), so every rank sets the same link. Returns its label.
template <class Compute>
std::string calibrate_link(parallel::Communicator& c, const Setup& su, ZeroRunOptions o, Compute&& compute) {
  parallel::LinkEmulation link = parallel::link_from_env();
  MLS_CHECK(!link.has_gbps, "mls-zero-bench: --link-auto chooses the bandwidth itself, but MLS_LINK_GBPS=", link.gbps,
            " is set too; unset it (MLS_LINK_US may stay: it is kept as the latency)");
  parallel::mpi_set_link(link);  // the latency only (or nothing)
  auto max_of = [&](double v) {
    Tensor e = Tensor::scalar(v, DType::Float64);
    c.allreduce(e, parallel::ReduceOp::Max);
    return e.item();
  };
  const double tc = max_of(best(su.reps, su.steps, [&] { return compute(o); }, true).step_s);
  const CommAlone plain = collectives_alone(c, o, su.reps);
  const double bytes = max_of(static_cast<double>(plain.bytes_sent));
  const double latency = link.has_us ? max_of(static_cast<double>(plain.messages_sent)) * link.us * 1e-6 : 0.0;
  MLS_CHECK(bytes > 0, "mls-zero-bench: --link-auto: the step's collectives send no bytes (one rank?): nothing to calibrate");
  MLS_CHECK(tc > plain.seconds + latency, "mls-zero-bench: --link-auto: stage 3's collectives already take ",
            1e3 * (plain.seconds + latency), " ms on the plain link (with MLS_LINK_US's latency), more than its compute's ",
            1e3 * tc, " ms: no emulated bandwidth can make t_comm = t_compute");
  link.has_gbps = true;
  link.gbps = 8.0 * bytes / ((tc - plain.seconds - latency) * 1e9);
  link.origin = "mls-zero-bench --link-auto: stage 3's t_comm ≈ t_compute";
  for (int round = 0; round < 2; ++round) {
    parallel::mpi_set_link(link);
    const double t_comm = collectives_alone(c, o, su.reps).seconds;
    const double t_compute = max_of(best(su.reps, su.steps, [&] { return compute(o); }, true).step_s);  // anew
    link.gbps *= t_comm / t_compute;  // slower if t_comm came out short, faster if long
  }
  link.gbps = std::round(link.gbps * 1e4) / 1e4;  // the same on every rank (it already is: maxima)
  parallel::mpi_set_link(link);
  return link.label();
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mls-zero-bench: ZeRO stages 0-3, recompute plans and bf16 vs fp32, time per step"};
  std::string backend = "sim";
  Setup su;
  int ranks = 2;
  app.add_option("--backend", backend, "sim | mpi (under mpirun)")->capture_default_str();
  app.add_option("--ranks", ranks, "simulated ranks")->capture_default_str();
  app.add_option("--config", su.config, "nano | small")->capture_default_str();
  app.add_option("--n-layer", su.layers, "override the config's layers (0: keep)");
  app.add_option("--steps", su.steps, "steps per run")->capture_default_str();
  app.add_option("--batch", su.batch, "B per rank")->capture_default_str();
  app.add_option("--reps", su.reps, "runs per point (best taken)")->capture_default_str();
  app.add_option("--accum", su.accum, "micro-batches per step (gradient accumulation; must divide --batch)")
      ->capture_default_str();
  bool overlap = false;
  int prefetch = 1;
  app.add_flag("--overlap", overlap, "measure the overlap of stages 0-3 (efficiency) instead of the grid");
  app.add_option("--prefetch", prefetch, "--overlap: stage 3's units gathered ahead (0..8)")->capture_default_str();
  std::string svg;
  app.add_option("--svg", svg, "--overlap: write stage 3's timeline (a blocking and an overlapped step, every rank) to this SVG file");
  bool link_auto = false;
  app.add_flag("--link-auto", link_auto,
               "--overlap on MPI: calibrate the emulated link's bandwidth so that stage 3's t_comm ~ t_compute");
  CLI11_PARSE(app, argc, argv);
  try {
    MLS_CHECK(su.reps >= 1, "mls-zero-bench: --reps ", su.reps, ", expected >= 1");
    parallel::link_from_env();  // a bad emulated-link spec fails first
    MLS_CHECK(svg.empty() || overlap, "mls-zero-bench: --svg '", svg, "' draws the --overlap run's timeline: add --overlap");
    MLS_CHECK(!link_auto || (overlap && backend == "mpi"), "mls-zero-bench: --link-auto needs --overlap and "
              "--backend mpi (simulated ranks time the wall clock, where the emulated link only moves the modelled clock)");
    if (overlap) {
      ZeroRunOptions o = options(su, 3, Precision::FP32);
      o.zero.overlap = true;
      o.zero.prefetch = prefetch;
      o.validate();
    }
    options(su, 0, Precision::FP32).validate();
    auto header = [&](bool root) {
      if (!root) return;
      const GPTConfig cfg = options(su, 0, Precision::FP32).cfg;
      std::printf("config %s (L = %lld), B = %lld per rank in %lld micro-batch(es), %lld steps, best of %d; "
                  "sqrt plan %s; AVX-512 BF16 on this CPU: %s\n",
                  su.config.c_str(), static_cast<long long>(cfg.n_layer), static_cast<long long>(su.batch),
                  static_cast<long long>(su.accum), static_cast<long long>(su.steps), su.reps,
                  sqrt_plan(cfg.n_layer).to_string().c_str(), cpu_has_avx512_bf16() ? "yes" : "no");
    };
    if (backend == "sim") {
      MLS_CHECK(ranks >= 1 && ranks <= 64, "mls-zero-bench: --ranks ", ranks, ", expected 1..64");
      header(true);
      std::printf("backend sim, %d ranks (threads)\n", ranks);
      if (overlap) {
        measure_overlap(
            "sim", su, prefetch, true, [&](const ZeroRunOptions& o) { return run_zero_simulated(ranks, o); },
            [&](const ZeroRunOptions& o) {
              parallel::Communicator noop(parallel::make_noop_transport(0, ranks));
              return run_zero(noop, o);
            },
            [&](const ZeroRunOptions& o) {
              std::vector<CommAlone> t(static_cast<std::size_t>(ranks));
              parallel::run_simulated(ranks, [&](parallel::Communicator& c) {
                t[static_cast<std::size_t>(c.rank())] = collectives_alone(c, o, su.reps);
              });
              return t[0];
            },
            parallel::link_from_env().label());
        if (!svg.empty())
          parallel::run_simulated(ranks, [&](parallel::Communicator& c) {
            write_timeline(c, options(su, 3, Precision::FP32), prefetch, svg, parallel::link_from_env().label());
          });
        return 0;
      }
      measure(
          "sim", su, true,
          [&](int s, Precision p, const char* plan) { return run_zero_simulated(ranks, options(su, s, p, plan)); },
          [&](int s) {
            return best(1, su.steps, [&] { return run_zero_simulated(ranks, options(su, s, Precision::FP32)); })
                .modelled_s;
          });
      return 0;
    }
    MLS_CHECK(backend == "mpi", "mls-zero-bench: --backend '", backend, "', expected sim or mpi");
#ifdef MLS_HAVE_MPI
    return parallel::mpi_run([&](parallel::Communicator& c) {
      header(c.rank() == 0);
      if (c.rank() == 0)
        std::printf("backend mpi, %d processes (comm model: the simulated clock on as many ranks)\n", c.size());
      if (overlap) {
        auto fresh = [] {
          mem::global().set_enabled(true);
          mem::global().reset();
        };
        auto compute = [&](const ZeroRunOptions& o) {
          fresh();
          parallel::Communicator noop(parallel::make_noop_transport(c.rank(), c.size()));
          return run_zero(noop, o);
        };
        std::string link = parallel::link_from_env().label();
        if (link_auto) {
          link = calibrate_link(c, su, options(su, 3, Precision::FP32), compute);
        }
        measure_overlap(
            "mpi", su, prefetch, c.rank() == 0,
            [&](const ZeroRunOptions& o) {
              fresh();
              return run_zero(c, o);
            },
            compute, [&](const ZeroRunOptions& o) { return collectives_alone(c, o, su.reps); }, link);
        if (!svg.empty()) write_timeline(c, options(su, 3, Precision::FP32), prefetch, svg, link);
        return;
      }
      measure(
          "mpi", su, c.rank() == 0,
          [&](int s, Precision p, const char* plan) {
            mem::global().set_enabled(true);
            mem::global().reset();
            return run_zero(c, options(su, s, p, plan));
          },
          [&](int s) {
            if (c.rank() != 0) return 0.0;
            return best(1, su.steps, [&] { return run_zero_simulated(c.size(), options(su, s, Precision::FP32)); })
                .modelled_s;
          });
    });
#else
    fail("mls-zero-bench: --backend mpi: built without MPI");
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mls-zero-bench: %s\n", e.what());
    return 1;
  }
}
