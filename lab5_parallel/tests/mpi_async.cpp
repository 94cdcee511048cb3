// Asynchronous collectives on the MPI backend (processes; the communication thread needs
// MPI_THREAD_MULTIPLE): bit-identical to the blocking collectives, several in flight, and the
// bad inputs that can be checked on real processes (wait twice, mismatched issue order).
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>

#include "lab5_testing.hpp"
#include "mpi_launch.hpp"
#include "mls/parallel/comm.hpp"
#include "mls/parallel/link.hpp"
#include "mls/parallel/mpi.hpp"
#include "mls/testing.hpp"

using namespace mls;
using namespace mls::parallel;
using namespace mls::parallel::testing;

namespace {
std::vector<double> bits(const Tensor& t) { return t.to(DType::Float64).to_vector<double>(); }

/// Rank 0 sends t to rank 1 and receives it back (two paced messages of t's bytes); other ranks
/// take no part. Returns the seconds the calling rank spent in it.
double round_trip(Communicator& c, Tensor& t) {
  const auto t0 = std::chrono::steady_clock::now();
  if (c.rank() == 0) {
    c.send(t, 1, 7);
    c.recv(t, 1, 8);
  } else if (c.rank() == 1) {
    c.recv(t, 0, 7);
    c.send(t, 0, 8);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
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

TEST_CASE("mpi async: a rank that stops while an asynchronous collective is in flight is an error on the others within the timeout",
          "[lab5][mpi][mpi_async]") {
  MLS_MPI_TEST(2);
  // Rank 1 "dies" (leaves without joining rank 0's iallreduce): rank 0's wait() ends with the
  // timeout's error, not a hang. A process that really dies is lab5:mpi:abort:async (mpi_run's
  // MPI_Abort ends the job with its message).
  Communicator c = mpi_world(std::chrono::milliseconds(2000));
  Tensor warm = Tensor::ones({5});
  c.iallreduce(warm).wait();  // both alive: a collective completes
  mls::testing::observe("iallreduce of ones before the failure", bits(warm));
  MLS_ORACLE_CHECK(CHECK(bits(warm) == std::vector<double>(5, static_cast<double>(c.size()))));
  if (c.rank() != 0) return;  // the other ranks stop here
  Tensor t = Tensor::ones({1000});
  Request r = c.iallreduce(t);
  const auto t0 = std::chrono::steady_clock::now();
  mls::testing::require_error([&] { r.wait(); }, "timed out after 2000 ms");
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("rank 0 waited " << waited << " s");
  CHECK(waited < 30.0);  // bounded by the timeout (generous: a busy machine), never a hang
}

TEST_CASE("mpi link: an emulated link paces every message (N bytes take at least N/bandwidth + latency), a bad spec is an error on every rank",
          "[lab5][mpi][mpi_async]") {
  MLS_MPI_TEST(2);
  struct Env {  // restores an unpaced link for the tests after this one (mpi_world reads the environment)
    ~Env() {
      unsetenv("MLS_LINK_GBPS");
      unsetenv("MLS_LINK_US");
    }
  } env;
  setenv("MLS_LINK_GBPS", "0.08", 1);  // 10 MB/s
  setenv("MLS_LINK_US", "3000", 1);    // 3 ms per message
  const LinkEmulation link = link_from_env();
  REQUIRE(link.active());
  {
    Communicator c = mpi_world(std::chrono::milliseconds(60000));
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{1000}, std::int64_t{25000}}) {  // 4 B .. 100 kB
      Tensor t = Tensor::full({n}, c.rank() + 1.0);
      c.barrier();
      const double s = round_trip(c, t);  // two paced messages of 4n bytes
      if (c.rank() > 1) continue;
      mls::testing::observe("round-tripped payload", bits(t));
      MLS_ORACLE_CHECK(CHECK(bits(t) == std::vector<double>(static_cast<std::size_t>(n), 1.0)));
      // a lower bound only (a busy machine makes it slower, never faster): the pacing itself, less
      // the credit a message may start with (kLinkCredit: it may start when the link became free,
      // just before its sender arrived, after the barrier's own paced messages)
      const double credit = std::chrono::duration<double>(kLinkCredit).count();
      const double want = 2 * (link.seconds(4 * n) - credit);
      INFO("rank " << c.rank() << ": " << 4 * n << " bytes each way took " << s << " s for the round trip, at least "
                   << want << " s expected on the emulated link");
      if (c.rank() == 0) CHECK(s >= want);
      CHECK(link.seconds(4 * n) >= (3e-3 + 8.0 * 4 * n / 0.08e9) * (1 - 1e-12));  // latency + bytes / bandwidth
    }
  }
  // every rank reads the same environment: a bad spec fails on each of them, before any message
  setenv("MLS_LINK_GBPS", "-1", 1);
  mls::testing::require_error([] { mpi_world(); }, "MLS_LINK_GBPS='-1': the bandwidth must be > 0 Gbit/s");
  setenv("MLS_LINK_GBPS", "1", 1);
  setenv("MLS_LINK_US", "fast", 1);
  mls::testing::require_error([] { mpi_world(); }, "MLS_LINK_US='fast': expected a number");
}

TEST_CASE("mpi link: mpi_set_link paces as the environment's link does, labelled with who set it, until handed back",
          "[lab5][mpi][mpi_async]") {
  MLS_MPI_TEST(2);
  Communicator c = mpi_world(std::chrono::milliseconds(60000));
  LinkEmulation link = parse_link("0.08", "3000");  // 10 MB/s, 3 ms per message
  link.origin = "this test";
  c.barrier();
  mpi_set_link(link);
  struct Back {  // the environment's (unset: no emulation) for the tests after this one
    ~Back() { mpi_set_link(std::nullopt); }
  } back;
  CHECK(mpi_link().label() ==
        "emulated link: 0.08 Gbit/s, 3000 us per message (set by this test; not the hardware's figures)");
  const std::int64_t n = 1000;  // 4 kB each way
  Tensor t = Tensor::full({n}, c.rank() + 1.0);
  c.barrier();
  const double s = round_trip(c, t);
  if (c.rank() <= 1) {  // ranks 2, 3 (np 4) take no part in the round trip
    mls::testing::observe("round-tripped payload", bits(t));
    MLS_ORACLE_CHECK(CHECK(bits(t) == std::vector<double>(static_cast<std::size_t>(n), 1.0)));
    const double want = 2 * (link.seconds(4 * n) - std::chrono::duration<double>(kLinkCredit).count());
    INFO("rank " << c.rank() << ": the round trip took " << s << " s, at least " << want
                 << " s expected (two paced messages, less the pacing's credit each)");
    if (c.rank() == 0) CHECK(s >= want);  // a lower bound: the pacing
  }
  c.barrier();
  mpi_set_link(std::nullopt);  // back to the environment: MLS_LINK_* unset, no emulation
  CHECK_FALSE(mpi_link().active());
}
