// The collectives on the MPI backend: ranks are processes (run under mpirun -np 2 and -np 4 by
// CTest through tests/run_mpi.sh). The same checks as on the simulated backend: every algorithm
// against a direct computation, every op and dtype, ragged sizes, exact traffic, bad input.
#include <catch2/catch.hpp>

#include "lab5_testing.hpp"
#include "mpi_launch.hpp"
#include "mls/parallel/comm.hpp"
#include "mls/parallel/mpi.hpp"
#include "mls/testing.hpp"

using namespace mls;
using namespace mls::parallel;
using namespace mls::parallel::testing;

namespace {
Communicator world(int ms = 60000) { return mpi_world(std::chrono::milliseconds(ms)); }
}  // namespace

TEST_CASE("mpi: allreduce ring, recursive doubling, Rabenseifner, native: every op and dtype", "[lab5][mpi][mpi_comm][mpi_allreduce]") {
  MLS_MPI_TEST(2);
  Communicator c = world();
  const int n = c.size();
  for (Algo algo : {Algo::Ring, Algo::RecursiveDoubling, Algo::Rabenseifner, Algo::Native, Algo::Auto})
    for (std::int64_t size : {std::int64_t{0}, std::int64_t{1}, std::int64_t{n + 1}, std::int64_t{37}, std::int64_t{5000}})
      for (DType dt : all_dtypes())
        for (ReduceOp op : all_ops()) {
          std::vector<Tensor> inputs;
          for (int r = 0; r < n; ++r) inputs.push_back(input_of(r, size, dt));
          Tensor t = inputs[c.rank()].clone();
          c.allreduce(t, op, algo);
          MLS_CHECK_CLOSE(t.to_vector<double>(), reduce_ref(inputs, op), dt, n,
                          ctx(n, size, dt, to_string(op)) << " " << to_string(algo));
        }
}

TEST_CASE("mpi: broadcast, reduce, allgather, reduce_scatter, all_to_all, gather, scatter, barrier", "[lab5][mpi][mpi_comm][mpi_collectives]") {
  MLS_MPI_TEST(2);
  Communicator c = world();
  const int n = c.size(), me = c.rank();
  for (std::int64_t size : {std::int64_t{0}, std::int64_t{3}, std::int64_t{3000}}) {
    for (int root = 0; root < n; ++root) {
      for (Algo algo : {Algo::Tree, Algo::Linear, Algo::Native}) {
        Tensor t = me == root ? input_of(root, size, DType::Float32) : Tensor::zeros({size});
        c.broadcast(t, root, algo);
        mls::testing::observe_values("broadcast", t);
        MLS_ORACLE_CHECK(CHECK(t.to_vector<double>() == input_of(root, size, DType::Float32).to_vector<double>()));
      }
      std::vector<Tensor> inputs;
      for (int r = 0; r < n; ++r) inputs.push_back(input_of(r, size, DType::Int64));
      Tensor t = inputs[me].clone();
      c.reduce(t, ReduceOp::Sum, root);
      if (me == root) mls::testing::observe_values("reduce", t);
      MLS_ORACLE_CHECK(if (me == root) CHECK(t.to_vector<double>() == reduce_ref(inputs, ReduceOp::Sum)));
      Tensor g = c.gather(inputs[me], root);
      Tensor all = input_of(77, n * size, DType::Int64).view({n, size});
      Tensor mine = c.scatter(all, root);
      mls::testing::observe_values("scatter", mine);
      if (me == root) mls::testing::observe_values("gather", g);
      MLS_ORACLE_CHECK(if (me == root) {
        REQUIRE(g.shape() == Shape{n, size});
        for (int s = 0; s < n; ++s) CHECK(g.select(0, s).to_vector<double>() == inputs[s].to_vector<double>());
      } CHECK(mine.to_vector<double>() == all.select(0, me).to_vector<double>()));
    }
    Tensor ag = c.allgather(input_of(me, size, DType::Float64));
    std::vector<Tensor> inputs;
    for (int r = 0; r < n; ++r) inputs.push_back(input_of(r, size, DType::Float64));
    Tensor rs = c.reduce_scatter(inputs[me], ReduceOp::Max);
    mls::testing::observe_values("allgather", ag);
    mls::testing::observe_values("reduce_scatter", rs);
    MLS_ORACLE_CHECK(REQUIRE(ag.shape() == Shape{n, size}); for (int s = 0; s < n; ++s)
                       CHECK(ag.select(0, s).to_vector<double>() == input_of(s, size, DType::Float64).to_vector<double>());
                     const auto b = chunk_bounds(size, n); const auto full = reduce_ref(inputs, ReduceOp::Max);
                     CHECK(rs.to_vector<double>() == std::vector<double>(full.begin() + b[me], full.begin() + b[me + 1])));
    Tensor a2a = c.all_to_all(input_of(me, n * 2, DType::Int64).view({n, 2}));
    mls::testing::observe_values("all_to_all", a2a);
    MLS_ORACLE_CHECK(REQUIRE(a2a.shape() == Shape{n, 2}); for (int s = 0; s < n; ++s)
      CHECK(a2a.select(0, s).to_vector<double>() == input_of(s, n * 2, DType::Int64).view({n, 2}).select(0, me).to_vector<double>()));
    // all_to_allv: rank r sends r + s + size elements to rank s (ours and MPI_Alltoallv).
    std::vector<std::int64_t> sc(static_cast<std::size_t>(n)), rc(static_cast<std::size_t>(n));
    for (int s = 0; s < n; ++s) sc[s] = me + s + size, rc[s] = s + me + size;
    std::int64_t total = 0;
    for (auto x : sc) total += x;
    for (Algo algo : {Algo::Pairwise, Algo::Native}) {
      Tensor v = c.all_to_allv(input_of(me, total, DType::Float32), sc, rc, algo);
      mls::testing::observe_values(std::string("all_to_allv ") + to_string(algo), v);
      MLS_ORACLE(std::vector<double> want; for (int s = 0; s < n; ++s) {
        const auto src = input_of(s, [&] { std::int64_t t = 0; for (int d = 0; d < n; ++d) t += s + d + size; return t; }(),
                                  DType::Float32).to_vector<double>();
        std::int64_t off = 0;
        for (int d = 0; d < me; ++d) off += s + d + size;
        want.insert(want.end(), src.begin() + off, src.begin() + off + s + me + size);
      })
      MLS_ORACLE_CHECK(CHECK(v.to_vector<double>() == want));
    }
    c.barrier();
  }
}

