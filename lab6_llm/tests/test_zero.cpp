// Lab 6, part 2: ZeRO stages 0-3, mixed precision and the memory tracker.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <set>

#include "lab6_helpers.hpp"
#include "util.hpp"
#include "zero_testing.hpp"
#include "mls/common/memory.hpp"
#include "mls/llm/train.hpp"
#include "mls/llm/zero.hpp"
#include "mls/parallel/comm.hpp"
#include "mls/tensor/tensor.hpp"

using namespace mls;
using namespace mls::llm;
using llm_test::require_error;
using mls::testing::observe;

namespace {

GPTConfig nano(std::int64_t V = 37) {
  GPTConfig c = config_by_name("nano");
  c.vocab_size = V;  // odd: units that no N > 1 divides
  return c;
}

ZeroRunOptions run_opts(int stage, Precision p, std::int64_t steps = 10, std::int64_t V = 37) {
  return llm_test::zero_run_options(stage, p, steps, V);
}

double max_rel(const GPTParams& a, const GPTParams& b) {
  double m = 0;
  for (std::int64_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(double(a.data()[i]) - b.data()[i]);
    m = std::max(m, d / std::max(1e-6, std::abs(double(b.data()[i]))));
  }
  return m;
}

/// Naive bf16 rounding through double arithmetic: the nearest multiple of the bf16 spacing, ties
/// to an even mantissa.
float naive_bf16(float x) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e;
  std::frexp(static_cast<double>(x), &e);  // |x| in [2^(e-1), 2^e)
  const double ulp = std::ldexp(1.0, e - 8);  // 8 significant bits
  const double q = static_cast<double>(x) / ulp;
  double r = std::nearbyint(q);  // ties to even (default rounding mode)
  return static_cast<float>(r * ulp);
}

}  // namespace

TEST_CASE("zero: the slides' memory table (7.5e9 params, 64 ranks, K = 12)", "[lab6][zero_formula]") {
  const double psi = 7.5e9;
  for (int s = 0; s < 4; ++s) {
    const ZeroBytes b = zero_memory(s, psi, 64, 12);
    observe("total", b.total, {1e-9, 0});
    observe("params, grads, optimizer", std::vector<double>{b.params, b.grads, b.optimizer}, {1e-9, 0});
    // The oracle: the slides' table, after the code ran.
    MLS_ORACLE(const double expect[] = {120e9, 31.40625e9, 16.640625e9, 1.875e9};)
    MLS_ORACLE_CHECK(CHECK(b.total == Approx(expect[s]).epsilon(1e-12));
                     CHECK(b.params + b.grads + b.optimizer == Approx(b.total)));
  }
  const std::string t = zero_table(psi, 64, 12);
  observe("table", t);
  MLS_ORACLE_CHECK(for (const char* gbs : {"120.0 GB", "31.4 GB", "16.6 GB", "1.9 GB"})
                       CHECK(t.find(gbs) != std::string::npos));
  // Other Psi, N, K against the formulas written out (oracles).
  for (double P : {1e6, 3.3e8, 1.75e11})
    for (int N : {1, 3, 8, 1024})
      for (double K : {8.0, 12.0, 16.0}) {
        observe("totals of stages 0-3, stage 3 peak",
                std::vector<double>{zero_memory(0, P, N, K).total, zero_memory(1, P, N, K).total,
                                    zero_memory(2, P, N, K).total, zero_memory(3, P, N, K).total,
                                    zero3_peak_bytes(P, N, 1000, K)},
                {1e-9, 0});
        MLS_ORACLE_CHECK(CHECK(zero_memory(0, P, N, K).total == Approx((4 + K) * P));
                         CHECK(zero_memory(1, P, N, K).total == Approx(4 * P + K * P / N));
                         CHECK(zero_memory(2, P, N, K).total == Approx(2 * P + (2 + K) * P / N));
                         CHECK(zero_memory(3, P, N, K).total == Approx((4 + K) * P / N));
                         CHECK(zero3_peak_bytes(P, N, 1000, K) == Approx((4 + K) * P / N + 2000)));
      }
  MLS_CHECK_EQ(zero_memory(2, 100, 4, 8, 4, 4).grads, 100);
  observe("fp32 stage 1 optimizer", zero_memory(1, 100, 4, 8, 4, 4).optimizer);
}

TEST_CASE("zero: communication formulas 2psi(N-1)/N and 3psi(N-1)/N, ratio 1.5", "[lab6][zero_formula]") {
  for (double P : {10.0, 7.5e9})
    for (int N : {1, 2, 5, 64}) {
      observe("stages 0-2 elements",
              std::vector<double>{zero_comm_elements(0, P, N), zero_comm_elements(1, P, N), zero_comm_elements(2, P, N)},
              {1e-12, 0});
      observe("stage 3 elements", zero_comm_elements(3, P, N), {1e-12, 0});
      // The oracle: the formulas written out, after the code ran.
      MLS_ORACLE_CHECK(for (int s = 0; s < 3; ++s) CHECK(zero_comm_elements(s, P, N) == Approx(2 * P * (N - 1) / N));
                       CHECK(zero_comm_elements(3, P, N) == Approx(3 * P * (N - 1) / N));
                       if (N > 1) CHECK(zero_comm_elements(3, P, N) / zero_comm_elements(2, P, N) == Approx(1.5)));
    }
}

TEST_CASE("zero: bad input to the formulas and the partition", "[lab6][zero_formula]") {
  require_error([] { zero_memory(4, 1e9, 8); }, "stage = 4");
  require_error([] { zero_memory(1, 1e9, 0); }, "ranks = 0");
  require_error([] { zero_memory(1, -1, 2); }, "psi = -1");
  require_error([] { zero_comm_elements(-1, 1e9, 8); }, "stage = -1");
  require_error([] { make_partition(zero_units(nano()), 0, 0); }, "ranks = 0");
  require_error([] { make_partition(zero_units(nano()), 3, 3); }, "rank = 3");
  require_error([] { parse_precision("fp8"); }, "fp8");
  observe("valid stage 3 total", zero_memory(3, 1e9, 8).total, {1e-12, 0});
  observe("valid shard", make_partition(zero_units(nano()), 3, 2).shard_size);
}

