// Asynchronous collectives (iallreduce, ireduce_scatter, iallgather, ibroadcast) on simulated
// ranks: bit-identical to the blocking collectives, several in flight, completion in issue order,
// the α-β-γ clock's overlapped schedule, and every bad input of issue 30.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <tuple>

#include "lab5_testing.hpp"
#include "mls/parallel/comm.hpp"
#include "mls/parallel/link.hpp"
#include "mls/testing.hpp"

using namespace mls;
using namespace mls::parallel;
using namespace mls::parallel::testing;
using mls::testing::require_error;

namespace {
std::vector<double> bits(const Tensor& t) { return t.to(DType::Float64).to_vector<double>(); }
}  // namespace

TEST_CASE("async: iallreduce, ireduce_scatter, iallgather, ibroadcast equal the blocking collectives bit for bit",
          "[lab5][async]") {
  for (int n : {1, 2, 3, 4, 5}) {
    for (DType dt : all_dtypes()) {
      for (Algo algo : {Algo::Ring, Algo::RecursiveDoubling, Algo::Rabenseifner}) {
        const std::int64_t size = 2 * n + 3;
        std::vector<std::vector<double>> ar(n), ar_ref(n), rs(n), rs_ref(n), ag(n), ag_ref(n), bc(n), bc_ref(n);
        std::vector<Tensor> inputs;
        for (int r = 0; r < n; ++r) inputs.push_back(input_of(r, size, dt, 11));
        run_simulated(n, [&](Communicator& c) {
          const Tensor x = inputs[c.rank()];
          // asynchronous first (student code: the progress loop), all four in flight at once
          Tensor a = x.clone(), b = x.clone(), rs_out, ag_out;
          Request ra = c.iallreduce(a, ReduceOp::Sum, algo);
          Request rr = c.ireduce_scatter(x, rs_out, ReduceOp::Sum);
          Request rg = c.iallgather(x, ag_out);
          Request rb = c.ibroadcast(b, n - 1);
          rb.wait();  // waited out of issue order: they still complete in issue order
          rg.wait();
          rr.wait();
          ra.wait();
          ar[c.rank()] = bits(a), rs[c.rank()] = bits(rs_out), ag[c.rank()] = bits(ag_out), bc[c.rank()] = bits(b);
          // the blocking collectives on the same inputs
          Tensor a2 = x.clone(), b2 = x.clone();
          c.allreduce(a2, ReduceOp::Sum, algo);
          c.broadcast(b2, n - 1);
          ar_ref[c.rank()] = bits(a2), rs_ref[c.rank()] = bits(c.reduce_scatter(x, ReduceOp::Sum));
          ag_ref[c.rank()] = bits(c.allgather(x)), bc_ref[c.rank()] = bits(b2);
        });
        MLS_ORACLE(const std::vector<double> want = reduce_ref(inputs, ReduceOp::Sum);)
        for (int r = 0; r < n; ++r) {
          const std::string cx = ctx(n, size, dt, to_string(algo)) + " rank " + std::to_string(r);
          MLS_CHECK_CLOSE(ar[r], want, dt, n, cx);
          mls::testing::observe("ireduce_scatter " + cx, rs[r], tol_of(dt, n));
          mls::testing::observe("iallgather " + cx, ag[r]);
          mls::testing::observe("ibroadcast from rank n-1 " + cx, bc[r]);
          INFO(cx);
          CHECK(ar[r] == ar_ref[r]);  // bit for bit
          CHECK(rs[r] == rs_ref[r]);
          CHECK(ag[r] == ag_ref[r]);
          CHECK(bc[r] == bc_ref[r]);
        }
      }
    }
  }
}

