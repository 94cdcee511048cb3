// 3-D parallelism: the mesh of sub-communicators, and DP x TP x PP = 2 x 2 x 2 on 8 simulated
// ranks training a residual MLP stack to the same parameters as one rank after 5 steps.
#include <catch2/catch.hpp>

#include <cstring>

#include "mls/parallel/mesh.hpp"
#include "mls/parallel/tensor_parallel.hpp"
#include "mls/observe_tensor.hpp"
#include "mls/testing.hpp"

using namespace mls;
using namespace mls::parallel;

TEST_CASE("mesh: coordinates and sub-communicators of a 2 x 2 x 2 mesh", "[lab5][mesh]") {
  for (int r = 0; r < 8; ++r) {
    const MeshCoord c = Mesh3D::coord_of(r, 2, 2);
    MLS_CHECK_EQ(Mesh3D::rank_of(c, 2, 2), r);
  }
  MLS_OBSERVE(Mesh3D::coord_of(5, 2, 2).d);
  MLS_OBSERVE(Mesh3D::coord_of(5, 2, 2).s);
  MLS_OBSERVE(Mesh3D::coord_of(5, 2, 2).t);
  MLS_ORACLE_CHECK(CHECK(Mesh3D::coord_of(5, 2, 2).d == 1); CHECK(Mesh3D::coord_of(5, 2, 2).s == 0);
                   CHECK(Mesh3D::coord_of(5, 2, 2).t == 1));
  struct Out { MeshCoord c; int dp_rank, tp_rank, pp_rank, dp_size, tp_size, pp_size; std::vector<double> tp_sum; };
  std::vector<Out> out(8);
  run_simulated(8, [&](Communicator& world) {
    Mesh3D mesh(world, 2, 2, 2);
    Out& o = out[static_cast<std::size_t>(world.rank())];
    o.c = mesh.coord();
    o.dp_rank = mesh.dp().rank(), o.tp_rank = mesh.tp().rank(), o.pp_rank = mesh.pp().rank();
    o.dp_size = mesh.dp().size(), o.tp_size = mesh.tp().size(), o.pp_size = mesh.pp().size();
    Tensor t = Tensor::scalar(world.rank(), DType::Float64);
    mesh.tp().allreduce(t);
    o.tp_sum = t.to_vector<double>();
  });
  for (int r = 0; r < 8; ++r) {
    const Out& o = out[static_cast<std::size_t>(r)];
    mls::testing::observe("dp, tp, pp ranks and sizes", std::vector<int>{o.dp_rank, o.tp_rank, o.pp_rank, o.dp_size, o.tp_size, o.pp_size});
    mls::testing::observe("tp sum", o.tp_sum);
    mls::testing::observe("coord d, s, t", std::vector<int>{o.c.d, o.c.s, o.c.t});
    MLS_ORACLE_CHECK(CHECK(o.dp_rank == o.c.d); CHECK(o.pp_rank == o.c.s); CHECK(o.tp_rank == o.c.t);
                     CHECK((o.dp_size == 2 && o.tp_size == 2 && o.pp_size == 2)); REQUIRE(o.tp_sum.size() == 1);
                     CHECK(o.tp_sum[0] == 2 * (r - r % 2) + 1));  // the two ranks of a tp group are r and r ^ 1
  }
  mls::testing::require_error(
      [] { run_simulated(4, [](Communicator& w) { Mesh3D m(w, 2, 2, 2); }); },
      "Mesh3D: dp x tp x pp = 2 x 2 x 2 does not match the world of 4 ranks");
}

