// The NCCL backend on the GPUs of this machine (one GPU: world size 1). Without a GPU every
// test says "SKIPPED: no GPU" (CTest reports it as skipped; the grader leaves it out).
#include <catch2/catch.hpp>

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