TEST_CASE("zero: units, unit layout and the uneven partition cover every parameter once", "[lab6][zero_partition]") {
  const GPTConfig cfg = nano();
  const auto units = zero_units(cfg);
  REQUIRE(units.size() == static_cast<std::size_t>(cfg.n_layer + 2));
  std::int64_t total = 0;
  for (const auto& u : units) {
    CHECK(u.offset == total);
    total += u.size;
  }
  CHECK(total == num_params(cfg));
  observe("units", static_cast<std::int64_t>(units.size()));
  // Round trip of the layout, and the decay mask against the flat layout's tensors.
  GPTParams p = init_params(cfg, 5);
  const std::vector<float> u = to_unit_layout(cfg, p.data());
  GPTParams back(cfg);
  from_unit_layout(cfg, u.data(), back.data());
  CHECK(std::memcmp(back.data(), p.data(), sizeof(float) * p.size()) == 0);
  CHECK(std::multiset<float>(u.begin(), u.end()) == std::multiset<float>(p.vec().begin(), p.vec().end()));
  const auto mask = unit_decay_mask(cfg);
  std::int64_t decayed = 0;
  for (auto m : mask) decayed += m;
  observe("decayed", decayed);
  // The oracle: the decayed tensors' sizes, after the code ran.
  MLS_ORACLE(std::int64_t expect = 0;
             const auto shapes = param_shapes(cfg);
             for (int k = 0; k < kNumParamTensors; ++k)
               if (param_decays(k)) {
                 std::int64_t n = 1;
                 for (auto d : shapes[k]) n *= d;
                 expect += n;
               })
  MLS_ORACLE_CHECK(CHECK(decayed == expect));
  for (int N : {1, 2, 3, 5, 7}) {
    std::vector<std::int64_t> owner(static_cast<std::size_t>(total), -1);
    std::int64_t sum = 0, lo = total, hi = 0;
    for (int r = 0; r < N; ++r) {
      const Partition part = make_partition(units, N, r);
      std::int64_t s = 0;
      for (std::size_t k = 0; k < units.size(); ++k) {
        const ShardRange& m = part.mine[k];
        CHECK(m.shard_offset == s);
        s += m.unit_end - m.unit_begin;
        // chunk sizes differ by at most one within a unit
        CHECK(m.unit_end - m.unit_begin >= units[k].size / N);
        CHECK(m.unit_end - m.unit_begin <= units[k].size / N + 1);
        for (std::int64_t j = m.unit_begin; j < m.unit_end; ++j) {
          CHECK(owner[static_cast<std::size_t>(units[k].offset + j)] == -1);
          owner[static_cast<std::size_t>(units[k].offset + j)] = r;
        }
      }
      CHECK(s == part.shard_size);
      sum += s;
      lo = std::min(lo, s);
      hi = std::max(hi, s);
    }
    CHECK(sum == total);
    CHECK(std::count(owner.begin(), owner.end(), -1) == 0);
    CHECK(hi - lo <= static_cast<std::int64_t>(units.size()));
    observe("largest shard", hi);
  }
}

