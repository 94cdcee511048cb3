// Student file of lab 6: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 6, part 2: ZeRO stages 0-3 and mixed precision on the lab 5 communicator.
#include "mls/llm/zero.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "mls/common/error.hpp"
#include "mls/common/parallel.hpp"
#include "mls/llm/train.hpp"

namespace mls::llm {

// ---- formulas -------------------------------------------------------------------------------------

ZeroBytes zero_memory(int stage, double psi, int ranks, double k, double param_bytes,
                      double grad_bytes) {
  // BEGIN SOLUTION
  MLS_CHECK(stage >= 0 && stage <= 3, "zero_memory: stage = ", stage, ", expected 0, 1, 2 or 3");
  MLS_CHECK(ranks >= 1, "zero_memory: ranks = ", ranks, ", expected >= 1");
  MLS_CHECK(psi >= 0 && k >= 0 && param_bytes > 0 && grad_bytes > 0, "zero_memory: psi = ", psi,
            ", k = ", k, ", param_bytes = ", param_bytes, ", grad_bytes = ", grad_bytes,
            ", expected psi >= 0, k >= 0 and positive element sizes");
  const double n = ranks;
  ZeroBytes b;
  b.params = param_bytes * psi / (stage >= 3 ? n : 1.0);
  b.grads = grad_bytes * psi / (stage >= 2 ? n : 1.0);
  b.optimizer = k * psi / (stage >= 1 ? n : 1.0);
  b.total = b.params + b.grads + b.optimizer;
  return b;
  // END SOLUTION
}

double zero3_peak_bytes(double psi, int ranks, double largest_unit, double k, double param_bytes,
                        double grad_bytes) {
  return zero_memory(3, psi, ranks, k, param_bytes, grad_bytes).total + param_bytes * largest_unit;
}

double zero_comm_elements(int stage, double psi, int ranks) {
  // BEGIN SOLUTION
  MLS_CHECK(stage >= 0 && stage <= 3, "zero_comm_elements: stage = ", stage,
            ", expected 0, 1, 2 or 3");
  MLS_CHECK(ranks >= 1, "zero_comm_elements: ranks = ", ranks, ", expected >= 1");
  const double factor = stage == 3 ? 3.0 : 2.0;
  return factor * psi * (ranks - 1) / ranks;
  // END SOLUTION
}

double zero_comm_elements_remat(int stage, double psi, int ranks, double recomputed_params,
                                std::int64_t accum) {
  MLS_CHECK(recomputed_params >= 0 && recomputed_params <= psi, "zero_comm_elements_remat: ",
            recomputed_params, " recomputed parameters of psi = ", psi, ", expected 0..psi");
  MLS_CHECK(accum >= 1, "zero_comm_elements_remat: accum = ", accum,
            ", expected >= 1 micro-batches per step");
  const double base = zero_comm_elements(stage, psi, ranks);
  const double A = static_cast<double>(accum);
  if (stage == 3) return A * (base + recomputed_params * (ranks - 1) / ranks);
  // Stage 2: one reduce-scatter of psi per micro-batch, one all-gather per step.
  if (stage == 2) return base + (A - 1) * psi * (ranks - 1) / ranks;
  return base;  // stages 0-1: the accumulated gradient is reduced once
}

std::string zero_table(double psi, int ranks, double k) {
  std::ostringstream o;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "ZeRO model-state memory per rank: psi = %.4g parameters, N = %d ranks, K = %g "
                "(bf16 params and grads)\n",
                psi, ranks, k);
  o << buf;
  std::snprintf(buf, sizeof buf, "%-28s %14s %14s %14s %14s\n", "stage", "params", "grads",
                "optimizer", "total");
  o << buf;
  const char* names[] = {"0 baseline (2+2+K)psi", "1 P_os 4psi+K*psi/N", "2 P_os+g 2psi+(2+K)psi/N",
                         "3 P_os+g+p (2+2+K)psi/N"};
  for (int s = 0; s < 4; ++s) {
    const ZeroBytes b = zero_memory(s, psi, ranks, k);
    std::snprintf(buf, sizeof buf, "%-28s %14s %14s %14s %14s\n", names[s], mem::gb(b.params, 2).c_str(),
                  mem::gb(b.grads, 2).c_str(), mem::gb(b.optimizer, 2).c_str(), mem::gb(b.total).c_str());
    o << buf;
  }
  return o.str();
}

