// Data parallelism, the 3-D mesh and the pipeline on the MPI backend (processes; run under
// mpirun -np 2 and -np 4 through tests/run_mpi.sh; started directly, a test case re-runs itself
// under mpirun -np 2, see mpi_launch.hpp): the same equalities as on simulated ranks.
#include <catch2/catch.hpp>

#include <array>
#include <cstring>

#include "mls/observe_tensor.hpp"
#include "mpi_launch.hpp"
#include "mls/parallel/data_parallel.hpp"
#include "mls/parallel/mesh.hpp"
#include "mls/parallel/mpi.hpp"
#include "mls/parallel/tensor_parallel.hpp"
#include "mls/testing.hpp"

using namespace mls;
using namespace mls::parallel;
using mls::autodiff::Var;
namespace nn = mls::autodiff::nn;

TEST_CASE("mpi dp: N processes with batch B/N match one process with batch B after 10 SGD steps, overlap bit-identical",
          "[lab5][mpi][mpi_train][mpi_dp]") {
  MLS_MPI_TEST(2);
  Communicator comm = mpi_world();
  const int n = comm.size();
  for (DType dt : {DType::Float64, DType::Float32}) {
    std::vector<std::vector<double>> plain;  // the parameters without overlap
    for (bool overlap : {false, true}) {
      auto make = [&](const char* name, std::int64_t i, std::int64_t o) {
        Rng rng(5, name);
        nn::Linear l(i, o, rng, nn::Init::Xavier, true, dt);
        l.bias = nn::parameter(Tensor::randn({o}, rng, 0.0, 0.2, dt));
        return l;
      };
      nn::Linear a1 = make("l1", 6, 8), a2 = make("l2", 8, 3);  // this process's replica
      std::vector<nn::Parameter> ps = {a1.weight, a1.bias, a2.weight, a2.bias};
      DataParallel dp(comm, ps, DataParallelOptions{128, overlap});
      dp.broadcast_parameters(0);
      nn::SGD opt(ps, 0.1, 0.9);
      auto batch = [&](int s) {
        Rng rng(17, "mpi-dp-batch-" + std::to_string(s));
        const Tensor x = Tensor::randn({12, 6}, rng, 0.0, 1.0, dt);
        return std::array<Tensor, 2>{x, Tensor::randn({12, 3}, rng, 0.0, 1.0, dt)};
      };
      for (int s = 0; s < 10; ++s) {
        const auto [x, y] = batch(s);
        opt.zero_grad();
        const Var xs(shard_batch(x, comm.rank(), n)), ys(shard_batch(y, comm.rank(), n));
        const Var out = overlap ? autodiff::matmul(autodiff::tanh(autodiff::matmul(xs, dp.hook(0)) + dp.hook(1)), dp.hook(2)) + dp.hook(3)
                                : a2.forward(autodiff::tanh(a1.forward(xs)));
        autodiff::mse_loss(out, ys).backward();
        dp.allreduce_gradients();
        opt.step();
      }
      const double tol = dt == DType::Float64 ? 1e-12 : 1e-6;
      INFO(dtype_name(dt) << " overlap " << overlap << " rank " << comm.rank() << " of " << n);
      std::vector<std::vector<double>> mine;
      for (const auto& prm : ps) mine.push_back(prm.value().to_vector<double>());
      if (!overlap) plain = mine;
      else CHECK(mine == plain);  // bit-identical with and without overlap
      MLS_OBSERVE(dp.allreduce_calls());
      MLS_OBSERVE(dp.buckets().size());
      for (const auto& prm : ps) mls::testing::observe_values("parameter", prm.value(), {2 * tol, 2 * tol});
      // the single-process reference on the whole batches, after the data-parallel run
      MLS_ORACLE(nn::Linear r1 = make("l1", 6, 8), r2 = make("l2", 8, 3);
                 std::vector<nn::Parameter> rs = {r1.weight, r1.bias, r2.weight, r2.bias};
                 nn::SGD ropt(rs, 0.1, 0.9);
                 for (int s = 0; s < 10; ++s) {
                   const auto [x, y] = batch(s);
                   ropt.zero_grad();
                   autodiff::mse_loss(r2.forward(autodiff::tanh(r1.forward(Var(x)))), Var(y)).backward();
                   ropt.step();
                 })
      MLS_ORACLE_CHECK(CHECK(dp.allreduce_calls() == static_cast<std::int64_t>(dp.buckets().size()) * 10);
                       for (std::size_t k = 0; k < ps.size(); ++k) {
                         const auto g = ps[k].value().to_vector<double>(), w = rs[k].value().to_vector<double>();
                         REQUIRE(g.size() == w.size());
                         for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(w[i]).epsilon(tol).margin(tol));
                       });
    }
  }
}