TEST_CASE("precision: bf16 rounding is round-to-nearest-even against a naive reference", "[lab6][zero_plumbing]") {
  Rng rng(3, "bf16");
  std::vector<float> xs, rounded;
  for (int i = 0; i < 20000; ++i) {
    const float x = static_cast<float>(rng.normal(0, std::pow(10.0, rng.uniform(-6, 6))));
    xs.push_back(x);
    rounded.push_back(round_bf16(x));
  }
  observe("round_bf16 of 20000 floats", rounded);
  // The oracle: naive rounding through double arithmetic, after the code ran.
  MLS_ORACLE(int mismatches = 0;
             for (std::size_t i = 0; i < xs.size(); ++i)
               if (rounded[i] != naive_bf16(xs[i])) ++mismatches;)
  MLS_ORACLE_CHECK(CHECK(mismatches == 0));
  // Exact ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
  MLS_CHECK_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  MLS_CHECK_EQ(round_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  CHECK(std::isnan(round_bf16(std::nanf(""))));
  CHECK(std::isinf(round_bf16(INFINITY)));
  MLS_CHECK_EQ(from_bf16(to_bf16(-2.5f)), -2.5f);
  observe("bf16(pi)", round_bf16(3.14159265f));
  MLS_CHECK_EQ(precision_bytes(Precision::BF16).k, 12);
  MLS_CHECK_EQ(precision_bytes(Precision::FP32).k, 8);
  observe("parse_precision(bf16)", static_cast<std::int64_t>(parse_precision("bf16")));
  MLS_ORACLE_CHECK(CHECK(parse_precision("bf16") == Precision::BF16));
  observe("avx512_bf16", cpu_has_avx512_bf16());
}

TEST_CASE("zero: stage 0 on one rank equals the fused trainer bit for bit (fp32)", "[lab6][zero]") {
  const GPTConfig cfg = nano();
  const std::int64_t B = 2, T = 8, steps = 5;
  const double lr = 3e-3;
  ZeroRunOptions o = run_opts(0, Precision::FP32, steps);
  GPTParams got;
  const ZeroRunReport r = run_zero_simulated(1, o, &got);
  observe("final loss", r.losses.back(), {1e-6, 0});
  observe("losses", r.losses, {1e-6, 0});
  observe("parameters", got.vec(), {1e-6, 1e-7});
  // The oracle: the fused trainer's steps, after the ZeRO run.
  MLS_ORACLE(GPTParams ref = init_params(cfg, 1337);
             GPTGrads g(cfg);
             AdamWState st(ref.size());
             GPTActivations a(cfg, B, T), da(cfg, B, T);
             std::vector<std::int32_t> in(B * T), tg(B * T);
             std::vector<double> ref_losses;
             for (std::int64_t s = 0; s < steps; ++s) {
               zero_batch(cfg, B, T, 1337, s, 0, in.data(), tg.data());
               ref_losses.push_back(gpt_forward(ref, a, in.data(), tg.data(), nullptr, B, T));
               g.zero();
               gpt_backward(ref, g, a, da, in.data(), tg.data(), nullptr);
               adamw_update(ref, g, st, AdamWOptions{}, lr);
             })
  MLS_ORACLE_CHECK(REQUIRE(got.size() == ref.size()); REQUIRE(r.losses.size() == ref_losses.size());
                   CHECK(std::memcmp(got.data(), ref.data(), sizeof(float) * ref.size()) == 0);
                   for (std::int64_t s = 0; s < steps; ++s) CHECK(r.losses[s] == ref_losses[s]);
                   CHECK(max_rel(got, ref) == 0.0));
}

namespace {

/// Rows [r0, r0 + rows) of a batch.
Batch batch_rows(const Batch& b, std::int64_t r0, std::int64_t rows) {
  Batch out;
  out.B = rows;
  out.T = b.T;
  const auto begin = static_cast<std::ptrdiff_t>(r0 * b.T), end = static_cast<std::ptrdiff_t>((r0 + rows) * b.T);
  out.inputs.assign(b.inputs.begin() + begin, b.inputs.begin() + end);
  out.targets.assign(b.targets.begin() + begin, b.targets.begin() + end);
  out.mask.assign(b.mask.begin() + begin, b.mask.begin() + end);
  return out;
}

}  // namespace

TEST_CASE("zero: a partly masked batch gives Trainer::step's gradient at every stage (fp32, 1 and 3 ranks, accum 1 and 2)",
          "[lab6][zero]") {
  const GPTConfig cfg = nano();
  const std::int64_t B = 4, T = 8;  // rows per rank
  const double lr = 3e-3;
  for (int N : {1, 3})
    for (std::int64_t accum : {1, 2})
      for (int stage = 0; stage <= 3; ++stage) {
        INFO(N << " ranks, accum " << accum << ", stage " << stage);
        // One batch of N*B rows, about 30% of its targets masked out; rank r trains on rows r*B..
        Rng rng(21, "zero-mask");
        const Batch whole = llm_test::random_batch(cfg, N * B, T, rng);
        ZeroOptions zo;
        zo.stage = stage;
        zo.accum = accum;
        GPTGrads grad;
        GPTParams after;
        double loss = 0;
        parallel::run_simulated(N, [&](parallel::Communicator& c) {
          ZeroTrainer tr(c, cfg, init_params(cfg, 5), zo);
          const double l = tr.step(batch_rows(whole, c.rank() * B, B), lr).loss;
          GPTGrads g = tr.gather_grads();
          GPTParams p = tr.gather_params();
          if (c.rank() == 0) {
            loss = l;
            grad = std::move(g);
            after = std::move(p);
          }
        });
        observe("loss", loss, {1e-6, 0});
        observe("gradient", grad.vec(), {1e-5, 1e-7});
        observe("parameters", after.vec(), {1e-6, 1e-7});
        // The oracle: Trainer::step on all the ranks' rows as one batch (no clipping, the same lr).
        MLS_ORACLE(TrainOptions o; o.batch = N * B; o.context = T; o.steps = 10; o.warmup = 0;
                   o.lr = lr; o.min_lr = lr; o.grad_clip = 0; o.accum = N == 1 ? accum : 1;
                   Trainer ref(init_params(cfg, 5), o); const StepStats rs = ref.step(whole);
                   double gmax = 0, gdiff = 0;
                   for (std::int64_t i = 0; i < ref.grads.size(); ++i) {
                     gmax = std::max(gmax, std::abs(double(ref.grads.data()[i])));
                     gdiff = std::max(gdiff, std::abs(double(grad.data()[i]) - ref.grads.data()[i]));
                   })
        MLS_ORACLE_CHECK(
            REQUIRE(grad.size() == ref.grads.size()); CHECK(loss == Approx(rs.loss).epsilon(1e-6));
            CHECK(gdiff <= 1e-5 * gmax);
            // One rank, one micro-batch: the same sums in the same order as the trainer, bit for
            // bit (with accum 2 the trainer adds micro-batch 2 inside its GEMMs, ZeRO adds a
            // bucket: float32 rounding apart).
            if (N == 1 && accum == 1) {
              CHECK(loss == rs.loss);
              CHECK(std::memcmp(grad.data(), ref.grads.data(), sizeof(float) * grad.size()) == 0);
              CHECK(std::memcmp(after.data(), ref.params.data(), sizeof(float) * after.size()) == 0);
            });
      }
}

TEST_CASE("zero: stages 0-3 give the same parameters after 10 steps, 3 ranks, uneven (fp32)", "[lab6][zero]") {
  std::vector<GPTParams> ps(4);
  std::vector<ZeroRunReport> rs;
  for (int s = 1; s <= 3; ++s) {
    rs.push_back(run_zero_simulated(3, run_opts(s, Precision::FP32), &ps[static_cast<std::size_t>(s)]));
    observe("final loss", rs.back().losses.back(), {1e-6, 0});
    observe("losses", rs.back().losses, {1e-6, 0});
    observe("parameters", ps[static_cast<std::size_t>(s)].vec(), {1e-6, 1e-7});
  }
  // The oracle: stage 0 (plain data parallel), after the sharded runs.
  MLS_ORACLE(GPTParams p0; const ZeroRunReport r0 = run_zero_simulated(3, run_opts(0, Precision::FP32), &p0);)
  MLS_ORACLE_CHECK(
      CHECK(r0.losses.back() < r0.losses.front());
      for (int s = 1; s <= 3; ++s) {
        INFO("stage " << s);
        const GPTParams& q = ps[static_cast<std::size_t>(s)];
        REQUIRE(q.size() == p0.size());
        CHECK(max_rel(q, p0) <= 1e-6);
        // The reduction order is fixed (the same ring over the same chunks): bit-identical.
        CHECK(std::memcmp(q.data(), p0.data(), sizeof(float) * p0.size()) == 0);
        CHECK(rs[static_cast<std::size_t>(s - 1)].losses == r0.losses);
      });
}

TEST_CASE("precision: ZeRO stages 0-3 agree in bf16 with fp32 master weights, 2 ranks", "[lab6][precision]") {
  for (int s = 1; s <= 3; ++s) {
    GPTParams ps;
    const ZeroRunReport rs = run_zero_simulated(2, run_opts(s, Precision::BF16), &ps);
    INFO("stage " << s);
    observe("final loss", rs.losses.back(), {1e-6, 0});
    observe("losses", rs.losses, {1e-6, 0});
    observe("parameters", ps.vec(), {1e-6, 1e-7});
    std::int64_t not_bf16 = 0;  // the parameters of a bf16 run are bf16 values
    for (std::int64_t i = 0; i < ps.size(); ++i) not_bf16 += round_bf16(ps.data()[i]) != ps.data()[i] ? 1 : 0;
    observe("parameters that are not bf16 values", not_bf16);
    // The oracle: stage 0 in bf16, after the sharded run.
    MLS_ORACLE(GPTParams p0; const ZeroRunReport r0 = run_zero_simulated(2, run_opts(0, Precision::BF16), &p0);)
    MLS_ORACLE_CHECK(for (std::int64_t i = 0; i < p0.size(); ++i) REQUIRE(round_bf16(p0.data()[i]) == p0.data()[i]);
                     REQUIRE(ps.size() == p0.size());
                     CHECK(std::memcmp(ps.data(), p0.data(), sizeof(float) * p0.size()) == 0);
                     CHECK(rs.losses == r0.losses));
  }
}

TEST_CASE("zero: measured model-state bytes per rank equal the formula exactly", "[lab6][zero_memory]") {
  for (Precision p : {Precision::FP32, Precision::BF16})
    for (int N : {1, 3, 4})
      for (int s = 0; s <= 3; ++s) {
        const ZeroRunReport r = run_zero_simulated(N, run_opts(s, p, 2));
        INFO("stage " << s << ", N = " << N << ", " << to_string(p) << "\n" << memory_table(r));
        std::int64_t shards = 0;
        for (int k = 0; k < N; ++k) {
          const ZeroBytes e = expected_bytes(r, k);
          const auto& pk = r.peak[static_cast<std::size_t>(k)];
          CHECK(pk[0] == static_cast<std::int64_t>(e.params));
          CHECK(pk[1] == static_cast<std::int64_t>(e.grads));
          CHECK(pk[2] == static_cast<std::int64_t>(e.optimizer));
          CHECK(pk[3] > 0);  // activations are counted too
          shards += r.shard_sizes[static_cast<std::size_t>(k)];
          observe("params+grads+optimizer", pk[0] + pk[1] + pk[2]);
        }
        CHECK(shards == r.psi);
        // The oracle: the slides' formula where the shard is psi/N rounded: within one element per unit.
        MLS_ORACLE_CHECK(const PrecisionBytes b = precision_bytes(p);
                         const ZeroBytes f = zero_memory(s, static_cast<double>(r.psi), N, b.k, b.param, b.grad);
                         const double slack = (b.param + b.grad + b.k) * static_cast<double>(r.psi > 0 ? 5 : 0) +
                                              (s == 3 ? b.param * r.largest_unit : 0);
                         CHECK(std::abs(static_cast<double>(r.peak[0][0] + r.peak[0][1] + r.peak[0][2]) - f.total) <=
                               slack + 1e-9));
        CHECK(memory_table(r).find("NO") == std::string::npos);
      }
}

TEST_CASE("zero: counted communication equals 2psi(N-1)/N and 3psi(N-1)/N (ratio 1.5)", "[lab6][zero_comm]") {
  // V = 48: every unit divides by N = 2 and N = 4 (even shards): per-rank counts are exact.
  for (int N : {2, 4}) {
    std::vector<ZeroRunReport> r;
    for (int s = 0; s <= 3; ++s) r.push_back(run_zero_simulated(N, run_opts(s, Precision::FP32, 2, 48)));
    const double psi = static_cast<double>(r[0].psi);
    for (int s = 0; s <= 3; ++s)
      for (int k = 0; k < N; ++k) {
        observe("elements sent", r[s].elements_sent[k]);
        // The oracle: the formula, after the run.
        MLS_ORACLE_CHECK(CHECK(static_cast<double>(r[s].elements_sent[k]) == zero_comm_elements(s, psi, N)));
      }
    MLS_CHECK_EQ(static_cast<double>(r[3].elements_sent[0]) / static_cast<double>(r[0].elements_sent[0]), 1.5);
    CHECK(comm_table(r[3]).find("1.000000") != std::string::npos);
  }
  // Uneven (V = 37, N = 3): the sum over ranks is exact; rank r sends all but its own chunk
  // (reduce-scatter) and all but chunk r+1 (all-gather).
  const int N = 3;
  for (int s = 0; s <= 3; ++s) {
    const ZeroRunReport r = run_zero_simulated(N, run_opts(s, Precision::BF16, 1));
    std::int64_t sum = 0;
    for (int k = 0; k < N; ++k) {
      sum += r.elements_sent[k];
      observe("elements sent", r.elements_sent[k]);
      // The oracle: what each rank of the ring sends, after the run.
      MLS_ORACLE_CHECK(const std::int64_t own = r.shard_sizes[k]; const std::int64_t next = r.shard_sizes[(k + 1) % N];
                       if (s < 3) CHECK(r.elements_sent[k] == 2 * r.psi - own - next);
                       if (s == 3) CHECK(r.elements_sent[k] == 3 * r.psi - 2 * next - own));
    }
    MLS_ORACLE_CHECK(CHECK(static_cast<double>(sum) ==
                           Approx(zero_comm_elements(s, static_cast<double>(r.psi), N) * N).epsilon(1e-12)));
    observe("sum over ranks", sum);
  }
}

TEST_CASE("zero: ranks that disagree on the config get a clear error", "[lab6][zero_plumbing]") {
  require_error(
      [] {
        parallel::run_simulated(2, [](parallel::Communicator& c) {
          GPTConfig cfg = nano();
          if (c.rank() == 1) cfg.n_embd = 24;
          ZeroOptions o;
          o.stage = 2;
          ZeroTrainer tr(c, cfg, init_params(cfg, 1), o);
        });
      },
      "ranks disagree on the config: rank 0 has n_embd = 48, rank 1 has 24");
  require_error(
      [] {
        parallel::run_simulated(2, [](parallel::Communicator& c) {
          const GPTConfig cfg = nano();
          ZeroOptions o;
          o.stage = c.rank() == 0 ? 1 : 3;
          ZeroTrainer tr(c, cfg, init_params(cfg, 1), o);
        });
      },
      "stage = 1, rank 1 has 3");
  require_error(
      [] {
        parallel::run_simulated(2, [](parallel::Communicator& c) {
          const GPTConfig cfg = nano();
          ZeroTrainer tr(c, cfg, init_params(cfg, 1 + c.rank()), ZeroOptions{});
        });
      },
      "initial parameters");
  observe("bf16 optimizer bytes per parameter", precision_bytes(Precision::BF16).k);
}

/// The message of the mls::Error `f` throws ("" when it throws none). Rank threads use it: Catch's
/// assertions are checked afterwards, on the test's own thread.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const mls::Error& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("zero: a ZeRO-3 parameter used before it was gathered is an error", "[lab6][zero]") {
  std::vector<std::vector<std::string>> msgs(2);
  std::vector<float> first(2, 0.f);
  parallel::run_simulated(2, [&](parallel::Communicator& c) {
    const GPTConfig cfg = nano();
    ZeroOptions o;
    o.stage = 3;
    ZeroTrainer tr(c, cfg, init_params(cfg, 1), o);
    auto& m = msgs[static_cast<std::size_t>(c.rank())];
    m.push_back(error_of([&] { tr.unit_params(2); }));
    tr.gather(2);
    first[static_cast<std::size_t>(c.rank())] = tr.unit_params(2)[0];
    m.push_back(error_of([&] { tr.gather(2); }));
    tr.release(2);
    m.push_back(error_of([&] { tr.unit_params(2); }));
    m.push_back(error_of([&] { tr.unit_params(99); }));
    ZeroOptions o1;
    o1.stage = 1;
    ZeroTrainer t1(c, cfg, init_params(cfg, 1), o1);
    m.push_back(error_of([&] { t1.gather(0); }));
    std::vector<std::int32_t> in(8, 0), tg(8, 99);
    m.push_back(error_of([&] { t1.step(in.data(), tg.data(), 1, 8, 1e-3); }));
    m.push_back(error_of([&] { t1.step(in.data(), tg.data(), 1, 64, 1e-3); }));
    // stage 1, fp32: the master copy of this rank's shard is its part of the parameters
    const std::vector<float> ms = t1.master_shard();
    m.push_back(static_cast<std::int64_t>(ms.size()) == t1.partition().shard_size ? "shard ok" : "shard size wrong");
    m.push_back(t1.largest_unit() == t1.units()[1].size ? "largest ok" : "largest wrong");
  });
  const char* needles[] = {"unit 2 (block 1) used before it was gathered", "already gathered",
                           "before it was gathered", "unit 99", "only stage 3 gathers",
                           "token id out of range", "T = 64", "shard ok", "largest ok"};
  for (int r = 0; r < 2; ++r) {
    REQUIRE(msgs[r].size() == 9);
    for (int i = 0; i < 9; ++i) {
      INFO("rank " << r << ": " << msgs[r][i]);
      CHECK(msgs[r][i].find(needles[i]) != std::string::npos);
      observe("error named", msgs[r][i].find(needles[i]) != std::string::npos);
    }
  }
  CHECK(first[0] == first[1]);  // the gathered unit is the same on both ranks: ln1w = 1
  observe("gathered ln1w[0]", first[0]);
  require_error([] { parallel::run_simulated(1, [](parallel::Communicator& c) {
                  ZeroOptions o;
                  o.stage = 5;
                  ZeroTrainer tr(c, nano(), init_params(nano(), 1), o);
                }); },
                "stage = 5");
}

