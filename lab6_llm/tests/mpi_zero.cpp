// ZeRO on the MPI backend: ranks are processes (CTest's lab6:mpi:zero:np2 runs this program under
// lab 5's run_mpi.sh; started directly, a test case re-runs itself under mpirun -np 2). The same
// equalities as on simulated ranks: stages 0-3 bit-identical, memory = formula, traffic = theory.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "mls/testing.hpp"
#include "mpi_launch.hpp"
#include "zero_testing.hpp"
#include "mls/llm/zero.hpp"
#include "mls/parallel/mpi.hpp"

using namespace mls;
using namespace mls::llm;
using namespace mls::parallel;
using namespace mls::parallel::testing;

namespace {
ZeroRunOptions opts(int stage, Precision p) { return llm_test::zero_run_options(stage, p); }

/// Checks every rank's measured model-state bytes against the formula; returns the elements sent
/// per step summed over the ranks.
std::int64_t check_states_sum_sent(const ZeroRunReport& r, int ranks) {
  std::int64_t sum = 0;
  for (int k = 0; k < ranks; ++k) {
    const ZeroBytes e = expected_bytes(r, k);
    CHECK(r.peak[k][0] == static_cast<std::int64_t>(e.params));
    CHECK(r.peak[k][1] == static_cast<std::int64_t>(e.grads));
    CHECK(r.peak[k][2] == static_cast<std::int64_t>(e.optimizer));
    sum += r.elements_sent[k];
  }
  return sum;
}
}  // namespace

TEST_CASE("mpi zero: stages 0-3 on processes: same parameters, memory = formula, traffic = theory", "[lab6][mpi][zero_mpi]") {
  MLS_MPI_TEST(2);
  Communicator c = mpi_world();
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    GPTParams p0;
    for (int s = 0; s <= 3; ++s) {
      mem::global().set_enabled(true);
      mem::global().reset();
      GPTParams ps;
      const ZeroRunReport r = run_zero(c, opts(s, p), &ps);
      INFO("stage " << s << " " << to_string(p) << "\n" << memory_table(r) << comm_table(r));
      if (s == 0) p0 = std::move(ps);
      else CHECK(std::memcmp(ps.data(), p0.data(), sizeof(float) * p0.size()) == 0);
      const std::int64_t sum = check_states_sum_sent(r, c.size());
      CHECK(static_cast<double>(sum) ==
            Approx(zero_comm_elements(s, static_cast<double>(r.psi), c.size()) * c.size()).epsilon(1e-12));
      mls::testing::observe("sum of elements sent", sum);
    }
  }
}

TEST_CASE("mpi zero remat: stages 0-3 with a sqrt plan on processes: the same parameters, fewer activation bytes", "[lab6][mpi][zero_mpi]") {
  MLS_MPI_TEST(2);
  Communicator c = mpi_world();
  GPTParams ref;
  std::int64_t none_act = 0;
  {
    mem::global().set_enabled(true);
    mem::global().reset();
    const ZeroRunReport r = run_zero(c, opts(0, Precision::FP32), &ref);
    none_act = r.peak[0][3];
  }
  for (int s = 0; s <= 3; ++s) {
    mem::global().set_enabled(true);
    mem::global().reset();
    ZeroRunOptions o = opts(s, Precision::FP32);
    o.zero.remat = "sqrt";
    GPTParams ps;
    const ZeroRunReport r = run_zero(c, o, &ps);
    INFO("stage " << s << "\n" << memory_table(r) << comm_table(r));
    CHECK(std::memcmp(ps.data(), ref.data(), sizeof(float) * ref.size()) == 0);
    CHECK(r.recomputed_blocks == 2);
    std::int64_t sum = 0;
    for (int k = 0; k < c.size(); ++k) {
      CHECK(r.peak[k][3] == r.activation_bytes);
      CHECK(r.peak[k][3] < none_act);
      sum += r.elements_sent[k];
    }
    CHECK(static_cast<double>(sum) ==
          Approx(zero_comm_elements_remat(s, static_cast<double>(r.psi), c.size(),
                                          static_cast<double>(r.recomputed_params)) * c.size()).epsilon(1e-12));
    mls::testing::observe("activation bytes with sqrt", r.peak[0][3]);
    mls::testing::observe("sum of elements sent", sum);
  }
}

