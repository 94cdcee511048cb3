// The NCCL backend on the GPUs of this machine (one GPU: world size 1). Without a GPU every
// test says "SKIPPED: no GPU" (CTest reports it as skipped; the grader leaves it out).
#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>

#include "lab5_testing.hpp"
#include "mls/parallel/comm.hpp"
#include "mls/parallel/nccl.hpp"
#include "mls/testing.hpp"

using namespace mls;
using namespace mls::parallel;
using namespace mls::parallel::testing;

#define REQUIRE_GPU() MLS_REQUIRE_GPU(nccl_gpu_available)

TEST_CASE("nccl: world size 1, our algorithms and ncclAllReduce agree", "[lab5][gpu][nccl]") {
  REQUIRE_GPU();
  Communicator c = nccl_world();
  mls::testing::observe("backend", c.backend());
  MLS_OBSERVE(c.size());
  MLS_ORACLE_CHECK(CHECK(c.backend() == "nccl"); CHECK(c.size() == 1));
  for (DType dt : all_dtypes())
    for (ReduceOp op : all_ops())
      for (Algo algo : {Algo::Ring, Algo::RecursiveDoubling, Algo::Rabenseifner, Algo::Native}) {
        Tensor t = input_of(0, 1000, dt);
        c.allreduce(t, op, algo);
        MLS_CHECK_CLOSE(t.to_vector<double>(), reduce_ref({input_of(0, 1000, dt)}, op), dt, 1, to_string(algo));
      }
  Tensor b = input_of(0, 77, DType::Float32);
  c.broadcast(b, 0, Algo::Native);
  mls::testing::observe_values("broadcast", b);
  MLS_OBSERVE(c.traffic().total.messages_sent);
  MLS_ORACLE_CHECK(CHECK(b.to_vector<double>() == input_of(0, 77, DType::Float32).to_vector<double>());
                   CHECK(c.traffic().total.messages_sent == 0));
}

TEST_CASE("nccl: bad ranks are an mls::Error", "[lab5][gpu][nccl]") {
  REQUIRE_GPU();
  mls::testing::require_error([] { (void)nccl_world(2, 2); }, "nccl_world: rank 2 of 2 is out of range");
  mls::testing::require_error([] { (void)nccl_world(0, 2, ""); }, "need an id file");
}

TEST_CASE("nccl: the unique id travels over a bootstrap communicator (no shared file), one rank per GPU",
          "[lab5][gpu][nccl]") {
  REQUIRE_GPU();
  int devices = 0;
  REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
  // Simulated ranks (threads) bootstrap one NCCL rank each: 2 where there are 2 GPUs, else 1.
  const int n = std::min(devices, 2);
  std::mutex mu;
  std::vector<std::vector<double>> got(static_cast<std::size_t>(n));
  std::vector<std::string> backends(static_cast<std::size_t>(n));
  run_simulated(n, [&](Communicator& boot) {
    Communicator c = nccl_world(boot);
    Tensor t = input_of(c.rank(), 1000, DType::Float32);
    c.allreduce(t, ReduceOp::Sum, Algo::Ring);
    std::lock_guard<std::mutex> lock(mu);
    got[static_cast<std::size_t>(c.rank())] = t.to_vector<double>();
    backends[static_cast<std::size_t>(c.rank())] = c.backend() + " " + std::to_string(c.size());
  });
  std::vector<Tensor> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(input_of(r, 1000, DType::Float32));
  for (int r = 0; r < n; ++r) {
    const std::string& backend = backends[static_cast<std::size_t>(r)];
    const std::vector<double>& reduced = got[static_cast<std::size_t>(r)];
    mls::testing::observe("rank " + std::to_string(r) + " backend and size", backend);
    MLS_ORACLE_CHECK(CHECK(backend == "nccl " + std::to_string(n)));
    MLS_CHECK_CLOSE(reduced, reduce_ref(inputs, ReduceOp::Sum), DType::Float32, n, "rank " << r << ": bootstrapped ring allreduce");
  }
}

TEST_CASE("nccl: an nccl communicator cannot bootstrap another", "[lab5][gpu][nccl]") {
  REQUIRE_GPU();
  Communicator c = nccl_world();
  mls::testing::require_error([&] { (void)nccl_world(c); }, "nccl_world: the bootstrap communicator must be another backend");
}

TEST_CASE("nccl: iallreduce runs on the communication thread's own stream, ordered after the compute stream, "
          "and equals the blocking allreduce", "[lab5][gpu][nccl]") {
  REQUIRE_GPU();
  Communicator c = nccl_world();
  // compute on the default (compute) stream while the collectives are in flight: a device buffer
  // filled and copied back, which the communication stream must neither wait for nor disturb
  void* scratch = nullptr;
  REQUIRE(cudaMalloc(&scratch, 1 << 22) == cudaSuccess);
  for (DType dt : all_dtypes())
    for (Algo algo : {Algo::Ring, Algo::Native}) {
      std::vector<Tensor> ts;
      std::vector<Request> rq;
      for (int k = 0; k < 4; ++k) {
        ts.push_back(input_of(k, 1000 + k, dt));
        rq.push_back(c.iallreduce(ts.back(), ReduceOp::Sum, algo));
        REQUIRE(cudaMemsetAsync(scratch, k, 1 << 22, nullptr) == cudaSuccess);
      }
      REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
      for (int k = 3; k >= 0; --k) rq[static_cast<std::size_t>(k)].wait();  // complete in issue order
      CHECK(c.in_flight() == 0);
      for (int k = 0; k < 4; ++k) {
        Tensor b = input_of(k, 1000 + k, dt);
        c.allreduce(b, ReduceOp::Sum, algo);
        const std::string cx = std::string(to_string(algo)) + " #" + std::to_string(k);
        mls::testing::observe("iallreduce on nccl " + cx, ts[static_cast<std::size_t>(k)].to_vector<double>());
        INFO(cx);
        CHECK(ts[static_cast<std::size_t>(k)].to_vector<double>() == b.to_vector<double>());
        MLS_CHECK_CLOSE(ts[static_cast<std::size_t>(k)].to_vector<double>(), reduce_ref({input_of(k, 1000 + k, dt)}, ReduceOp::Sum),
                        dt, 1, cx);
      }
    }
  cudaFree(scratch);
  mls::testing::require_error([&] {
    Tensor t = Tensor::ones({3});
    Request r = c.iallreduce(t);
    r.wait();
    r.wait();
  }, "was already waited on");
}