TEST_CASE("precision: the bf16 loss curve stays within 0.1 of fp32 over 200 nano steps", "[lab6][precision]") {
  ZeroRunOptions o = run_opts(0, Precision::FP32, 200);
  o.batch = 4;
  o.context = 16;
  const ZeroRunReport f = run_zero_simulated(1, o);
  o.zero.precision = Precision::BF16;
  const ZeroRunReport b = run_zero_simulated(1, o);
  REQUIRE(f.losses.size() == 200);
  // Mean over windows of 20 steps: the curves agree to 0.1 nats; both learn the stream.
  double worst = 0;
  for (int w = 0; w < 10; ++w) {
    double sf = 0, sb = 0;
    for (int i = 0; i < 20; ++i) {
      sf += f.losses[w * 20 + i];
      sb += b.losses[w * 20 + i];
    }
    worst = std::max(worst, std::abs(sf - sb) / 20);
  }
  CHECK(worst < 0.1);
  CHECK(f.losses.back() < 0.5 * f.losses.front());
  CHECK(b.losses.back() < 0.5 * b.losses.front());
  observe("worst window gap", worst, {0, 0.1});
  observe("fp32 final", f.losses.back(), {0.05, 0.05});
  observe("bf16 final", b.losses.back(), {0.05, 0.05});
}