TEST_CASE("async: many in flight complete in issue order, test() turns true, iallgather_inplace", "[lab5][async]") {
  const int n = 4;
  std::vector<std::vector<double>> got(n);
  std::vector<int> tested(n, 0);
  run_simulated(n, [&](Communicator& c) {
    std::vector<Tensor> ts;
    std::vector<Request> rq;
    for (int k = 0; k < 6; ++k) {
      ts.push_back(Tensor::full({5 + k}, c.rank() + 10 * k, DType::Int64));
      rq.push_back(c.iallreduce(ts.back(), k % 2 ? ReduceOp::Max : ReduceOp::Sum));
    }
    Tensor buf = Tensor::zeros({10}, DType::Int64);
    const auto bounds = chunk_bounds(10, n);
    buf.slice(0, bounds[c.rank()], bounds[c.rank() + 1]).fill_(static_cast<double>(c.rank() + 1));
    Request rg = c.iallgather_inplace(buf, bounds);
    rq.back().wait();  // the last allreduce done: every earlier one is complete too (issue order)
    for (auto& r : rq) tested[c.rank()] += r.test() ? 1 : 0;
    rg.wait();
    for (int k = 0; k < 5; ++k) rq[k].wait();
    for (auto& t : ts) got[c.rank()].push_back(t.at({0}));
    for (double v : buf.to_vector<double>()) got[c.rank()].push_back(v);
  });
  for (int r = 0; r < n; ++r) {
    mls::testing::observe("first element of 6 iallreduces (sum, max, ...) then iallgather_inplace, rank " +
                              std::to_string(r), got[r]);
    mls::testing::observe("requests complete after waiting for the last, rank " + std::to_string(r), tested[r]);
  }
  MLS_ORACLE_CHECK(for (int r = 0; r < n; ++r) {
    CHECK(got[r] == std::vector<double>{6, 13, 86, 33, 166, 53, 1, 1, 1, 2, 2, 2, 3, 3, 4, 4});
    CHECK(tested[r] == 6);
  });
}

TEST_CASE("async: the simulated clock overlaps compute with an in-flight collective", "[lab5][async]") {
  // One rank's step: a collective of m bytes and T seconds of compute. Blocking: T + t_comm;
  // asynchronous (issue, compute, wait): max(T, t_comm) — the α-β-γ model's overlapped schedule.
  SimOptions o;
  o.cost.alpha = 1e-3;
  o.cost.beta = 1e-6;
  o.cost.gamma = 0;
  for (double compute : {0.0, 0.002, 0.01, 0.05}) {
    std::vector<double> t_block(2), t_async(2), t_comm(2), t_multi(2);
    run_simulated(2, [&](Communicator& c) {
      Tensor x = Tensor::ones({2500}, DType::Float32);  // 10 kB: ring on 2 ranks = 2 steps of 5 kB
      Request r = c.iallreduce(x, ReduceOp::Sum, Algo::Ring);
      c.model_compute(compute);
      r.wait();
      t_async[c.rank()] = c.modelled_seconds();
    }, o);
    run_simulated(2, [&](Communicator& c) {
      Tensor x = Tensor::ones({2500}, DType::Float32);
      c.allreduce(x, ReduceOp::Sum, Algo::Ring);
      t_comm[c.rank()] = c.modelled_seconds();
      c.model_compute(compute);
      t_block[c.rank()] = c.modelled_seconds();
    }, o);
    run_simulated(2, [&](Communicator& c) {  // two buckets, compute in between: the second waits for the first's lane
      Tensor x = Tensor::ones({2500}, DType::Float32), y = x.clone();
      Request r1 = c.iallreduce(x, ReduceOp::Sum, Algo::Ring);
      c.model_compute(compute);
      Request r2 = c.iallreduce(y, ReduceOp::Sum, Algo::Ring);
      c.model_compute(compute);
      r1.wait();
      r2.wait();
      t_multi[c.rank()] = c.modelled_seconds();
    }, o);
    const std::string cx = "compute " + std::to_string(compute) + " s";
    mls::testing::observe("overlapped step, " + cx, t_async[0], {1e-12, 1e-12});
    mls::testing::observe("blocking step, " + cx, t_block[0], {1e-12, 1e-12});
    mls::testing::observe("two buckets overlapped, " + cx, t_multi[0], {1e-12, 1e-12});
    const double comm = 2 * (1e-3 + 5000 * 1e-6);
    INFO(cx);
    CHECK(t_comm[0] == Approx(comm).epsilon(1e-12));
    CHECK(t_block[0] == Approx(compute + comm).epsilon(1e-12));
    CHECK(t_async[0] == Approx(std::max(compute, comm)).epsilon(1e-12));
    CHECK(t_multi[0] == Approx(std::max(2 * compute, std::max(compute, comm) + comm)).epsilon(1e-12));
  }
}

