// Asynchronous collectives on the MPI backend (processes; the communication thread needs
// MPI_THREAD_MULTIPLE): bit-identical to the blocking collectives, several in flight, and the
// bad inputs that can be checked on real processes (wait twice, mismatched issue order).
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
std::vector<double> bits(const Tensor& t) { return t.to(DType::Float64).to_vector<double>(); }
}  // namespace

TEST_CASE("mpi async: iallreduce, ireduce_scatter, iallgather, ibroadcast equal the blocking collectives bit for bit",
          "[lab5][mpi][mpi_async]") {
  MLS_MPI_TEST(2);
  Communicator c = mpi_world(std::chrono::milliseconds(60000));
  const int n = c.size(), me = c.rank();
  for (DType dt : all_dtypes())
    for (Algo algo : {Algo::Ring, Algo::RecursiveDoubling, Algo::Rabenseifner})
      for (std::int64_t size : {std::int64_t{0}, std::int64_t{n + 1}, std::int64_t{5000}}) {
        std::vector<Tensor> inputs;
        for (int r = 0; r < n; ++r) inputs.push_back(input_of(r, size, dt, 13));
        const Tensor x = inputs[me];
        Tensor a = x.clone(), b = x.clone(), rs, ag;
        Request ra = c.iallreduce(a, ReduceOp::Sum, algo);
        Request rr = c.ireduce_scatter(x, rs, ReduceOp::Sum);
        Request rg = c.iallgather(x, ag);
        Request rb = c.ibroadcast(b, n - 1);
        rb.wait();
        rg.wait();
        rr.wait();
        ra.wait();
        const std::string cx = ctx(n, size, dt, to_string(algo)) + " rank " + std::to_string(me);
        MLS_CHECK_CLOSE(bits(a), reduce_ref(inputs, ReduceOp::Sum), dt, n, cx);
        mls::testing::observe("ireduce_scatter " + cx, bits(rs), tol_of(dt, n));
        mls::testing::observe("iallgather " + cx, bits(ag));
        mls::testing::observe("ibroadcast " + cx, bits(b));
        Tensor a2 = x.clone(), b2 = x.clone();
        c.allreduce(a2, ReduceOp::Sum, algo);
        c.broadcast(b2, n - 1);
        INFO(cx);
        CHECK(bits(a) == bits(a2));
        CHECK(bits(rs) == bits(c.reduce_scatter(x, ReduceOp::Sum)));
        CHECK(bits(ag) == bits(c.allgather(x)));
        CHECK(bits(b) == bits(b2));
      }
  // many in flight, waited in reverse: complete in issue order
  std::vector<Tensor> ts;
  std::vector<Request> rq;
  for (int k = 0; k < 8; ++k) {
    ts.push_back(Tensor::full({1000 + k}, me + k, DType::Int64));
    rq.push_back(c.iallreduce(ts.back()));
  }
  for (int k = 7; k >= 0; --k) rq[k].wait();
  std::vector<double> first;
  for (auto& t : ts) first.push_back(t.at({0}));
  mls::testing::observe("first element of 8 iallreduces, rank " + std::to_string(me), first);
  MLS_ORACLE_CHECK(for (int k = 0; k < 8; ++k) CHECK(first[k] == n * (n - 1) / 2 + n * k));
}

TEST_CASE("mpi async: wait twice and a mismatched issue order are errors on every rank within the timeout", "[lab5][mpi][mpi_async]") {
  MLS_MPI_TEST(2);
  {
    Communicator c = mpi_world(std::chrono::milliseconds(60000));
    Tensor t = Tensor::ones({10});
    Request r = c.iallreduce(t);
    r.wait();
    mls::testing::observe("iallreduce of ones", t.at({0}));
    MLS_ORACLE_CHECK(CHECK(t.at({0}) == c.size()));
    mls::testing::require_error([&] { r.wait(); }, "iallreduce #0 was already waited on");
  }
  // rank 1 receives rank 0's allreduce message in its broadcast: a header mismatch; rank 0 then
  // waits for a message rank 1 never sends: the timeout (both within it, neither hangs)
  Communicator c = mpi_world(std::chrono::milliseconds(2000));
  mls::testing::require_error([&] {
    Tensor a = Tensor::ones({3}), b = Tensor::ones({3});
    Request r1 = c.rank() == 0 ? c.iallreduce(a) : c.ibroadcast(b, 0);
    Request r2 = c.rank() == 0 ? c.ibroadcast(b, 0) : c.iallreduce(a);
    r1.wait();
    r2.wait();
  }, c.rank() == 1 ? "every rank must call the same collectives in the same order" : "timed out after 2000 ms");
}