TEST_CASE("zero: the tracker counts lab 1 tensors and the GPT buffers under their tags", "[lab6][zero_plumbing]") {
  mem::Tracker& t = mem::global();
  t.set_enabled(true);
  t.reset();
  {
    mem::TagScope s(mem::Tag::Activation, 2);
    Tensor x = Tensor::empty({256});
    MLS_CHECK_EQ(t.current(mem::Tag::Activation, 2), 1024);
    Tensor v = x.view({16, 16});  // a view shares the storage: no new bytes
    MLS_CHECK_EQ(t.current(mem::Tag::Activation, 2), 1024);
    {
      mem::TagScope w(mem::Tag::Workspace);
      Tensor y = x.clone();
      MLS_CHECK_EQ(t.current(mem::Tag::Workspace, 2), 1024);
    }
    MLS_CHECK_EQ(t.current(mem::Tag::Workspace, 2), 0);
    observe("activation bytes", t.current(mem::Tag::Activation, 2));
  }
  MLS_CHECK_EQ(t.current(mem::Tag::Activation, 2), 0);
  MLS_CHECK_EQ(t.peak(mem::Tag::Activation, 2), 1024);
  const GPTConfig cfg = nano();
  {
    GPTParams p(cfg);
    GPTGrads g(cfg);
    AdamWState st(p.size());
    GPTActivations a(cfg, 2, 8);
    MLS_CHECK_EQ(t.current(mem::Tag::Parameter, 0), 4 * num_params(cfg));
    MLS_CHECK_EQ(t.current(mem::Tag::Gradient, 0), 4 * num_params(cfg));
    MLS_CHECK_EQ(t.current(mem::Tag::OptimizerState, 0), 8 * num_params(cfg));
    MLS_CHECK_EQ(t.current(mem::Tag::Activation, 0), 4 * a.num_floats());
    observe("activations of (2, 8)", t.current(mem::Tag::Activation, 0));
  }
  MLS_CHECK_EQ(t.current_total(0), 0);
  t.reset();
  t.set_enabled(false);
}

TEST_CASE("zero: the run tables print one row per rank", "[lab6][zero_memory]") {
  const ZeroRunReport r = run_zero_simulated(2, run_opts(3, Precision::BF16, 1));
  const std::string m = memory_table(r), c = comm_table(r);
  CHECK(m.find("stage 3") != std::string::npos);
  CHECK(m.find("yes") != std::string::npos);
  CHECK(c.find("3*psi*(N-1)/N") != std::string::npos);
  observe("memory table lines", static_cast<std::int64_t>(std::count(m.begin(), m.end(), '\n')));
  observe("comm table lines", static_cast<std::int64_t>(std::count(c.begin(), c.end(), '\n')));
}