TEST_CASE("mpi zero: ranks that disagree on the stage get a clear error on every rank", "[lab6][mpi][zero_mpi]") {
  MLS_MPI_TEST(2);
  Communicator c = mpi_world();
  const GPTConfig cfg = opts(0, Precision::FP32).cfg;
  ZeroOptions o;
  o.stage = c.rank() == 0 ? 2 : 3;
  mls::testing::require_error([&] { ZeroTrainer tr(c, cfg, init_params(cfg, 1), o); },
                              "ranks disagree on the config: rank 0 has stage = 2, rank 1 has 3");
  // Agreeing ranks then build it: each holds its own shard of the uneven partition.
  ZeroOptions ok;
  ok.stage = 2;
  ZeroTrainer tr(c, cfg, init_params(cfg, 1), ok);
  CHECK(tr.partition().shard_size == make_partition(zero_units(cfg), c.size(), c.rank()).shard_size);
  mls::testing::observe("shard size", tr.partition().shard_size);
}

TEST_CASE("mpi zero accum: 2 micro-batches on processes: stages 0-1 and 2-3 bit-identical, memory = formula, traffic = theory",
          "[lab6][mpi][zero_mpi]") {
  MLS_MPI_TEST(2);
  Communicator c = mpi_world();
  std::vector<GPTParams> p(4);
  for (int s = 0; s <= 3; ++s) {
    mem::global().set_enabled(true);
    mem::global().reset();
    ZeroRunOptions o = opts(s, Precision::FP32);
    o.batch = 4;
    o.zero.accum = 2;
    o.steps = 3;
    const ZeroRunReport r = run_zero(c, o, &p[static_cast<std::size_t>(s)]);
    INFO("stage " << s << "\n" << memory_table(r) << comm_table(r));
    const std::int64_t sum = check_states_sum_sent(r, c.size());
    for (int k = 0; k < c.size(); ++k) CHECK(r.peak[k][3] == r.activation_bytes);
    CHECK(static_cast<double>(sum) ==
          Approx(zero_comm_elements_remat(s, static_cast<double>(r.psi), c.size(), 0, 2) * c.size()).epsilon(1e-12));
    mls::testing::observe("sum of elements sent, accum 2", sum);
  }
  CHECK(std::memcmp(p[1].data(), p[0].data(), sizeof(float) * p[0].size()) == 0);
  CHECK(std::memcmp(p[3].data(), p[2].data(), sizeof(float) * p[2].size()) == 0);
  mls::testing::observe("parameters, accum 2", p[2].vec(), {1e-5, 1e-6});
}

TEST_CASE("mpi zero overlap: asynchronous reduce-scatter and ZeRO-3 prefetch on processes are bit-identical",
          "[lab6][mpi][zero_mpi]") {
  MLS_MPI_TEST(2);
  Communicator c = mpi_world();
  for (int s : {2, 3}) {
    for (int prefetch : {1, 2}) {
      ZeroRunOptions o = opts(s, Precision::FP32);
      o.steps = 3;
      o.zero.accum = 2;
      o.batch = 4;
      o.zero.overlap = true;
      o.zero.prefetch = prefetch;
      GPTParams po, pb;
      mem::global().set_enabled(true);
      mem::global().reset();
      const ZeroRunReport ro = run_zero(c, o, &po);
      o.zero.overlap = false;
      mem::global().reset();
      const ZeroRunReport rb = run_zero(c, o, &pb);
      INFO("stage " << s << ", prefetch " << prefetch << ", rank " << c.rank());
      mls::testing::observe("overlapped run's losses", ro.losses, {1e-6, 0});
      REQUIRE(po.size() == pb.size());
      CHECK(std::memcmp(po.data(), pb.data(), sizeof(float) * pb.size()) == 0);
      CHECK(ro.losses == rb.losses);
      CHECK(ro.elements_sent == rb.elements_sent);
      if (s == 3) CHECK(ro.prefetched > 0);
    }
  }
}