TEST_CASE("mesh: 3-D (DP x TP x PP = 2 x 2 x 2) training equals the single-rank run after 5 steps",
          "[lab5][mesh]") {
  for (auto kind : {ScheduleKind::OneFOneB, ScheduleKind::GPipe}) {
    StackConfig c;
    c.blocks = 2;
    c.schedule = kind;
    std::vector<StackResult> got(8);
    std::vector<MeshCoord> where(8);
    run_simulated(8, [&](Communicator& world) {
      got[static_cast<std::size_t>(world.rank())] = train_stack_3d(world, c, 2, 2, 2);
      where[static_cast<std::size_t>(world.rank())] = Mesh3D::coord_of(world.rank(), 2, 2);
    });
    MLS_ORACLE(const StackResult ref = train_stack_single(c);)  // the single-rank run, after the 3-D one
    MLS_ORACLE_CHECK(REQUIRE(ref.losses.size() == 5); CHECK(ref.losses.back() < ref.losses.front()));
    for (int r = 0; r < 8; ++r) {
      const auto u = static_cast<std::size_t>(r);
      const MeshCoord m = where[u];
      INFO(to_string(kind) << " rank " << r << " (d " << m.d << ", s " << m.s << ", t " << m.t << ")");
      mls::testing::observe("losses", got[u].losses, {2e-12, 0.0});
      REQUIRE(!got[u].params.empty());  // guards the [0] below
      for (const Tensor& p : got[u].params[0]) mls::testing::observe_values("parameter", p, {2e-12, 2e-14});
      MLS_ORACLE_CHECK(REQUIRE(got[u].losses.size() == 5);
                       for (std::size_t s = 0; s < 5; ++s) CHECK(got[u].losses[s] == Approx(ref.losses[s]).epsilon(1e-12));
                       REQUIRE(got[u].params[0].size() >= 4);
                       for (std::size_t k = 0; k < 4; ++k) {
                         const std::int64_t dim = ParallelMLP::kShardDims[k];
                         const Tensor& full = ref.params[static_cast<std::size_t>(m.s)][k];
                         const Tensor want = dim < 0 ? full : shard(full, dim, m.t, 2);
                         const auto g = got[u].params[0][k].to_vector<double>(), w = want.to_vector<double>();
                         REQUIRE(g.size() == w.size());
                         for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(w[i]).epsilon(1e-12).margin(1e-14));
                       });
    }
  }
}

TEST_CASE("mesh: other shapes of the mesh (1 x 2 x 4, 4 x 1 x 2, 2 x 4 x 1) match too", "[lab5][mesh]") {
  for (auto [dp, tp, pp] : std::vector<std::array<int, 3>>{{1, 2, 4}, {4, 1, 2}, {2, 4, 1}}) {
    StackConfig c;
    c.blocks = pp;
    c.steps = 2;
    std::vector<StackResult> got(8);
    run_simulated(8, [&, dp = dp, tp = tp, pp = pp](Communicator& world) {
      got[static_cast<std::size_t>(world.rank())] = train_stack_3d(world, c, dp, tp, pp);
    });
    MLS_ORACLE(const StackResult ref = train_stack_single(c);)  // the single-rank run, after the 3-D one
    for (int r = 0; r < 8; ++r) {
      INFO(dp << " x " << tp << " x " << pp << " rank " << r);
      REQUIRE(!got[static_cast<std::size_t>(r)].params.empty());  // guards the [0] below
      for (const Tensor& p : got[static_cast<std::size_t>(r)].params[0]) mls::testing::observe_values("parameter", p, {2e-12, 2e-14});
      MLS_ORACLE_CHECK(const MeshCoord m = Mesh3D::coord_of(r, tp, pp);
                       REQUIRE(got[static_cast<std::size_t>(r)].params[0].size() >= 4);
                       for (std::size_t k = 0; k < 4; ++k) {
                         const std::int64_t dim = ParallelMLP::kShardDims[k];
                         const Tensor& full = ref.params[static_cast<std::size_t>(m.s)][k];
                         const auto w = (dim < 0 ? full : shard(full, dim, m.t, tp)).to_vector<double>();
                         const auto g = got[static_cast<std::size_t>(r)].params[0][k].to_vector<double>();
                         REQUIRE(g.size() == w.size());
                         for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(w[i]).epsilon(1e-12).margin(1e-14));
                       });
    }
  }
}