TEST_CASE("mpi: traffic equals the theory, identical to the simulated backend", "[lab5][mpi][mpi_comm][mpi_traffic]") {
  MLS_MPI_TEST(2);
  Communicator c = world();
  const int n = c.size();
  const std::int64_t size = 1000 * n + 3;
  Tensor t = Tensor::ones({size});
  c.allreduce(t, ReduceOp::Sum, Algo::Ring);
  const auto& m = c.traffic().by_op.at("allreduce");
  mls::testing::observe("allreduce messages, steps, bytes", std::vector<std::int64_t>{m.messages_sent, m.steps, m.bytes_sent});
  MLS_ORACLE_CHECK(CHECK(m.messages_sent == 2 * (n - 1)); CHECK(m.steps == 2 * (n - 1));
                   const auto b = chunk_bounds(size, n); const int r = c.rank(), r1 = (r + 1) % n;
                   CHECK(m.bytes_sent == (n == 1 ? 0 : (2 * size - (b[r + 1] - b[r]) - (b[r1 + 1] - b[r1])) * 4));
                   // The same run on simulated ranks counts the same bytes.
                   auto rep = run_simulated(n, [&](Communicator& s) {
                     Tensor u = Tensor::ones({size});
                     s.allreduce(u, ReduceOp::Sum, Algo::Ring);
                   });
                   CHECK(rep.traffic[r].by_op.at("allreduce").bytes_sent == m.bytes_sent));
}

TEST_CASE("mpi: send/recv with tags, isend/irecv of large messages, split", "[lab5][mpi][mpi_comm][mpi_p2p]") {
  MLS_MPI_TEST(2);
  Communicator c = world();
  const int n = c.size(), me = c.rank();
  Tensor out = Tensor::full({100000}, me, DType::Float32), in = Tensor::zeros({100000});
  Request rr = c.irecv(in, (me + n - 1) % n, 4);
  Request rs = c.isend(out, (me + 1) % n, 4);
  rr.wait();
  rs.wait();
  mls::testing::observe_values("received", in);
  MLS_ORACLE_CHECK(CHECK(in.at({99999}) == (me + n - 1) % n));
  Communicator half = c.split(me % 2, me);
  Tensor v = Tensor::full({1}, me, DType::Int64);
  half.allreduce(v);
  mls::testing::observe_values("split allreduce", v);
  mls::testing::observe("backend", half.backend());
  MLS_ORACLE(double want = 0; for (int r = me % 2; r < n; r += 2) want += r;)
  MLS_ORACLE_CHECK(CHECK(v.at({0}) == want); CHECK(half.backend() == "mpi"));
}

TEST_CASE("mpi: mismatched sizes and a receive that never matches end in mls::Error, not a hang", "[lab5][mpi][mpi_comm][mpi_errors]") {
  MLS_MPI_TEST(2);
  Communicator c = world(1500);
  if (c.size() < 2) {
    WARN("SKIPPED: needs 2 ranks or more (world size 1)");
    return;
  }
  {
    Tensor t = Tensor::ones({c.rank() == 1 ? 5 : 4});
    CHECK_THROWS_AS(c.allreduce(t, ReduceOp::Sum, Algo::Ring), Error);
  }
  Communicator d = world(500);
  Tensor t = Tensor::ones({2});
  if (c.rank() == 0) {
    try {
      d.recv(t, 1, 11);
      FAIL("expected a timeout");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("timed out after 500 ms waiting for a message from rank 1") != std::string::npos);
    }
  }
  Communicator e = world();
  e.barrier();  // everyone is past the failures
}