// ---- units and the partition --------------------------------------------------------------------

namespace {

/// Per-layer size of tensor k (2..13) of config.hpp's layout; whole size for the others.
std::int64_t tensor_size(const GPTConfig& cfg, int k) {
  const auto shapes = param_shapes(cfg);
  std::int64_t n = 1;
  for (auto d : shapes[static_cast<std::size_t>(k)]) n *= d;
  return n;
}

/// Calls f(flat_offset, unit_offset, count) for every contiguous run of the mapping.
template <class F>
void for_each_run(const GPTConfig& cfg, F&& f) {
  const auto off = param_offsets(cfg);
  const std::int64_t L = cfg.n_layer;
  std::int64_t u = 0;
  for (int k = 0; k < 2; ++k) {
    f(off[static_cast<std::size_t>(k)], u, tensor_size(cfg, k));
    u += tensor_size(cfg, k);
  }
  for (std::int64_t l = 0; l < L; ++l)
    for (int k = 2; k <= 13; ++k) {
      const std::int64_t per = tensor_size(cfg, k) / L;
      f(off[static_cast<std::size_t>(k)] + l * per, u, per);
      u += per;
    }
  for (int k = 14; k < 16; ++k) {
    f(off[static_cast<std::size_t>(k)], u, tensor_size(cfg, k));
    u += tensor_size(cfg, k);
  }
}

}  // namespace

std::vector<ZeroUnit> zero_units(const GPTConfig& cfg) {
  cfg.validate();
  std::vector<ZeroUnit> units;
  std::int64_t o = 0;
  const std::int64_t emb = tensor_size(cfg, 0) + tensor_size(cfg, 1);
  units.push_back({"embeddings", o, emb});
  o += emb;
  std::int64_t layer = 0;
  for (int k = 2; k <= 13; ++k) layer += tensor_size(cfg, k) / cfg.n_layer;
  for (std::int64_t l = 0; l < cfg.n_layer; ++l) {
    units.push_back({"block " + std::to_string(l), o, layer});
    o += layer;
  }
  units.push_back({"final layernorm", o, 2 * cfg.n_embd});
  return units;
}

std::vector<float> to_unit_layout(const GPTConfig& cfg, const float* flat) {
  std::vector<float> out(static_cast<std::size_t>(num_params(cfg)));
  for_each_run(cfg, [&](std::int64_t f, std::int64_t u, std::int64_t n) {
    std::memcpy(out.data() + u, flat + f, static_cast<std::size_t>(n) * sizeof(float));
  });
  return out;
}

void from_unit_layout(const GPTConfig& cfg, const float* units, float* flat) {
  for_each_run(cfg, [&](std::int64_t f, std::int64_t u, std::int64_t n) {
    std::memcpy(flat + f, units + u, static_cast<std::size_t>(n) * sizeof(float));
  });
}

std::vector<std::uint8_t> unit_decay_mask(const GPTConfig& cfg) {
  const std::int64_t n = num_params(cfg);
  std::vector<std::uint8_t> flat(static_cast<std::size_t>(n));
  const auto off = param_offsets(cfg);
  for (int k = 0; k < kNumParamTensors; ++k) {
    const std::int64_t b = off[static_cast<std::size_t>(k)], e = k + 1 < kNumParamTensors ? off[static_cast<std::size_t>(k) + 1] : n;
    std::fill(flat.begin() + b, flat.begin() + e, param_decays(k) ? 1 : 0);
  }
  std::vector<std::uint8_t> out(static_cast<std::size_t>(n));
  for_each_run(cfg, [&](std::int64_t f, std::int64_t u, std::int64_t c) {
    std::memcpy(out.data() + u, flat.data() + f, static_cast<std::size_t>(c));
  });
  return out;
}