TEST_CASE("async: bad input — wait twice, dropped requests, mismatched order, a dying rank, bad arguments",
          "[lab5][async]") {
  // student code first: a dropped request's destructor waits for it, so its result is there
  std::vector<double> dropped(3);
  run_simulated(3, [&](Communicator& c) {
    Tensor t = Tensor::full({4}, c.rank() + 1.0);
    c.iallreduce(t).wait();  // (a waited one first: its error, if any, is not swallowed)
    { Request r = c.iallreduce(t); }  // destroyed without wait(): waited (and logged once)
    dropped[c.rank()] = t.at({3});
  });
  mls::testing::observe("a dropped iallreduce's result, per rank", dropped);
  MLS_ORACLE_CHECK(CHECK(dropped == std::vector<double>{18, 18, 18}));

  require_error([] {
    run_simulated(2, [](Communicator& c) {
      Tensor t = Tensor::ones({3});
      Request r = c.iallreduce(t);
      r.wait();
      r.wait();
    });
  }, "iallreduce #0 was already waited on");
  require_error([] {
    run_simulated(2, [](Communicator& c) {
      Tensor a = Tensor::ones({3}), b = Tensor::ones({3});
      Request r1 = c.rank() == 0 ? c.iallreduce(a) : c.ibroadcast(b, 0);
      Request r2 = c.rank() == 0 ? c.ibroadcast(b, 0) : c.iallreduce(a);
      r1.wait();
      r2.wait();
    }, quick());
  }, "every rank must call the same collectives in the same order");
  require_error([] {
    run_simulated(3, [](Communicator& c) {
      if (c.rank() == 2) throw Error("rank two's data loader failed");
      Tensor t = Tensor::ones({100});
      Request r = c.iallreduce(t);
      r.wait();
    }, quick());
  }, "rank two's data loader failed");
  require_error([] {  // a rank that never issues its collective: the others time out
    run_simulated(2, [](Communicator& c) {
      Tensor t = Tensor::ones({100});
      if (c.rank() == 0) c.iallreduce(t).wait();
    }, quick(300));
  }, "returned without sending it");
  require_error([] {
    run_simulated(2, [](Communicator& c) {
      Tensor u;
      c.iallreduce(u);
    });
  }, "iallreduce: the tensor is undefined");
  require_error([] {
    run_simulated(2, [](Communicator& c) {
      Tensor t = Tensor::ones({3});
      c.iallreduce(t, ReduceOp::Sum, Algo::Tree);
    });
  }, "iallreduce: algorithm tree is not one of");
  require_error([] {
    run_simulated(2, [](Communicator& c) {
      Tensor t = Tensor::ones({3});
      c.ibroadcast(t, 2);
    });
  }, "ibroadcast: root rank 2 is out of range [0, 2)");
  require_error([] {
    run_simulated(2, [](Communicator& c) {
      Tensor out, t = Tensor::scalar(1.0);
      c.ireduce_scatter(t, out);
    });
  }, "ireduce_scatter: the tensor must have at least one dimension");
  require_error([] {
    run_simulated(2, [](Communicator& c) {
      Tensor t = Tensor::ones({4});
      c.iallgather_inplace(t, {0, 2});
    });
  }, "iallgather_inplace: bounds must be 3 sorted offsets");
  require_error([] {
    run_simulated(1, [](Communicator& c) { c.model_compute(-1.0); });
  }, "model_compute: seconds = -1");
  require_error([] {
    Request r;
    r.wait();
  }, "Request::wait: the request is empty");
}