TEST_CASE("mpi mesh: the residual MLP stack on dp x tp x pp processes equals one process", "[lab5][mpi][mpi_train][mpi_mesh]") {
  MLS_MPI_TEST(2);
  Communicator world = mpi_world();
  const int n = world.size();
  // 2 processes: 1 x 1 x 2 (a pipeline); 4 processes: 1 x 2 x 2; else data parallel.
  const int pp = n % 2 == 0 ? 2 : 1, tp = n % 4 == 0 ? 2 : 1, dp = n / (pp * tp);
  StackConfig c;
  c.blocks = pp;
  c.steps = 3;
  const StackResult got = train_stack_3d(world, c, dp, tp, pp);
  INFO("rank " << world.rank() << " of " << n << ": " << dp << " x " << tp << " x " << pp);
  mls::testing::observe("losses", got.losses, {2e-12, 0.0});
  REQUIRE(!got.params.empty());  // guards the [0] below
  for (const Tensor& p : got.params[0]) mls::testing::observe_values("parameter", p, {2e-12, 2e-14});
  MLS_ORACLE(const StackResult ref = train_stack_single(c);  // the single process's run, after the parallel one
             const MeshCoord m = Mesh3D::coord_of(world.rank(), tp, pp);)
  MLS_ORACLE_CHECK(REQUIRE(got.losses.size() == ref.losses.size());
                   for (std::size_t s = 0; s < ref.losses.size(); ++s) CHECK(got.losses[s] == Approx(ref.losses[s]).epsilon(1e-12));
                   REQUIRE(got.params[0].size() >= 4);
                   for (std::size_t k = 0; k < 4; ++k) {
                     const std::int64_t dim = ParallelMLP::kShardDims[k];
                     const Tensor& full = ref.params[static_cast<std::size_t>(m.s)][k];
                     const auto w = (dim < 0 ? full : shard(full, dim, m.t, tp)).to_vector<double>();
                     const auto g = got.params[0][k].to_vector<double>();
                     REQUIRE(g.size() == w.size());
                     for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == Approx(w[i]).epsilon(1e-12).margin(1e-14));
                   });
}

TEST_CASE("mpi mesh: overlap (buckets launched inside the last micro-batch's backward) is bit-identical on processes",
          "[lab5][mpi][mpi_train][mpi_mesh]") {
  MLS_MPI_TEST(2);
  Communicator world = mpi_world();
  const int n = world.size();
  StackConfig c;
  c.blocks = 1;
  c.steps = 3;
  c.batch = 12 * n;
  c.micro_batches = 3;
  c.bucket_bytes = 64;
  c.dtype = DType::Float32;
  c.overlap = true;
  const StackResult with = train_stack_3d(world, c, n, 1, 1);
  c.overlap = false;
  const StackResult without = train_stack_3d(world, c, n, 1, 1);
  INFO("rank " << world.rank() << " of " << n);
  mls::testing::observe("losses, overlapped", with.losses, {2e-6, 0.0});
  mls::testing::observe("buckets launched inside backward", with.overlapped_buckets);
  REQUIRE(with.params.size() == 1);
  REQUIRE(without.params.size() == 1);
  for (std::size_t q = 0; q < 4; ++q) {
    const Tensor a = with.params[0][q].compact(), b = without.params[0][q].compact();
    mls::testing::observe_values("parameter, overlapped", a, {2e-6, 2e-7});
    REQUIRE(a.numel() == b.numel());
    CHECK(std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<std::size_t>(a.numel()) * a.itemsize()) == 0);
  }
  CHECK(with.losses == without.losses);
  CHECK(with.overlapped_buckets >= 2 * c.steps);
}