Partition make_partition(const std::vector<ZeroUnit>& units, int ranks, int rank) {
  // BEGIN SOLUTION
  MLS_CHECK(ranks >= 1, "make_partition: ranks = ", ranks, ", expected >= 1");
  MLS_CHECK(rank >= 0 && rank < ranks, "make_partition: rank = ", rank, ", expected 0 <= rank < ",
            ranks);
  Partition p;
  p.ranks = ranks;
  p.rank = rank;
  for (const ZeroUnit& u : units) {
    p.bounds.push_back(parallel::chunk_bounds(u.size, ranks));
    const auto& b = p.bounds.back();
    p.mine.push_back({b[static_cast<std::size_t>(rank)], b[static_cast<std::size_t>(rank) + 1], p.shard_size});
    p.shard_size += b[static_cast<std::size_t>(rank) + 1] - b[static_cast<std::size_t>(rank)];
  }
  return p;
  // END SOLUTION
}

// ---- bf16 ---------------------------------------------------------------------------------------

std::uint16_t to_bf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

float from_bf16(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

bool cpu_has_avx512_bf16() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) return line.find("avx512_bf16") != std::string::npos;
  return false;
}

const char* to_string(Precision p) { return p == Precision::BF16 ? "bf16" : "fp32"; }

Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::FP32;
  if (s == "bf16") return Precision::BF16;
  if (s == "fp16")
    fail("parse_precision: precision 'fp16' is not supported (its 5-bit exponent needs loss "
         "scaling, which this trainer does not do), expected fp32 or bf16");
  fail("parse_precision: unknown precision '", s, "', expected fp32 or bf16");
}

void ZeroOptions::validate() const {
  MLS_CHECK(stage >= 0 && stage <= 3, "ZeRO: stage = ", stage, ", expected 0, 1, 2 or 3");
  MLS_CHECK(remat == "none" || remat == "sqrt" || remat == "optimal", "ZeRO: remat plan '", remat,
            "', expected none, sqrt or optimal");
  MLS_CHECK(remat_budget >= 0, "ZeRO: remat budget = ", remat_budget,
            " bytes, expected >= 0 (0: what the sqrt plan needs)");
  MLS_CHECK(accum >= 1, "ZeRO: accum = ", accum, ", expected >= 1 micro-batches per step");
}

void ZeroRunOptions::validate() const {
  cfg.validate();
  zero.validate();
  MLS_CHECK(batch >= 1, "ZeRO run: batch = ", batch, " per rank, expected >= 1");
  MLS_CHECK(batch % zero.accum == 0, "ZeRO run: accum = ", zero.accum, " does not divide batch = ",
            batch, " per rank, expected a divisor of the batch (micro-batch = batch / accum)");
  MLS_CHECK(context >= 1 && context <= cfg.block_size, "ZeRO run: context = ", context,
            ", expected 1..block_size = ", cfg.block_size);
  MLS_CHECK(steps >= 1, "ZeRO run: steps = ", steps, ", expected >= 1");
  MLS_CHECK(lr > 0 && std::isfinite(lr), "ZeRO run: lr = ", lr, ", expected a finite lr > 0");
  try {
    (void)gpt_plan(zero.remat, cfg, batch / zero.accum, context, zero.remat_budget);
  } catch (const Error& e) {
    fail("ZeRO run: remat ", zero.remat, " at ZeRO stage ", zero.stage, ": ", e.what());
  }
}

ZeroBackend parse_zero_backend(const std::string& s) {
  if (s == "sim") return ZeroBackend::Sim;
  if (s == "mpi") return ZeroBackend::Mpi;
  if (s == "nccl") return ZeroBackend::Nccl;
  fail("train --backend: '", s, "', expected sim, mpi or nccl");
}