TEST_CASE("zero remat: stages 0-3 with a sqrt plan give the same parameters as without remat, and fewer activation bytes",
          "[lab6][zero]") {
  // nano has 3 blocks: sqrt cuts [0,2) [2,3) and recomputes blocks 0 and 1 in every backward.
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    const int N = p == Precision::FP32 ? 3 : 2;  // 3 ranks: uneven units
    for (int s = 0; s <= 3; ++s) {
      ZeroRunOptions o = run_opts(s, p);
      GPTParams remat;
      o.zero.remat = "sqrt";
      const ZeroRunReport rs = run_zero_simulated(N, o, &remat);
      INFO("stage " << s << ", " << to_string(p) << "\n" << memory_table(rs));
      MLS_CHECK_EQ(rs.plan, std::string("[0,2) [2,3)"));
      MLS_CHECK_EQ(rs.recomputed_blocks, 2);
      for (int k = 0; k < N; ++k) {
        const auto& pk = rs.peak[static_cast<std::size_t>(k)];
        // The tracker's peak is exactly the plan's buffers.
        CHECK(pk[3] == rs.activation_bytes);
        // The model states are untouched: still the formula (stage 3: one gathered unit at a time).
        const ZeroBytes e = expected_bytes(rs, k);
        CHECK(pk[0] == static_cast<std::int64_t>(e.params));
        CHECK(pk[1] == static_cast<std::int64_t>(e.grads));
        CHECK(pk[2] == static_cast<std::int64_t>(e.optimizer));
      }
      observe("activation bytes with sqrt", rs.peak[0][3]);
      observe("final loss with sqrt", rs.losses.back(), {1e-6, 0});
      observe("losses with sqrt", rs.losses, {1e-6, 0});
      observe("parameters with sqrt", remat.vec(), {1e-6, 1e-7});
      // The oracles: the same stage without remat and stage 0 without remat, after the remat run.
      MLS_ORACLE(GPTParams ref, plain;
                 const ZeroRunReport r0 = run_zero_simulated(N, run_opts(0, p), &ref);
                 ZeroRunOptions on = run_opts(s, p);
                 const ZeroRunReport rn = s == 0 ? r0 : run_zero_simulated(N, on, &plain);
                 if (s == 0) plain = ref;)
      MLS_ORACLE_CHECK(
          CHECK(rn.plan == "[0,3)");
          // The recompute is the same code on the same inputs, and every stage sums each chunk with
          // the same ring: bit-identical to no remat and to stage 0.
          REQUIRE(remat.size() == plain.size()); REQUIRE(remat.size() == ref.size());
          CHECK(std::memcmp(remat.data(), plain.data(), sizeof(float) * plain.size()) == 0);
          CHECK(std::memcmp(remat.data(), ref.data(), sizeof(float) * ref.size()) == 0);
          CHECK(rs.losses == r0.losses);
          for (int k = 0; k < N; ++k) {
            const auto& pk = rs.peak[static_cast<std::size_t>(k)];
            const auto& pn = rn.peak[static_cast<std::size_t>(k)];
            // The activation bytes drop (2 blocks + 2 checkpoints instead of 3 blocks + 1).
            CHECK(pk[3] < pn[3]);
            CHECK(pn[3] == rn.activation_bytes);
          }
          const RematPlan sq = sqrt_plan(3), none = no_remat_plan(3);
          CHECK(rs.activation_bytes == remat_activation_bytes(o.cfg, o.batch, o.context, sq));
          CHECK(rn.activation_bytes == remat_activation_bytes(on.cfg, on.batch, on.context, none)));
    }
  }
  // optimal at a budget between the two plans' bytes: the same parameters again.
  ZeroRunOptions o = run_opts(3, Precision::FP32);
  o.zero.remat = "optimal";
  o.zero.remat_budget = remat_activation_bytes(o.cfg, o.batch, o.context, sqrt_plan(3));
  GPTParams opt;
  const ZeroRunReport ro = run_zero_simulated(2, o, &opt);
  observe("optimal plan", ro.plan);
  observe("optimal activation bytes", ro.peak[0][3]);
  observe("parameters with optimal", opt.vec(), {1e-6, 1e-7});
  CHECK(ro.peak[0][3] <= o.zero.remat_budget);
  // The oracle: stage 3 without remat, after the remat run.
  MLS_ORACLE(GPTParams ref; run_zero_simulated(2, run_opts(3, Precision::FP32), &ref);)
  MLS_ORACLE_CHECK(REQUIRE(opt.size() == ref.size());
                   CHECK(std::memcmp(opt.data(), ref.data(), sizeof(float) * ref.size()) == 0));
}

TEST_CASE("zero remat: stage 3 gathers a recomputed block again: traffic = 3psi(N-1)/N + recomputed(N-1)/N",
          "[lab6][zero_comm]") {
  for (int N : {2, 4}) {  // V = 48: every unit divides by N, per-rank counts are exact
    for (int s = 0; s <= 3; ++s) {
      ZeroRunOptions o = run_opts(s, Precision::FP32, 2, 48);
      o.zero.remat = "sqrt";
      const ZeroRunReport r = run_zero_simulated(N, o);
      const ZeroUnit b0 = zero_units(o.cfg)[1], b1 = zero_units(o.cfg)[2];
      CHECK(r.recomputed_params == b0.size + b1.size);
      const double psi = static_cast<double>(r.psi);
      observe("recomputed params", r.recomputed_params);
      observe("elements sent by every rank", r.elements_sent);
      observe("formula", zero_comm_elements_remat(s, psi, N, static_cast<double>(r.recomputed_params)), {1e-12, 0});
      // The oracle: the formula written out, after the run.
      MLS_ORACLE(const double expect = s == 3 ? 3 * psi * (N - 1) / N + static_cast<double>(r.recomputed_params) * (N - 1) / N
                                              : 2 * psi * (N - 1) / N;)
      MLS_ORACLE_CHECK(CHECK(zero_comm_elements_remat(s, psi, N, static_cast<double>(r.recomputed_params)) == Approx(expect));
                       for (int k = 0; k < N; ++k) CHECK(static_cast<double>(r.elements_sent[k]) == expect));
      CHECK(comm_table(r).find(s == 3 ? "re-gathered for the recompute" : "2*psi*(N-1)/N") != std::string::npos);
      observe("elements sent with sqrt", r.elements_sent[0]);
    }
  }
  require_error([] { zero_comm_elements_remat(3, 100, 2, 101); }, "101 recomputed parameters of psi = 100");
}

