// Student file of lab 6: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 6, part 2, ZeRO (2 of 3): the engine — ZeroTrainer, stages 0-3 and mixed precision on the
// lab 5 communicator, on the one step of train.hpp.
#include "mls/llm/zero.hpp"

#include <algorithm>
#include <deque>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "mls/common/error.hpp"
#include "mls/common/parallel.hpp"
#include "zero_internal.hpp"
#include "mls/llm/train.hpp"

namespace mls::llm {

using zero_detail::tensor_size;

// ---- the engine ---------------------------------------------------------------------------------

namespace {

/// A block unit's 12 tensors as ParamPtrs (layer 0); the other fields are null.
ParamPtrs block_ptrs(const GPTConfig& cfg, float* base) {
  ParamPtrs p{};
  float** f[] = {&p.ln1w, &p.ln1b, &p.qkvw, &p.qkvb, &p.attprojw, &p.attprojb,
                 &p.ln2w, &p.ln2b, &p.fcw,  &p.fcb,  &p.fcprojw,  &p.fcprojb};
  for (int k = 2; k <= 13; ++k) {
    *f[k - 2] = base;
    base += tensor_size(cfg, k) / cfg.n_layer;
  }
  return p;
}

std::uint64_t fnv1a(const void* data, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(data);
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

}  // namespace

struct ZeroTrainer::Impl {
  int rank = 0, N = 1, stage = 0;
  bool bf16 = false;
  std::vector<std::uint8_t> decay;  // unit layout
  mem::Buffer<float> p32;           // fp32: parameters (full for stages 0-2, shard for 3)
  mem::Buffer<std::uint16_t> p16;   // bf16: parameters
  mem::Buffer<float> g32;           // fp32: gradients (full for stages 0-1, shard for 2-3)
  mem::Buffer<std::uint16_t> g16;   // bf16: gradients
  mem::Buffer<float> master, m, v;  // optimizer state (full for stage 0, shard for 1-3)
  std::int64_t steps = 0;
  std::vector<mem::Buffer<float>> gath32;          // stage 3, fp32: gathered units
  std::vector<mem::Buffer<std::uint16_t>> gath16;  // stage 3, bf16: gathered units
  std::vector<mem::Buffer<float>> work;            // fp32 compute copies (bf16, or gathered)
  std::vector<bool> gathered;
  std::unique_ptr<RematActivations> ra;  // the blocks' activations under the recompute plan
  double comm_s = 0;  // wall seconds inside collectives (this rank)
  // overlap (ZeroOptions::overlap)
  struct PendingReduce {
    int unit = 0;
    std::int64_t micro = 0;  // -1: a stage 0-1 full-gradient reduction (store_full_gradient)
    Tensor out;
    parallel::Request req;
  };
  std::deque<PendingReduce> reductions;       // issued reduce-scatters, in issue order
  std::vector<Tensor> prefetch_buf;            // per unit: an all-gather in flight (stage 3)
  std::vector<parallel::Request> prefetch_req;
  std::vector<int> order, log;                 // the gather order learned last step, this step's
  bool in_step = false;
  std::int64_t prefetched = 0;
  // the next step's head (overlap, stage 3): units updated by this step's optimizer, and how many
  // of the learned order's first positions were started (unit_updated)
  std::vector<bool> updated;
  std::size_t head = 0;
  // the step's traffic with the head in flight across steps: the last step ended its count at a
  // point where nothing was in flight (mark) and then issued the head; the next step counts from
  // there (head_pending), so each step counts its own collectives, the head's included
  bool head_pending = false;
  std::int64_t mark = 0;
  bool record = false;              // record_phases
  std::vector<ZeroPhase> phases;    // the last step's, when recording
};

namespace {
/// Adds the wall time of its scope to `acc`; when `phases` is given, records the scope as a phase
/// of kind `kind` too (ZeroTrainer::record_phases).
struct CommTimer {
  double& acc;
  std::vector<ZeroPhase>* phases;
  ZeroPhase::Kind kind;
  double t0 = parallel::Communicator::wall_now();
  explicit CommTimer(double& a, std::vector<ZeroPhase>* p = nullptr, ZeroPhase::Kind k = ZeroPhase::Comm)
      : acc(a), phases(p), kind(k) {}
  ~CommTimer() {
    const double t1 = parallel::Communicator::wall_now();
    acc += t1 - t0;
    if (phases) phases->push_back({kind, t0, t1});
  }
};
}  // namespace

ZeroTrainer::ZeroTrainer(parallel::Communicator& comm, const GPTConfig& cfg, const GPTParams& init,
                         const ZeroOptions& opts)
    : impl_(std::make_unique<Impl>()), comm_(&comm), cfg_(cfg), opts_(opts) {
  cfg.validate();
  MLS_CHECK(!llm::is_moe(cfg), "ZeroTrainer: an MoE model (moe_experts = ", cfg.moe_experts,
            "): ZeRO partitions the dense layout only, expected moe_experts = 0");
  MLS_CHECK(opts.stage >= 0 && opts.stage <= 3, "ZeroTrainer: stage = ", opts.stage,
            ", expected 0, 1, 2 or 3");
  opts.validate();
  MLS_CHECK(init.size() == llm::num_params(cfg) && init.config() == cfg,
            "ZeroTrainer: initial parameters of another config (", init.size(), " parameters, expected ",
            llm::num_params(cfg), ")");
  Impl& I = *impl_;
  I.rank = comm.rank();
  I.N = comm.size();
  I.stage = opts.stage;
  I.bf16 = opts.precision == Precision::BF16;
  mem::RankScope rs(I.rank);
  // Every rank must train the same thing: compare a fingerprint of (config, options, init).
  {
    mem::TagScope ts(mem::Tag::Communication, I.rank);
    const std::int64_t mine[] = {cfg.vocab_size, cfg.block_size, cfg.n_layer, cfg.n_head, cfg.n_embd,
                                 opts.stage, static_cast<std::int64_t>(opts.precision),
                                 static_cast<std::int64_t>(opts.remat.kind()), opts.remat_budget, opts.accum,
                                 opts.overlap ? 1 : 0, opts.overlap ? opts.prefetch : 0,
                                 static_cast<std::int64_t>(fnv1a(init.data(), sizeof(float) * static_cast<std::size_t>(init.size())) >> 1)};
    const char* names[] = {"vocab_size", "block_size", "n_layer", "n_head", "n_embd",
                           "stage", "precision", "remat plan (none 0, sqrt 1, optimal 2)",
                           "remat budget", "accum (micro-batches per step)", "overlap", "prefetch",
                           "initial parameters (hash)"};
    constexpr int F = 13;
    Tensor t = Tensor::empty({F}, DType::Int64);
    std::copy(mine, mine + F, t.data<std::int64_t>());
    Tensor all = comm.allgather(t);
    const std::int64_t* a = all.data<std::int64_t>();
    // (a no-op communicator, lab 5's make_noop_transport, exchanges nothing: the timing of compute alone)
    for (int r = 1; r < I.N && comm.backend() != "noop"; ++r)
      for (int f = 0; f < F; ++f)
        MLS_CHECK(a[r * F + f] == a[f], "ZeroTrainer: ranks disagree on the config: rank 0 has ",
                  names[f], " = ", a[f], ", rank ", r, " has ", a[r * F + f],
                  " (every rank must pass the same config, options and initial parameters)");
  }
  units_ = zero_units(cfg);
  part_ = make_partition(units_, I.N, I.rank);
  psi_ = llm::num_params(cfg);
  I.decay = unit_decay_mask(cfg);
  const std::vector<float> u = to_unit_layout(cfg, init.data());
  const std::int64_t S = part_.shard_size;
  // Parameters.
  const std::int64_t np = I.stage >= 3 ? S : psi_;
  auto param_at = [&](std::int64_t i) -> float {  // i in this rank's parameter storage
    if (I.stage < 3) return u[static_cast<std::size_t>(i)];
    return 0.f;
  };
  std::vector<float> shard_init(static_cast<std::size_t>(S));
  for (std::size_t k = 0; k < units_.size(); ++k) {
    const ShardRange& r = part_.mine[k];
    std::copy(u.begin() + units_[k].offset + r.unit_begin, u.begin() + units_[k].offset + r.unit_end,
              shard_init.begin() + r.shard_offset);
  }
  const std::vector<float>& pinit = I.stage >= 3 ? shard_init : u;
  (void)param_at;
  if (I.bf16) {
    I.p16 = mem::Buffer<std::uint16_t>(mem::Tag::Parameter, np, I.rank);
    for (std::int64_t i = 0; i < np; ++i) I.p16[i] = to_bf16(pinit[static_cast<std::size_t>(i)]);
  } else {
    I.p32 = mem::Buffer<float>(mem::Tag::Parameter, np, I.rank);
    std::copy(pinit.begin(), pinit.end(), I.p32.data());
  }
  // Gradients.
  const std::int64_t ng = I.stage >= 2 ? S : psi_;
  if (I.bf16)
    I.g16 = mem::Buffer<std::uint16_t>(mem::Tag::Gradient, ng, I.rank);
  else
    I.g32 = mem::Buffer<float>(mem::Tag::Gradient, ng, I.rank);
  // Optimizer state: moments (and the fp32 master weights in bf16).
  const std::int64_t no = I.stage >= 1 ? S : psi_;
  I.m = mem::Buffer<float>(mem::Tag::OptimizerState, no, I.rank);
  I.v = mem::Buffer<float>(mem::Tag::OptimizerState, no, I.rank);
  if (I.bf16) {
    I.master = mem::Buffer<float>(mem::Tag::OptimizerState, no, I.rank);
    const std::vector<float>& minit = I.stage >= 1 ? shard_init : u;
    std::copy(minit.begin(), minit.end(), I.master.data());
  }
  I.gath32.resize(units_.size());
  I.gath16.resize(units_.size());
  I.work.resize(units_.size());
  I.gathered.assign(units_.size(), false);
  I.prefetch_buf.resize(units_.size());
  I.prefetch_req.resize(units_.size());
  I.updated.assign(units_.size(), false);
}

ZeroTrainer::~ZeroTrainer() {
  // overlap, stage 3: the next step's first all-gathers are in flight after every step
  // (unit_updated); every rank waits for them here, so no request is dropped unwaited
  if (!impl_) return;
  try {
    drop_prefetches();
  } catch (...) {  // a destructor never throws: the error was the collective's to report
  }
}

std::int64_t ZeroTrainer::largest_unit() const {
  std::int64_t m = 0;
  for (const auto& u : units_) m = std::max(m, u.size);
  return m;
}

void ZeroTrainer::gather(int unit) {
  // BEGIN SOLUTION
  Impl& I = *impl_;
  MLS_CHECK(unit >= 0 && unit < static_cast<int>(units_.size()), "ZeroTrainer::gather: unit ", unit,
            ", expected 0..", units_.size() - 1);
  MLS_CHECK(I.stage == 3, "ZeroTrainer::gather: only stage 3 gathers parameters (this is stage ",
            I.stage, ")");
  MLS_CHECK(!I.gathered[static_cast<std::size_t>(unit)], "ZeroTrainer::gather: unit ", unit, " (",
            units_[static_cast<std::size_t>(unit)].name, ") is already gathered");
  mem::RankScope rs(I.rank);
  const ZeroUnit& U = units_[static_cast<std::size_t>(unit)];
  const ShardRange& r = part_.mine[static_cast<std::size_t>(unit)];
  mem::TagScope ts(mem::Tag::Communication, I.rank);
  Tensor t = Tensor::empty({U.size});
  if (!in_flight(unit)) {  // a prefetched unit's chunk went out already
    float* own = t.data<float>();
    for (std::int64_t j = r.unit_begin; j < r.unit_end; ++j) {
      const std::int64_t si = r.shard_offset + (j - r.unit_begin);
      own[j] = I.bf16 ? from_bf16(I.p16[si]) : I.p32[si];
    }
  }
  all_gather_unit(unit, t);
  const float* d = t.data<float>();
  if (I.bf16) {
    auto& g = I.gath16[static_cast<std::size_t>(unit)];
    g = mem::Buffer<std::uint16_t>(mem::Tag::Parameter, U.size, I.rank);
    for (std::int64_t j = 0; j < U.size; ++j) g[j] = to_bf16(d[j]);
    auto& w = I.work[static_cast<std::size_t>(unit)];
    w = mem::Buffer<float>(mem::Tag::Workspace, U.size, I.rank);
    for (std::int64_t j = 0; j < U.size; ++j) w[j] = from_bf16(g[j]);
  } else {
    auto& g = I.gath32[static_cast<std::size_t>(unit)];
    g = mem::Buffer<float>(mem::Tag::Parameter, U.size, I.rank);
    std::copy(d, d + U.size, g.data());
  }
  I.gathered[static_cast<std::size_t>(unit)] = true;
  // END SOLUTION
}

void ZeroTrainer::release(int unit) {
  Impl& I = *impl_;
  MLS_CHECK(unit >= 0 && unit < static_cast<int>(units_.size()), "ZeroTrainer::release: unit ", unit,
            ", expected 0..", units_.size() - 1);
  I.gath32[static_cast<std::size_t>(unit)].clear();
  I.gath16[static_cast<std::size_t>(unit)].clear();
  I.work[static_cast<std::size_t>(unit)].clear();
  I.gathered[static_cast<std::size_t>(unit)] = false;
}

const float* ZeroTrainer::unit_params(int unit) {
  Impl& I = *impl_;
  MLS_CHECK(unit >= 0 && unit < static_cast<int>(units_.size()), "ZeroTrainer::unit_params: unit ",
            unit, ", expected 0..", units_.size() - 1);
  const auto u = static_cast<std::size_t>(unit);
  if (I.stage == 3) {
    MLS_CHECK(I.gathered[u], "ZeroTrainer: ZeRO-3 parameter unit ", unit, " (", units_[u].name,
              ") used before it was gathered: call gather(", unit, ") first (rank ", I.rank,
              " holds only its shard, ", part_.mine[u].unit_end - part_.mine[u].unit_begin, " of ",
              units_[u].size, " parameters)");
    return I.bf16 ? I.work[u].data() : I.gath32[u].data();
  }
  if (!I.bf16) return I.p32.data() + units_[u].offset;
  if (I.work[u].empty()) {  // bf16: an fp32 copy for compute (this CPU multiplies in fp32)
    mem::RankScope rs(I.rank);
    I.work[u] = mem::Buffer<float>(mem::Tag::Workspace, units_[u].size, I.rank);
    for (std::int64_t j = 0; j < units_[u].size; ++j) I.work[u][j] = from_bf16(I.p16[units_[u].offset + j]);
  }
  return I.work[u].data();
}

/// The ModelAccess of ZeroTrainer: the embeddings are unit 0, block l unit l + 1, the final
/// layernorm unit L + 1. A unit's parameters are gathered (stage 3) or viewed (bf16: an fp32
/// copy) when first asked for and dropped when released; its gradient goes to an fp32 bucket of
/// its own, handed to finish_unit once the unit's backward is done.
struct ZeroTrainer::Access final : ModelAccess {
  ZeroTrainer& t;
  std::vector<mem::Buffer<float>> buckets;  // per unit, while its backward runs
  std::int64_t micro = 0;                   // the micro-batch of the step being run
  explicit Access(ZeroTrainer& tr) : t(tr), buckets(tr.units_.size()) {}