TEST_CASE("mpi dp: deferred buckets waited in the next forward are bit-identical to the blocking run on processes",
          "[lab5][mpi][mpi_train][mpi_dp]") {
  MLS_MPI_TEST(2);
  Communicator comm = mpi_world();
  const int n = comm.size();
  for (DType dt : {DType::Float64, DType::Float32}) {
    std::vector<std::vector<double>> plain;  // the blocking run's parameters
    // 1-byte buckets: one per parameter (4); (defer, wait_in_forward): blocking, then 2 and 4 deferred
    for (const auto& [defer, wait] : std::vector<std::pair<int, bool>>{{0, false}, {2, false}, {2, true}, {4, true}}) {
      auto make = [&](const char* name, std::int64_t i, std::int64_t o) {
        Rng rng(5, name);
        nn::Linear l(i, o, rng, nn::Init::Xavier, true, dt);
        l.bias = nn::parameter(Tensor::randn({o}, rng, 0.0, 0.2, dt));
        return l;
      };
      nn::Linear a1 = make("l1", 6, 8), a2 = make("l2", 8, 3);
      std::vector<nn::Parameter> ps = {a1.weight, a1.bias, a2.weight, a2.bias};
      DataParallelOptions o{1, defer > 0};
      o.defer_buckets = defer, o.wait_in_forward = wait;
      DataParallel dp(comm, ps, o);
      dp.broadcast_parameters(0);
      nn::SGD all(ps, 0.1, 0.9);  // zero_grad only
      std::vector<nn::SGD> bucket_opts;
      for (std::size_t b = 0; b < dp.buckets().size(); ++b) bucket_opts.emplace_back(dp.bucket_parameters(b), 0.1, 0.9);
      for (int s = 0; s < 10; ++s) {
        Rng rng(17, "mpi-dp-batch-" + std::to_string(s));
        const Tensor x = Tensor::randn({12, 6}, rng, 0.0, 1.0, dt), y = Tensor::randn({12, 3}, rng, 0.0, 1.0, dt);
        all.zero_grad();
        const Var xs(shard_batch(x, comm.rank(), n)), ys(shard_batch(y, comm.rank(), n));
        const Var out = defer > 0 ? autodiff::matmul(autodiff::tanh(autodiff::matmul(xs, dp.hook(0)) + dp.hook(1)), dp.hook(2)) + dp.hook(3)
                                  : a2.forward(autodiff::tanh(a1.forward(xs)));
        autodiff::mse_loss(out, ys).backward();
        dp.allreduce_gradients([&bucket_opts](std::size_t b) { bucket_opts[b].step(); });
      }
      MLS_OBSERVE(dp.unflushed());
      dp.flush();
      INFO(dtype_name(dt) << " defer " << defer << " wait_in_forward " << wait << " rank " << comm.rank() << " of " << n);
      std::vector<std::vector<double>> mine;
      for (const auto& prm : ps) mine.push_back(prm.value().to_vector<double>());
      if (defer == 0) plain = mine;
      else CHECK(mine == plain);  // bit-identical to the blocking run
      const double tol = dt == DType::Float64 ? 1e-12 : 1e-6;
      for (const auto& prm : ps) mls::testing::observe_values("parameter", prm.value(), {2 * tol, 2 * tol});
      MLS_ORACLE_CHECK(CHECK(dp.unflushed() == 0));
    }
  }
}