namespace {
/// Sets MLS_LINK_GBPS / MLS_LINK_US for its lifetime ("" leaves one unset).
struct LinkEnv {
  LinkEnv(const char* gbps, const char* us) {
    ::unsetenv("MLS_LINK_GBPS");
    ::unsetenv("MLS_LINK_US");
    if (*gbps) ::setenv("MLS_LINK_GBPS", gbps, 1);
    if (*us) ::setenv("MLS_LINK_US", us, 1);
  }
  ~LinkEnv() {
    ::unsetenv("MLS_LINK_GBPS");
    ::unsetenv("MLS_LINK_US");
  }
};
}  // namespace

TEST_CASE("async: an emulated link (MLS_LINK_GBPS, MLS_LINK_US) sets the simulated α and β, bad specs are errors",
          "[lab5][async]") {
  std::vector<double> t(2), sum(2);
  SimOptions no_gamma;
  no_gamma.cost.gamma = 0;  // the link alone
  {
    LinkEnv env("8", "100");  // 1 GB/s: β = 1e-9 s/byte; α = 100 us
    run_simulated(2, [&](Communicator& c) {
      Tensor x = Tensor::ones({2500}, DType::Float32);
      Request r = c.iallreduce(x, ReduceOp::Sum, Algo::Ring);
      r.wait();
      t[c.rank()] = c.modelled_seconds();
      sum[c.rank()] = x.at({0});
    }, no_gamma);
  }
  mls::testing::observe("ring iallreduce of 10 kB on 2 ranks over an emulated 8 Gbit/s, 100 us link: seconds", t[0],
                        {1e-12, 1e-12});
  mls::testing::observe("its sum", sum[0]);
  CHECK(t[0] == Approx(2 * (100e-6 + 5000 * 1e-9)).epsilon(1e-12));
  CHECK(t[1] == t[0]);
  CHECK(parse_link("8", "").label() == "emulated link: 8 Gbit/s, no added latency (MLS_LINK_GBPS=8; not the hardware's figures)");
  CHECK(parse_link("", "").label().empty());
  LinkEmulation chosen = parse_link("", "20");  // a bandwidth a program chose (mls-dp-bench --link-auto)
  chosen.has_gbps = true, chosen.gbps = 2.5, chosen.origin = "mls-dp-bench --link-auto";
  CHECK(chosen.label() ==
        "emulated link: 2.5 Gbit/s, 20 us per message (set by mls-dp-bench --link-auto; not the hardware's figures)");
  CHECK(parse_link("0.5", "20").seconds(1000) == Approx(20e-6 + 16e-6));
  for (auto [g, u, needle] : {std::tuple{"abc", "", "MLS_LINK_GBPS='abc': expected a number"},
                              std::tuple{"10x", "", "MLS_LINK_GBPS='10x': expected a number, got trailing text 'x'"},
                              std::tuple{"0", "", "MLS_LINK_GBPS='0': the bandwidth must be > 0"},
                              std::tuple{"-1", "", "MLS_LINK_GBPS='-1': the bandwidth must be > 0"},
                              std::tuple{"inf", "", "MLS_LINK_GBPS='inf': expected a finite number"},
                              std::tuple{"", "-5", "MLS_LINK_US='-5': the latency must be >= 0"},
                              std::tuple{"", "2e6", "MLS_LINK_US='2e6': a latency over 1 s"}}) {
    LinkEnv env(g, u);
    require_error([] { run_simulated(2, [](Communicator&) {}); }, needle);
  }
}