TEST_CASE("zero: bad input to a run: stage, ranks, backend, precision, remat plan and budget", "[lab6][zero]") {
  auto with = [](auto change) {
    ZeroRunOptions o = run_opts(2, Precision::FP32, 1);
    change(o);
    return o;
  };
  require_error([&] { with([](ZeroRunOptions& o) { o.zero.stage = 4; }).validate(); }, "stage = 4, expected 0, 1, 2 or 3");
  require_error([&] { with([](ZeroRunOptions& o) { o.zero.stage = -1; }).validate(); }, "stage = -1");
  require_error([&] { with([](ZeroRunOptions& o) { o.zero.remat = "fast"; }).validate(); },
                "remat plan 'fast', expected none, sqrt or optimal");
  require_error([&] { with([](ZeroRunOptions& o) { o.zero.remat_budget = -5; }).validate(); }, "remat budget = -5");
  require_error([&] { with([](ZeroRunOptions& o) { o.batch = 0; }).validate(); }, "batch = 0");
  require_error([&] { with([](ZeroRunOptions& o) { o.context = 33; }).validate(); }, "context = 33");
  require_error([&] { with([](ZeroRunOptions& o) { o.steps = 0; }).validate(); }, "steps = 0");
  // A recompute budget too small for any plan, with ZeRO: named before any rank starts.
  require_error(
      [&] {
        run_zero_simulated(2, with([](ZeroRunOptions& o) {
                             o.zero.stage = 3;
                             o.zero.remat = "optimal";
                             o.zero.remat_budget = 1000;
                           }));
      },
      "remat optimal at ZeRO stage 3: gpt_optimal_plan: no recompute plan of 3 blocks at (B, T) = (2, 8) "
      "fits a budget of 1000 bytes");
  require_error([&] { run_zero_simulated(0, with([](ZeroRunOptions&) {})); }, "ranks = 0");
  require_error([&] { run_zero_simulated(2, with([](ZeroRunOptions& o) { o.zero.stage = 7; })); }, "stage = 7");
  // --ranks and --backend of `mls-gpt train --zero`.
  require_error([] { zero_run_ranks(ZeroBackend::Sim, 0); }, "train --ranks 0: expected 1..64 simulated ranks");
  require_error([] { zero_run_ranks(ZeroBackend::Sim, -3); }, "train --ranks -3");
  require_error([] { zero_run_ranks(ZeroBackend::Sim, 65); }, "train --ranks 65");
  require_error([] { zero_run_ranks(ZeroBackend::Mpi, 3, 2); }, "train --ranks 3 but mpirun started 2 processes");
  require_error([] { zero_run_ranks(ZeroBackend::Nccl, 0, 1); }, "train --ranks 0 but mpirun (NCCL");
  require_error([] { parse_zero_backend("gloo"); }, "train --backend: 'gloo', expected sim, mpi or nccl");
  require_error([] { parse_precision("fp16"); }, "'fp16' is not supported");
  MLS_CHECK_EQ(zero_run_ranks(ZeroBackend::Sim, std::nullopt), 2);
  MLS_CHECK_EQ(zero_run_ranks(ZeroBackend::Sim, 5), 5);
  MLS_CHECK_EQ(zero_run_ranks(ZeroBackend::Mpi, std::nullopt, 4), 4);
  MLS_CHECK_EQ(zero_run_ranks(ZeroBackend::Nccl, 2, 2), 2);
  observe("parse_zero_backend(nccl)", static_cast<std::int64_t>(parse_zero_backend("nccl")));
  MLS_ORACLE_CHECK(CHECK(parse_zero_backend("nccl") == ZeroBackend::Nccl));
  observe("default sim ranks", zero_run_ranks(ZeroBackend::Sim, std::nullopt));
  observe("mpi ranks", zero_run_ranks(ZeroBackend::Mpi, std::nullopt, 4));
  // Ranks that disagree on the recompute plan.
  require_error(
      [] {
        parallel::run_simulated(2, [](parallel::Communicator& c) {
          const GPTConfig cfg = nano();
          ZeroOptions o;
          o.stage = 3;
          o.remat = c.rank() == 0 ? "sqrt" : "none";
          ZeroTrainer tr(c, cfg, init_params(cfg, 1), o);
        });
      },
      "rank 0 has remat plan (none 0, sqrt 1, optimal 2) = 1, rank 1 has 0");
}

TEST_CASE("zero overlap: asynchronous reductions (stages 0-3) and ZeRO-3 prefetch give bit-identical parameters",
          "[lab6][zero_overlap]") {
  // student code first: the overlapped runs (prefetch_ahead, add_shard_gradient, store_full_gradient)
  struct Case {
    int stage, prefetch;
    Precision p;
    std::int64_t accum;
    RecomputeKind remat;
  };
  const Case cases[] = {{3, 1, Precision::FP32, 1, RecomputeKind::None}, {3, 2, Precision::FP32, 2, RecomputeKind::None},
                        {3, 1, Precision::BF16, 1, RecomputeKind::Sqrt}, {2, 1, Precision::FP32, 2, RecomputeKind::None},
                        {3, 0, Precision::FP32, 1, RecomputeKind::None}, {0, 1, Precision::FP32, 1, RecomputeKind::None},
                        {0, 1, Precision::BF16, 2, RecomputeKind::Sqrt}, {1, 1, Precision::FP32, 2, RecomputeKind::None},
                        {1, 1, Precision::BF16, 1, RecomputeKind::None}};
  for (const Case& c : cases) {
    ZeroRunOptions o = run_opts(c.stage, c.p, 3);
    o.zero.accum = c.accum;
    o.batch = 2 * c.accum;
    o.zero.remat = c.remat;
    o.zero.overlap = true;
    o.zero.prefetch = c.prefetch;
    GPTParams po, pb;
    const ZeroRunReport ro = run_zero_simulated(3, o, &po);
    o.zero.overlap = false;
    const ZeroRunReport rb = run_zero_simulated(3, o, &pb);
    INFO("stage " << c.stage << ", prefetch " << c.prefetch << ", " << to_string(c.p) << ", accum " << c.accum
                  << ", remat " << static_cast<int>(c.remat.kind()));
    observe("overlapped run's losses", ro.losses, {1e-6, 0});
    observe("overlapped run's parameters", po.vec(), {1e-6, 1e-7});
    observe("elements sent per rank, overlapped", ro.elements_sent);
    REQUIRE(po.size() == pb.size());
    CHECK(std::memcmp(po.data(), pb.data(), sizeof(float) * pb.size()) == 0);  // bit for bit
    CHECK(ro.losses == rb.losses);
    CHECK(ro.elements_sent == rb.elements_sent);  // a prefetch is a gather moved earlier, never an extra one
    const auto comm = static_cast<std::size_t>(mem::Tag::Communication), par = static_cast<std::size_t>(mem::Tag::Parameter);
    for (int k = 0; k < 3; ++k) {
      const auto u = static_cast<std::size_t>(k);
      CHECK(ro.peak[u][par] == rb.peak[u][par]);  // the gathered unit in use: the same
      if (c.stage == 3 && c.prefetch > 0)         // the unit(s) gathered ahead: more communication buffers
        CHECK(ro.peak[u][comm] > rb.peak[u][comm]);
    }
    observe("prefetched units per step", ro.prefetched);
    if (c.stage == 3 && c.prefetch > 0) CHECK(ro.prefetched > 0);
    else CHECK(ro.prefetched == 0);
  }
  require_error([] {
    ZeroRunOptions o = run_opts(3, Precision::FP32, 1);
    o.zero.overlap = true;
    o.zero.prefetch = 9;
    run_zero_simulated(2, o);
  }, "ZeRO: prefetch = 9, expected 0..8");
}

