// Student file of lab 6: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Lab 6, part 2, ZeRO (1 of 3): the formulas, the units and their partition over the ranks, bf16,
// and the options. The engine is zero.cpp, the runs and their tables zero_run.cpp.
#include "mls/llm/zero.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "mls/common/error.hpp"
#include "zero_internal.hpp"

namespace mls::llm {

using zero_detail::tensor_size;

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
  MLS_CHECK(remat_budget >= 0, "ZeRO: remat budget = ", remat_budget,
            " bytes, expected >= 0 (0: what the sqrt plan needs)");
  MLS_CHECK(accum >= 1, "ZeRO: accum = ", accum, ", expected >= 1 micro-batches per step");
  MLS_CHECK(prefetch >= 0 && prefetch <= 8, "ZeRO: prefetch = ", prefetch,
            ", expected 0..8 units gathered ahead (each costs a gathered unit of memory)");
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

}  // namespace mls::llm