  int end_unit(ModelEnd e) const {
    return e == ModelEnd::Embeddings ? 0 : static_cast<int>(t.cfg_.n_layer) + 1;
  }
  float* acquire(int u) {
    Impl& I = *t.impl_;
    if (I.stage == 3 && !I.gathered[static_cast<std::size_t>(u)]) {
      t.gather(u);
      I.log.push_back(u);
      if (t.opts_.overlap && t.opts_.prefetch > 0) t.prefetch_ahead(I.log.size() - 1);
    }
    return const_cast<float*>(t.unit_params(u));
  }
  void done(int u) {
    if (t.impl_->stage == 3)
      t.release(u);
    else if (t.impl_->bf16)
      t.impl_->work[static_cast<std::size_t>(u)].clear();
  }
  float* bucket(int u) {
    auto& b = buckets[static_cast<std::size_t>(u)];
    if (b.empty()) b = mem::Buffer<float>(mem::Tag::Workspace, t.units_[static_cast<std::size_t>(u)].size, t.impl_->rank);
    return b.data();
  }
  void bucket_done(int u) {
    t.finish_unit(u, buckets[static_cast<std::size_t>(u)].data(), micro);
    buckets[static_cast<std::size_t>(u)].clear();
    // stages 0-1 with overlap: the unit's full gradient is final: start its reduction now
    if (t.impl_->stage <= 1 && t.opts_.overlap && micro == t.opts_.accum - 1) t.reduce_full_unit(u);
  }
  /// The two ends' tensors in a unit: wte, wpe (embeddings) or lnfw, lnfb (final layernorm).
  ParamPtrs end_ptrs(ModelEnd e, float* base) const {
    ParamPtrs p{};
    if (e == ModelEnd::Embeddings) {
      p.wte = base;
      p.wpe = base + t.cfg_.vocab_size * t.cfg_.n_embd;
    } else {
      p.lnfw = base;
      p.lnfb = base + t.cfg_.n_embd;
    }
    return p;
  }
  ParamPtrs params(std::int64_t l) override { return block_ptrs(t.cfg_, acquire(static_cast<int>(l) + 1)); }
  void release_params(std::int64_t l) override { done(static_cast<int>(l) + 1); }
  ParamPtrs grads(std::int64_t l) override { return block_ptrs(t.cfg_, bucket(static_cast<int>(l) + 1)); }
  void grads_done(std::int64_t l) override { bucket_done(static_cast<int>(l) + 1); }
  ParamPtrs end_params(ModelEnd e) override { return end_ptrs(e, acquire(end_unit(e))); }
  void release_end(ModelEnd e) override { done(end_unit(e)); }
  ParamPtrs end_grads(ModelEnd e) override { return end_ptrs(e, bucket(end_unit(e))); }
  void end_grads_done(ModelEnd e) override { bucket_done(end_unit(e)); }
  void begin_micro_batch(std::int64_t k) override { micro = k; }
};

const RematPlan* ZeroTrainer::remat_plan() const { return impl_->ra ? &impl_->ra->plan() : nullptr; }
std::int64_t ZeroTrainer::activation_bytes() const { return impl_->ra ? impl_->ra->bytes() : 0; }
std::int64_t ZeroTrainer::blocks_run() const { return impl_->ra ? impl_->ra->blocks_run : 0; }

ZeroStepStats ZeroTrainer::step(const std::int32_t* inputs, const std::int32_t* targets,
                                std::int64_t B, std::int64_t T, double lr) {
  return step(MicroBatch{inputs, targets, nullptr, B, T}, lr);
}

ZeroStepStats ZeroTrainer::step(const Batch& batch, double lr) { return step(batch_view(batch), lr); }

ZeroStepStats ZeroTrainer::step(const MicroBatch& whole, double lr) {
  Impl& I = *impl_;
  I.phases.clear();  // record_phases: this step's only
  mem::RankScope rs(I.rank);
  const std::int64_t B = whole.B, T = whole.T;
  MLS_CHECK(B > 0 && T > 0 && T <= cfg_.block_size, "ZeroTrainer::step: B = ", B, ", T = ", T,
            ", expected B > 0 and 0 < T <= block_size = ", cfg_.block_size);
  const std::int64_t A = opts_.accum;
  MLS_CHECK(B % A == 0, "ZeroTrainer::step: accum = ", A, " does not divide B = ", B,
            ", expected a divisor of the batch (micro-batch = B / accum)");
  const std::int64_t V = cfg_.vocab_size, Bm = B / A;
  for (std::int64_t i = 0; i < B * T; ++i)
    MLS_CHECK(whole.inputs[i] >= 0 && whole.inputs[i] < V && whole.targets[i] >= 0 && whole.targets[i] < V,
              "ZeroTrainer::step: token id out of range at position ", i, ", expected 0 <= id < ", V);
  if (!I.ra || I.ra->B != Bm || I.ra->T != T) {  // every rank plans the same (B, T) alike
    I.ra.reset();
    I.order.clear();  // a new plan: learn its gather order again
    I.ra = std::make_unique<RematActivations>(cfg_, Bm, T, gpt_plan(opts_.remat, cfg_, Bm, T, opts_.remat_budget));
  }
  RematActivations& ra = *I.ra;
  ra.reset_counters();
  // The gradient is that of the mean loss over every rank's whole batch: sum(mask·loss) over the
  // ranks / G, G = the mask's sum over the ranks. The ranks' gradients are averaged (divided by
  // N) after the reduction, so each rank divides its losses by G / N. Without a mask G = N·B·T
  // is known locally (no collective: G / N = B·T); with one, G is one allreduce, not counted in
  // the step's traffic (as the loss's allreduce below).
  // (with the head in flight, issued by the last step: see Impl::mark; a mask's allreduce would
  // wait for it anyway — collectives complete in issue order — so it is waited for first, and the
  // mask's bytes alone are left out)
  std::int64_t before = 0;
  double norm = static_cast<double>(B * T);
  if (I.head_pending) {
    if (whole.mask) {
      wait_prefetches();
      const std::int64_t m0 = comm_->traffic().total.bytes_sent;
      norm = global_mask_sum(whole) / I.N;
      I.mark += comm_->traffic().total.bytes_sent - m0;
    }
    before = I.mark;
    I.head_pending = false;
  } else {
    if (whole.mask) norm = global_mask_sum(whole) / I.N;
    before = comm_->traffic().total.bytes_sent;
  }
  const double comm_before = I.comm_s;
  Access acc(*this);
  I.log.clear();
  I.prefetched = 0;
  const double loss_sum = accumulate_gradients(cfg_, acc, PassBuffers::recompute(ra), whole, A, norm);
  if (I.stage <= 1 && !opts_.overlap)  // stages 0-1: the full gradients, reduced unit by unit
    for (std::size_t u = 0; u < units_.size(); ++u) reduce_full_unit(static_cast<int>(u));
  finish_reductions();  // overlap: the reductions issued during backward, in issue order
  drop_prefetches();    // a prefetch the step never used (cannot happen with a fixed plan)
  I.order = I.log;  // the next step gathers in this order (the same plan and shapes)
  ZeroStepStats st;
  auto reduce_loss = [&] {  // not counted in the step's traffic (as the mask's sum)
    mem::TagScope ts(mem::Tag::Communication, I.rank);
    Tensor l1 = Tensor::full({1}, norm > 0 ? loss_sum / norm : 0.0, DType::Float64);
    CommTimer ct(I.comm_s, I.record ? &I.phases : nullptr);
    comm_->allreduce(l1, parallel::ReduceOp::Sum);
    st.loss = l1.data<double>()[0] / I.N;
  };
  // overlap, stage 3: the optimizer step starts the next step's first all-gathers (unit_updated),
  // so the step's count ends here, where nothing is in flight, and the loss is reduced before
  // them (after them it would wait for them: issue order)
  const bool head_path = I.stage == 3 && opts_.overlap;
  if (head_path) {
    st.bytes_sent = comm_->traffic().total.bytes_sent - before;
    reduce_loss();
    I.mark = comm_->traffic().total.bytes_sent;
  }
  I.updated.assign(units_.size(), false);
  I.head = 0;
  {
    double optimizer_s = 0;
    CommTimer ct(optimizer_s, I.record ? &I.phases : nullptr, ZeroPhase::Optimizer);
    reduce_and_update(lr);
    // every unit is updated now: the next step's head, where reduce_and_update did not start it
    for (std::size_t u = 0; u < units_.size(); ++u) unit_updated(static_cast<int>(u));
  }
  if (!head_path) st.bytes_sent = comm_->traffic().total.bytes_sent - before;
  st.elements_sent = st.bytes_sent / 4;  // fp32 on the wire
  st.comm_wall_s = I.comm_s - comm_before;
  if (!head_path) reduce_loss();
  return st;
}

double ZeroTrainer::global_mask_sum(const MicroBatch& whole) {
  Impl& I = *impl_;
  mem::TagScope ts(mem::Tag::Communication, I.rank);
  Tensor t = Tensor::full({1}, mask_sum(whole.mask, whole.B * whole.T), DType::Float64);
  CommTimer ct(I.comm_s, I.record ? &I.phases : nullptr);
  comm_->allreduce(t, parallel::ReduceOp::Sum);
  return t.data<double>()[0];
}

void ZeroTrainer::finish_unit(int unit, float* bucket, std::int64_t micro) {
  // BEGIN SOLUTION
  Impl& I = *impl_;
  const auto k = static_cast<std::size_t>(unit);
  const ZeroUnit& U = units_[k];
  if (I.bf16)  // the gradient is produced in bf16 (rounded once, here)
    for (std::int64_t j = 0; j < U.size; ++j) bucket[j] = round_bf16(bucket[j]);
  if (I.stage >= 2) {  // reduce-scatter the bucket: this rank keeps the mean of its chunk
    mem::TagScope ts(mem::Tag::Communication, I.rank);
    Tensor t = Tensor::empty({U.size});
    std::copy(bucket, bucket + U.size, t.data<float>());
    reduce_scatter_unit(unit, micro, t);  // then add_shard_gradient (now, or with overlap later)
  } else {  // stages 0-1: the whole gradient stays, accumulated here; reduced once after backward
    for (std::int64_t j = 0; j < U.size; ++j) {
      const std::int64_t i = U.offset + j;
      if (I.bf16)
        I.g16[i] = to_bf16(micro == 0 ? bucket[j] : from_bf16(I.g16[i]) + bucket[j]);
      else
        I.g32[i] = micro == 0 ? bucket[j] : I.g32[i] + bucket[j];
    }
  }
  // END SOLUTION
}

void ZeroTrainer::add_shard_gradient(int unit, std::int64_t micro, const float* mine) {
  // BEGIN SOLUTION
  Impl& I = *impl_;
  const ShardRange& r = part_.mine[static_cast<std::size_t>(unit)];
  const float n = static_cast<float>(I.N);
  // The first micro-batch stores, the later ones add into the shard (all that is kept).
  for (std::int64_t j = 0; j < r.unit_end - r.unit_begin; ++j) {
    const float gj = mine[j] / n;
    const std::int64_t i = r.shard_offset + j;
    if (I.bf16)
      I.g16[i] = to_bf16(micro == 0 ? gj : from_bf16(I.g16[i]) + gj);
    else
      I.g32[i] = micro == 0 ? gj : I.g32[i] + gj;
  }
  // END SOLUTION
}

void ZeroTrainer::store_full_gradient(int unit, std::int64_t b, std::int64_t e, const float* sum) {
  // BEGIN SOLUTION
  Impl& I = *impl_;
  const ZeroUnit& U = units_[static_cast<std::size_t>(unit)];
  const float n = static_cast<float>(I.N);
  for (std::int64_t j = b; j < e; ++j) {
    const float gj = sum[j - b] / n;
    if (I.bf16)
      I.g16[U.offset + j] = to_bf16(gj);
    else
      I.g32[U.offset + j] = gj;
  }
  // END SOLUTION
}

void ZeroTrainer::prefetch_ahead(std::size_t done) {
  // BEGIN SOLUTION
  Impl& I = *impl_;
  const std::vector<int>& order = ordered();
  const std::size_t end = std::min(order.size(), done + 1 + static_cast<std::size_t>(opts_.prefetch));
  for (std::size_t k = done + 1; k < end; ++k) {
    const int u = order[k];
    if (I.gathered[static_cast<std::size_t>(u)] || in_flight(u)) continue;
    start_prefetch(u);
  }
  // END SOLUTION
}

void ZeroTrainer::reduce_scatter_unit(int unit, std::int64_t micro, const Tensor& t) {
  Impl& I = *impl_;
  CommTimer ct(I.comm_s, I.record ? &I.phases : nullptr);
  if (!opts_.overlap) {
    const Tensor mine = comm_->reduce_scatter(t, parallel::ReduceOp::Sum, parallel::Algo::Ring);
    add_shard_gradient(unit, micro, mine.data<float>());
    return;
  }
  Impl::PendingReduce p;
  p.unit = unit;
  p.micro = micro;
  p.req = comm_->ireduce_scatter(t, p.out, parallel::ReduceOp::Sum, parallel::Algo::Ring);
  I.reductions.push_back(std::move(p));
}

void ZeroTrainer::reduce_full_unit(int unit) {
  Impl& I = *impl_;
  MLS_CHECK(I.stage <= 1, "ZeroTrainer::reduce_full_unit: stage ", I.stage, ", expected 0 or 1");
  mem::RankScope rs(I.rank);
  mem::TagScope ts(mem::Tag::Communication, I.rank);
  const auto k = static_cast<std::size_t>(unit);
  const ZeroUnit& U = units_[k];
  Tensor t = Tensor::empty({U.size});
  float* d = t.data<float>();
  for (std::int64_t j = 0; j < U.size; ++j) d[j] = I.bf16 ? from_bf16(I.g16[U.offset + j]) : I.g32[U.offset + j];
  // stage 0: the whole unit; stage 1: only this rank's chunk is needed (the same ring and chunks
  // as stage 2's reduce-scatter, so every stage's sums are bit-identical)
  const std::int64_t b = I.stage == 0 ? 0 : part_.mine[k].unit_begin, e = I.stage == 0 ? U.size : part_.mine[k].unit_end;
  CommTimer ct(I.comm_s, I.record ? &I.phases : nullptr);
  if (!opts_.overlap) {
    if (I.stage == 0) {
      comm_->allreduce(t, parallel::ReduceOp::Sum, parallel::Algo::Ring);
      store_full_gradient(unit, b, e, d);
    } else {
      const Tensor mine = comm_->reduce_scatter(t, parallel::ReduceOp::Sum, parallel::Algo::Ring);
      store_full_gradient(unit, b, e, mine.data<float>());
    }
    return;
  }
  Impl::PendingReduce p;
  p.unit = unit;
  p.micro = -1;
  if (I.stage == 0) {
    p.out = t;
    p.req = comm_->iallreduce(p.out, parallel::ReduceOp::Sum, parallel::Algo::Ring);
  } else {
    p.req = comm_->ireduce_scatter(t, p.out, parallel::ReduceOp::Sum, parallel::Algo::Ring);
  }
  I.reductions.push_back(std::move(p));
}

void ZeroTrainer::finish_reductions() {
  Impl& I = *impl_;
  CommTimer ct(I.comm_s, I.record ? &I.phases : nullptr);
  while (!I.reductions.empty()) {  // issue order: a unit's micro-batches add up in order
    Impl::PendingReduce& p = I.reductions.front();
    p.req.wait();
    if (p.micro < 0) {  // stages 0-1: a unit's full gradient
      const auto k = static_cast<std::size_t>(p.unit);
      const std::int64_t b = I.stage == 0 ? 0 : part_.mine[k].unit_begin;
      const std::int64_t e = I.stage == 0 ? units_[k].size : part_.mine[k].unit_end;
      store_full_gradient(p.unit, b, e, p.out.data<float>());
    } else {
      add_shard_gradient(p.unit, p.micro, p.out.data<float>());
    }
    I.reductions.pop_front();
  }
}

void ZeroTrainer::unit_updated(int unit) {
  Impl& I = *impl_;
  MLS_CHECK(unit >= 0 && unit < static_cast<int>(units_.size()), "ZeroTrainer::unit_updated: unit ", unit,
            ", expected 0..", units_.size() - 1);
  if (I.stage != 3 || !opts_.overlap || opts_.prefetch == 0) return;
  I.updated[static_cast<std::size_t>(unit)] = true;
  // the next forward's first prefetch + 1 gathers: the unit it starts with (position 0, needed
  // first) and the prefetch units after it, as prefetch_ahead(0) would keep them; started in
  // order (collectives complete in issue order), each as soon as its unit is updated
  const std::vector<int>& order = ordered();
  const std::size_t depth = std::min(order.size(), static_cast<std::size_t>(opts_.prefetch) + 1);
  while (I.head < depth && I.updated[static_cast<std::size_t>(order[I.head])]) {
    const int u = order[I.head++];
    if (!I.gathered[static_cast<std::size_t>(u)] && !in_flight(u)) {
      start_prefetch(u);
      I.head_pending = true;
    }
  }
}

bool ZeroTrainer::in_flight(int unit) const { return impl_->prefetch_buf[static_cast<std::size_t>(unit)].defined(); }

void ZeroTrainer::wait_prefetches() {
  Impl& I = *impl_;
  CommTimer ct(I.comm_s, I.record ? &I.phases : nullptr);
  for (parallel::Request& r : I.prefetch_req)
    if (r.valid()) r.wait();  // the buffer stays: the unit's gather takes it (in_flight)
}

void ZeroTrainer::drop_prefetches() {
  Impl& I = *impl_;
  for (std::size_t u = 0; u < I.prefetch_req.size(); ++u) {
    if (I.prefetch_req[u].valid()) I.prefetch_req[u].wait();
    I.prefetch_buf[u] = Tensor();
  }
  I.head_pending = false;
}

const std::vector<int>& ZeroTrainer::ordered() const { return impl_->order; }

std::int64_t ZeroTrainer::prefetched() const { return impl_->prefetched; }

void ZeroTrainer::record_phases(bool on) { impl_->record = on; }

const std::vector<ZeroPhase>& ZeroTrainer::phases() const { return impl_->phases; }

void ZeroTrainer::start_prefetch(int unit) {
  Impl& I = *impl_;
  const auto u = static_cast<std::size_t>(unit);
  MLS_CHECK(!in_flight(unit), "ZeroTrainer::start_prefetch: unit ", unit, " is already in flight");
  MLS_CHECK(!I.gathered[u], "ZeroTrainer::start_prefetch: unit ", unit, " is gathered");
  mem::RankScope rs(I.rank);
  mem::TagScope ts(mem::Tag::Communication, I.rank);
  const ZeroUnit& U = units_[u];
  const ShardRange& r = part_.mine[u];
  Tensor t = Tensor::empty({U.size});
  float* d = t.data<float>();
  for (std::int64_t j = r.unit_begin; j < r.unit_end; ++j) {
    const std::int64_t si = r.shard_offset + (j - r.unit_begin);
    d[j] = I.bf16 ? from_bf16(I.p16[si]) : I.p32[si];
  }
  I.prefetch_req[u] = comm_->iallgather_inplace(t, part_.bounds[u]);
  I.prefetch_buf[u] = t;
  ++I.prefetched;
}

void ZeroTrainer::all_gather_unit(int unit, Tensor& t) {
  Impl& I = *impl_;
  const auto u = static_cast<std::size_t>(unit);
  CommTimer ct(I.comm_s, I.record ? &I.phases : nullptr);
  if (in_flight(unit)) {
    if (I.prefetch_req[u].valid()) I.prefetch_req[u].wait();
    t = I.prefetch_buf[u];
    I.prefetch_buf[u] = Tensor();
    return;
  }
  comm_->allgather_inplace(t, part_.bounds[u]);
}

void ZeroTrainer::reduce_and_update(double lr) {
  // BEGIN SOLUTION
  Impl& I = *impl_;
  // AdamW on the elements this rank owns (all of them for stage 0), as adamw_update.
  I.steps += 1;
  const AdamWOptions& opt = opts_.adam;
  const double t = static_cast<double>(I.steps);
  const float b1 = static_cast<float>(opt.beta1), b2 = static_cast<float>(opt.beta2);
  const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(opt.beta1, t)));
  const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(opt.beta2, t)));
  const float flr = static_cast<float>(lr), eps = static_cast<float>(opt.eps);
  const float wdv = static_cast<float>(opt.weight_decay);
  for (std::size_t k = 0; k < units_.size(); ++k) {
    const ZeroUnit& U = units_[k];
    const ShardRange& r = part_.mine[k];
    const std::int64_t jb = I.stage == 0 ? 0 : r.unit_begin, je = I.stage == 0 ? U.size : r.unit_end;
    parallel_for(jb, je, 4096, [&](std::int64_t j0, std::int64_t j1) {
      std::vector<float> g32;  // bf16: this run's gradients widened to fp32
      // Runs of elements with the same weight decay, each one call of the one AdamW kernel.
      for (std::int64_t j = j0; j < j1;) {
        const std::int64_t gi = U.offset + j;                         // unit layout
        const bool decays = I.decay[static_cast<std::size_t>(gi)];
        std::int64_t e = j + 1;
        while (e < j1 && I.decay[static_cast<std::size_t>(U.offset + e)] == decays) ++e;
        const std::int64_t si = r.shard_offset + (j - r.unit_begin);  // shard
        const std::int64_t oi = I.stage == 0 ? gi : si;               // optimizer state
        const std::int64_t ki = I.stage >= 2 ? si : gi;               // gradient
        const std::int64_t pi = I.stage >= 3 ? si : gi;               // parameter
        const std::int64_t len = e - j;
        const float* g = nullptr;
        if (I.bf16) {
          g32.resize(static_cast<std::size_t>(len));
          for (std::int64_t q = 0; q < len; ++q) g32[static_cast<std::size_t>(q)] = from_bf16(I.g16[ki + q]);
          g = g32.data();
        } else {
          g = &I.g32[ki];
        }
        float* w = I.bf16 ? &I.master[oi] : &I.p32[pi];
        adamw_range(w, g, &I.m[oi], &I.v[oi], len, b1, b2, c1, c2, flr, eps, decays ? wdv : 0.f);
        if (I.bf16)
          for (std::int64_t q = 0; q < len; ++q) I.p16[pi + q] = to_bf16(w[q]);
        j = e;
      }
    });
    unit_updated(static_cast<int>(k));  // overlap, stage 3: the next step's first gathers may start
  }
  // Stages 1-2: every rank updated only its chunk; all-gather the parameters.
  if (I.stage == 1 || I.stage == 2) {
    for (std::size_t k = 0; k < units_.size(); ++k) {
      const ZeroUnit& U = units_[k];
      const ShardRange& r = part_.mine[k];
      mem::TagScope ts(mem::Tag::Communication, I.rank);
      Tensor t = Tensor::empty({U.size});
      float* d = t.data<float>();
      for (std::int64_t j = r.unit_begin; j < r.unit_end; ++j)
        d[j] = I.bf16 ? from_bf16(I.p16[U.offset + j]) : I.p32[U.offset + j];
      {
        CommTimer ct(I.comm_s);
        comm_->allgather_inplace(t, part_.bounds[k]);
      }
      for (std::int64_t j = 0; j < U.size; ++j) {
        if (I.bf16)
          I.p16[U.offset + j] = to_bf16(d[j]);
        else
          I.p32[U.offset + j] = d[j];
      }
    }
  }
  // END SOLUTION
}