TEST_CASE("zero overlap: ZeRO-3 starts the next step's first gathers under the optimizer step: per-step traffic "
          "with masks and gathers between steps as blocking", "[lab6][zero_overlap]") {
  // student code first: overlapped ZeRO-3 steps (prefetch_ahead, reduce_and_update, add_shard_gradient)
  const GPTConfig cfg = nano();
  const std::int64_t B = 2, T = 8;
  constexpr int N = 3, S = 4;
  struct Rank {
    std::vector<std::int64_t> sent;  // per step
    std::vector<double> losses;
    std::vector<std::int64_t> prefetched;
    std::vector<float> grads1, params;     // gather_grads after step 1, gather_params at the end
    std::int64_t head_in_optimizer = -1;   // step 1's all-gathers issued inside its optimizer step
  };
  for (int prefetch : {1, 2}) {
    auto run = [&](bool overlap) {
      std::vector<Rank> out(N);
      ZeroOptions zo;
      zo.stage = 3;
      zo.overlap = overlap;
      zo.prefetch = prefetch;
      parallel::run_simulated(N, [&](parallel::Communicator& c) {
        Rank& me = out[static_cast<std::size_t>(c.rank())];
        Rng rng(40 + static_cast<std::uint64_t>(c.rank()), "zero-head");
        ZeroTrainer tr(c, cfg, init_params(cfg, 9), zo);
        for (int s = 0; s < S; ++s) {
          const Batch b = llm_test::random_batch(cfg, B, T, rng);  // about 30% masked: one allreduce first
          tr.record_phases(s == 1);
          c.set_span_recording(s == 1);
          const ZeroStepStats st = tr.step(b, 1e-3);
          me.sent.push_back(st.elements_sent);
          me.losses.push_back(st.loss);
          me.prefetched.push_back(tr.prefetched());
          if (s == 1) {
            me.grads1 = tr.gather_grads().vec();  // a collective between steps (waits for the head, drops it)
            me.head_in_optimizer = 0;             // (a collective's span is logged when it is done)
            for (const ZeroPhase& p : tr.phases())
              if (p.kind == ZeroPhase::Optimizer)
                for (const auto& sp : c.spans())
                  if (sp.op == "allgather" && sp.issued >= p.start && sp.issued <= p.end) ++me.head_in_optimizer;
            c.set_span_recording(false);
          }
          if (s == 2) (void)tr.gather_params();  // another
        }
        me.params = tr.gather_params().vec();
      });
      return out;
    };
    const std::vector<Rank> o = run(true), b = run(false);
    INFO("prefetch " << prefetch);
    observe("overlapped per-step elements sent, rank 0", o[0].sent);
    observe("overlapped losses", o[0].losses, {1e-6, 0});
    observe("overlapped prefetches per step, rank 0", o[0].prefetched);
    observe("step 1's all-gathers issued in its optimizer step", o[0].head_in_optimizer);
    for (int r = 0; r < N; ++r) {
      const auto& x = o[static_cast<std::size_t>(r)];
      const auto& y = b[static_cast<std::size_t>(r)];
      INFO("rank " << r);
      CHECK(x.sent == y.sent);  // every step counts its own collectives, the head the last one started included
      CHECK(x.losses == y.losses);
      REQUIRE(x.params.size() == y.params.size());
      CHECK(std::memcmp(x.params.data(), y.params.data(), sizeof(float) * y.params.size()) == 0);
      CHECK(std::memcmp(x.grads1.data(), y.grads1.data(), sizeof(float) * y.grads1.size()) == 0);
      // step 0 learns the order (nothing ahead during it) and ends by starting the head: positions 0..prefetch
      CHECK(x.prefetched[0] == prefetch + 1);
      CHECK(x.head_in_optimizer == prefetch + 1);  // ... under the optimizer step, each once its unit is updated
      CHECK(y.head_in_optimizer == 0);
    }
  }
}

TEST_CASE("zero overlap: a step's phases for the timeline (record_phases) and the per-step times", "[lab6][zero_overlap]") {
  // student code first: an overlapped ZeRO-3 run with prefetch
  ZeroRunOptions o = run_opts(3, Precision::FP32, 3);
  o.zero.overlap = true;
  o.zero.prefetch = 1;
  const ZeroRunReport r = run_zero_simulated(2, o);
  observe("overlapped run's losses", r.losses, {1e-6, 0});
  REQUIRE(r.step_wall_s.size() == 3);  // one per step, the slowest rank's
  for (double s : r.step_wall_s) CHECK(s > 0);
  // the phases of one step: the compute thread's waits and blocking collectives, and one optimizer step
  struct Seen {
    std::size_t comm = 0, optimizer = 0, after_off = 0;
    bool ordered = true;
  };
  std::vector<Seen> seen(2);
  parallel::run_simulated(2, [&](parallel::Communicator& c) {
    ZeroTrainer tr(c, o.cfg, init_params(o.cfg, o.seed), o.zero);
    const auto n = static_cast<std::size_t>(o.batch * o.context);
    std::vector<std::int32_t> in(n), tg(n);
    zero_batch(o.cfg, o.batch, o.context, o.seed, 0, c.rank(), in.data(), tg.data());
    tr.record_phases(true);
    for (int s = 0; s < 2; ++s) tr.step(in.data(), tg.data(), o.batch, o.context, o.lr);
    Seen& me = seen[static_cast<std::size_t>(c.rank())];
    double last_end = 0;
    for (const ZeroPhase& p : tr.phases()) {
      (p.kind == ZeroPhase::Optimizer ? me.optimizer : me.comm) += 1;
      me.ordered = me.ordered && p.start <= p.end && p.end >= last_end;  // recorded as each ends
      last_end = p.end;
    }
    tr.record_phases(false);
    tr.step(in.data(), tg.data(), o.batch, o.context, o.lr);
    me.after_off = tr.phases().size();
  });
  const std::size_t units = zero_units(o.cfg).size();
  for (const Seen& s : seen) {
    CHECK(s.optimizer == 1);
    // every gather of the step (units + the embeddings and the final layernorm again) and every
    // reduce-scatter issue and the reductions' wait, at least
    CHECK(s.comm >= 2 * units);
    CHECK(s.ordered);
    CHECK(s.after_off == 0);  // off: the step clears them and records nothing
  }
}