int zero_run_ranks(ZeroBackend backend, std::optional<int> requested, int world) {
  if (backend == ZeroBackend::Sim) {
    if (!requested) return 2;
    MLS_CHECK(*requested >= 1 && *requested <= 64, "train --ranks ", *requested,
              ": expected 1..64 simulated ranks");
    return *requested;
  }
  const char* launcher = backend == ZeroBackend::Mpi ? "mpirun" : "mpirun (NCCL, one GPU per rank)";
  MLS_CHECK(world >= 1, "train --backend: a world of ", world, " ranks, expected >= 1");
  MLS_CHECK(!requested || *requested == world, "train --ranks ", requested.value_or(0), " but ",
            launcher, " started ", world, " processes (the ranks are the processes: leave --ranks "
            "out or pass ", world, ")");
  return world;
}

PrecisionBytes precision_bytes(Precision p) {
  if (p == Precision::BF16) return {2, 2, 12};
  return {4, 4, 8};
}

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
};

namespace {
/// Adds the wall time of its scope to `acc`.
struct CommTimer {
  double& acc;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  explicit CommTimer(double& a) : acc(a) {}
  ~CommTimer() { acc += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
};
}  // namespace

ZeroTrainer::ZeroTrainer(parallel::Communicator& comm, const GPTConfig& cfg, const GPTParams& init,
                         const ZeroOptions& opts)
    : impl_(std::make_unique<Impl>()), comm_(&comm), cfg_(cfg), opts_(opts) {
  cfg.validate();
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
    const std::int64_t remat_code = opts.remat == "none" ? 0 : opts.remat == "sqrt" ? 1 : 2;
    const std::int64_t mine[] = {cfg.vocab_size, cfg.block_size, cfg.n_layer, cfg.n_head, cfg.n_embd,
                                 opts.stage, static_cast<std::int64_t>(opts.precision),
                                 remat_code, opts.remat_budget, opts.accum,
                                 static_cast<std::int64_t>(fnv1a(init.data(), sizeof(float) * static_cast<std::size_t>(init.size())) >> 1)};
    const char* names[] = {"vocab_size", "block_size", "n_layer", "n_head", "n_embd",
                           "stage", "precision", "remat plan (none 0, sqrt 1, optimal 2)",
                           "remat budget", "accum (micro-batches per step)", "initial parameters (hash)"};
    constexpr int F = 11;
    Tensor t = Tensor::empty({F}, DType::Int64);
    std::copy(mine, mine + F, t.data<std::int64_t>());
    Tensor all = comm.allgather(t);
    const std::int64_t* a = all.data<std::int64_t>();
    for (int r = 1; r < I.N; ++r)
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
}

ZeroTrainer::~ZeroTrainer() = default;

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
  float* d = t.data<float>();
  for (std::int64_t j = r.unit_begin; j < r.unit_end; ++j) {
    const std::int64_t si = r.shard_offset + (j - r.unit_begin);
    d[j] = I.bf16 ? from_bf16(I.p16[si]) : I.p32[si];
  }
  {
    CommTimer ct(I.comm_s);
    comm_->allgather_inplace(t, part_.bounds[static_cast<std::size_t>(unit)]);
  }
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
    if (t.impl_->stage == 3 && !t.impl_->gathered[static_cast<std::size_t>(u)]) t.gather(u);
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
    I.ra = std::make_unique<RematActivations>(cfg_, Bm, T, gpt_plan(opts_.remat, cfg_, Bm, T, opts_.remat_budget));
  }
  RematActivations& ra = *I.ra;
  ra.reset_counters();
  // The gradient is that of the mean loss over every rank's whole batch: sum(mask·loss) over the
  // ranks / G, G = the mask's sum over the ranks. The ranks' gradients are averaged (divided by
  // N) after the reduction, so each rank divides its losses by G / N. Without a mask G = N·B·T
  // is known locally (no collective: G / N = B·T); with one, G is one allreduce, not counted in
  // the step's traffic (as the loss's allreduce below).
  const double norm = whole.mask ? global_mask_sum(whole) / I.N : static_cast<double>(B * T);
  const std::int64_t before = comm_->traffic().total.bytes_sent;
  const double comm_before = I.comm_s;
  Access acc(*this);
  const double loss_sum = accumulate_gradients(cfg_, acc, PassBuffers::recompute(ra), whole, A, norm);
  reduce_and_update(lr);
  ZeroStepStats st;
  st.bytes_sent = comm_->traffic().total.bytes_sent - before;
  st.elements_sent = st.bytes_sent / 4;  // fp32 on the wire
  st.comm_wall_s = I.comm_s - comm_before;
  {
    mem::TagScope ts(mem::Tag::Communication, I.rank);
    Tensor l1 = Tensor::full({1}, norm > 0 ? loss_sum / norm : 0.0, DType::Float64);
    comm_->allreduce(l1, parallel::ReduceOp::Sum);
    st.loss = l1.data<double>()[0] / I.N;
  }
  return st;
}