GPTParams ZeroTrainer::gather_params() {
  Impl& I = *impl_;
  mem::RankScope rs(I.rank);
  drop_prefetches();  // the next step's first gathers, started by the last step: that step gathers anew
  std::vector<float> u(static_cast<std::size_t>(psi_));
  for (std::size_t k = 0; k < units_.size(); ++k) {
    const ZeroUnit& U = units_[k];
    if (I.stage == 3) {
      gather(static_cast<int>(k));
      const float* p = unit_params(static_cast<int>(k));
      std::copy(p, p + U.size, u.begin() + U.offset);
      release(static_cast<int>(k));
    } else {
      for (std::int64_t j = 0; j < U.size; ++j)
        u[static_cast<std::size_t>(U.offset + j)] = I.bf16 ? from_bf16(I.p16[U.offset + j]) : I.p32[U.offset + j];
    }
  }
  GPTParams out(cfg_);
  from_unit_layout(cfg_, u.data(), out.data());
  return out;
}

GPTGrads ZeroTrainer::gather_grads() {
  Impl& I = *impl_;
  mem::RankScope rs(I.rank);
  drop_prefetches();  // the next step's first gathers, started by the last step: that step gathers anew
  mem::UntrackedScope untracked;  // a copy for inspection, not part of the trainer's memory
  std::vector<float> u(static_cast<std::size_t>(psi_));
  for (std::size_t k = 0; k < units_.size(); ++k) {
    const ZeroUnit& U = units_[k];
    const ShardRange& r = part_.mine[k];
    Tensor t = Tensor::empty({U.size});
    float* d = t.data<float>();
    for (std::int64_t j = r.unit_begin; j < r.unit_end; ++j) {  // this rank's reduced chunk
      const std::int64_t i = I.stage >= 2 ? r.shard_offset + (j - r.unit_begin) : U.offset + j;
      d[j] = I.bf16 ? from_bf16(I.g16[i]) : I.g32[i];
    }
    comm_->allgather_inplace(t, part_.bounds[k]);
    std::copy(d, d + U.size, u.begin() + U.offset);
  }
  GPTGrads out(cfg_);
  from_unit_layout(cfg_, u.data(), out.data());
  return out;
}

std::vector<float> ZeroTrainer::master_shard() const {
  const Impl& I = *impl_;
  if (I.bf16) return I.master.vec();
  if (I.stage == 0 || I.stage == 3) return I.p32.vec();
  std::vector<float> s(static_cast<std::size_t>(part_.shard_size));
  for (std::size_t k = 0; k < units_.size(); ++k) {
    const ShardRange& r = part_.mine[k];
    std::copy(I.p32.data() + units_[k].offset + r.unit_begin, I.p32.data() + units_[k].offset + r.unit_end,
              s.begin() + r.shard_offset);
  }
  return s;
}

}  // namespace mls::llm