TEST_CASE("mesh: a configuration that does not fit the mesh is refused up front, naming the knob and what fits",
          "[lab5][plumbing]") {
  StackConfig c;  // d_hidden 16, batch 16, micro_batches 2
  c.blocks = 1;
  CHECK_NOTHROW(validate_stack_3d(c, 1, 4, 1));
  mls::testing::require_error([&] { validate_stack_3d(c, 1, 3, 1); },
                              "train_stack_3d: tp 3 must divide d_hidden 16 (the tensor-parallel ranks split the MLP's "
                              "hidden units equally): tensor-parallel sizes 1, 2, 4, 8 or 16 fit");
  mls::testing::require_error([&] { validate_stack_3d(c, 3, 1, 1); }, "batch 16 must split evenly over dp 3");
  c.micro_batches = 3;
  mls::testing::require_error([&] { validate_stack_3d(c, 2, 1, 1); },
                              "micro_batches 3 must divide the 8 rows of each data-parallel replica (batch 16 / dp 2)");
  c.micro_batches = 2;
  mls::testing::require_error([&] { validate_stack_3d(c, 1, 1, 2); }, "the stack has 1 blocks, expected one per stage (pp 2)");
  c.d_model = 0;
  mls::testing::require_error([&] { validate_stack_3d(c, 1, 1, 1); }, "d_model 0 must be >= 1");
  c.d_model = 8;
  // A tool names its flags; the ranks are checked before any of them starts (train_stack_3d too).
  StackNames flags;
  flags.op = "mls-parallel";
  flags.tp = "--ranks";
  flags.d_hidden = "--d-hidden";
  mls::testing::require_error([&] { validate_stack_3d(c, 1, 3, 1, flags); }, "mls-parallel: --ranks 3 must divide --d-hidden 16");
  mls::testing::require_error([&] { run_simulated(3, [&](Communicator& w) { train_stack_3d(w, c, 1, 3, 1); }); },
                              "train_stack_3d: tp 3 must divide d_hidden 16");
  c.d_hidden = 4096;  // more than 12 divisors: the first 12, then "..."
  mls::testing::require_error([&] { validate_stack_3d(c, 1, 3, 1); }, "sizes 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, ... fit");
}

TEST_CASE("mesh: overlap (buckets launched inside the last micro-batch's backward) is bit-identical, dp and 3-D",
          "[lab5][mesh]") {
  struct Case {
    int dp, tp, pp, micro;
    ScheduleKind kind;
    DType dtype;
  };
  const Case cases[] = {{4, 1, 1, 1, ScheduleKind::OneFOneB, DType::Float64}, {4, 1, 1, 3, ScheduleKind::GPipe, DType::Float32},
                        {2, 1, 1, 2, ScheduleKind::OneFOneB, DType::Float32}, {2, 2, 2, 2, ScheduleKind::GPipe, DType::Float64},
                        {2, 2, 2, 4, ScheduleKind::OneFOneB, DType::Float32}};
  for (const Case& k : cases) {
    const int n = k.dp * k.tp * k.pp;
    StackConfig c;
    c.blocks = k.pp;
    c.steps = 3;
    c.batch = 24;
    c.micro_batches = k.micro;
    c.schedule = k.kind;
    c.dtype = k.dtype;
    c.bucket_bytes = 64;  // several buckets per stage
    std::vector<StackResult> with(static_cast<std::size_t>(n)), without(static_cast<std::size_t>(n));
    c.overlap = true;
    run_simulated(n, [&](Communicator& w) { with[static_cast<std::size_t>(w.rank())] = train_stack_3d(w, c, k.dp, k.tp, k.pp); });
    c.overlap = false;
    run_simulated(n, [&](Communicator& w) { without[static_cast<std::size_t>(w.rank())] = train_stack_3d(w, c, k.dp, k.tp, k.pp); });
    for (int r = 0; r < n; ++r) {
      const auto u = static_cast<std::size_t>(r);
      INFO(k.dp << " x " << k.tp << " x " << k.pp << ", micro " << k.micro << ", " << to_string(k.kind) << ", rank " << r);
      mls::testing::observe("losses, overlapped", with[u].losses, {2e-6, 0.0});
      mls::testing::observe("buckets launched inside backward", with[u].overlapped_buckets);
      REQUIRE(with[u].params.size() == 1);
      REQUIRE(without[u].params.size() == 1);
      for (std::size_t q = 0; q < 4; ++q) {
        const Tensor& a = with[u].params[0][q];
        const Tensor& b = without[u].params[0][q];
        mls::testing::observe_values("parameter, overlapped", a, {2e-6, 2e-7});
        REQUIRE(a.numel() == b.numel());
        CHECK(std::memcmp(a.compact().data_ptr(), b.compact().data_ptr(), static_cast<std::size_t>(a.numel()) * a.itemsize()) == 0);
      }
      CHECK(with[u].losses == without[u].losses);
      CHECK(without[u].overlapped_buckets == 0);
      CHECK(with[u].overlapped_buckets >= 2 * c.steps);  // every bucket, every step (64-byte buckets: >= 2 per stage)
      CHECK(with[u].traffic.by_op.at("allreduce").calls == without[u].traffic.by_op.at("allreduce").calls);
    }
  }
}