double ZeroTrainer::global_mask_sum(const MicroBatch& whole) {
  Impl& I = *impl_;
  mem::TagScope ts(mem::Tag::Communication, I.rank);
  Tensor t = Tensor::full({1}, mask_sum(whole.mask, whole.B * whole.T), DType::Float64);
  CommTimer ct(I.comm_s);
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
    const ShardRange& r = part_.mine[k];
    mem::TagScope ts(mem::Tag::Communication, I.rank);
    Tensor t = Tensor::empty({U.size});
    std::copy(bucket, bucket + U.size, t.data<float>());
    Tensor mine;
    {
      CommTimer ct(I.comm_s);
      mine = comm_->reduce_scatter(t, parallel::ReduceOp::Sum, parallel::Algo::Ring);
    }
    const float* d = mine.data<float>();
    const float n = static_cast<float>(I.N);
    // The first micro-batch stores, the later ones add into the shard (all that is kept).
    for (std::int64_t j = 0; j < r.unit_end - r.unit_begin; ++j) {
      const float gj = d[j] / n;
      const std::int64_t i = r.shard_offset + j;
      if (I.bf16)
        I.g16[i] = to_bf16(micro == 0 ? gj : from_bf16(I.g16[i]) + gj);
      else
        I.g32[i] = micro == 0 ? gj : I.g32[i] + gj;
    }
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

void ZeroTrainer::reduce_and_update(double lr) {
  // BEGIN SOLUTION
  Impl& I = *impl_;
  const float n = static_cast<float>(I.N);
  // Stages 0-1: reduce the whole gradient (stage 0: allreduce; stage 1: reduce-scatter, this
  // rank only needs its chunk). The same ring and chunks as stage 2's reduce-scatter, so the
  // sums are bit-identical.
  if (I.stage <= 1) {
    for (std::size_t k = 0; k < units_.size(); ++k) {
      const ZeroUnit& U = units_[k];
      mem::TagScope ts(mem::Tag::Communication, I.rank);
      Tensor t = Tensor::empty({U.size});
      float* d = t.data<float>();
      for (std::int64_t j = 0; j < U.size; ++j)
        d[j] = I.bf16 ? from_bf16(I.g16[U.offset + j]) : I.g32[U.offset + j];
      std::int64_t b = 0, e = U.size;
      CommTimer ct(I.comm_s);
      if (I.stage == 0) {
        comm_->allreduce(t, parallel::ReduceOp::Sum, parallel::Algo::Ring);
      } else {
        Tensor mine = comm_->reduce_scatter(t, parallel::ReduceOp::Sum, parallel::Algo::Ring);
        b = part_.mine[k].unit_begin;
        e = part_.mine[k].unit_end;
        std::copy(mine.data<float>(), mine.data<float>() + (e - b), d + b);
      }
      for (std::int64_t j = b; j < e; ++j) {
        const float gj = d[j] / n;
        if (I.bf16)
          I.g16[U.offset + j] = to_bf16(gj);
        else
          I.g32[U.offset + j] = gj;
      }
    }
  }
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
      const ZeroStepStats st = tr.step(in.data(), tg.data(), o.batch, o.context, o.lr);
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
                  r.remat.c_str(), r.plan.c_str(), static_cast<long long>(r.recomputed_blocks),
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
