// Not a test case: a program in which rank 1 throws. mpi_run must end the whole job with the
// message (MPI_Abort), never leave rank 0 waiting. CTest runs it under mpirun and looks for
// the message (lab5:mpi:abort; with the argument `async`, lab5:mpi:abort:async: rank 1 throws
// while its own asynchronous allreduce is in flight, and rank 0 waits on an asynchronous
// allreduce that rank 1 never joins).
#include <cstring>

#include "mls/common/error.hpp"
#include "mls/parallel/mpi.hpp"

int main(int argc, char** argv) {
  using namespace mls::parallel;
  const bool async = argc > 1 && std::strcmp(argv[1], "async") == 0;
  return mpi_run([async](Communicator& c) {
    mls::Tensor t = mls::Tensor::ones({4});
    if (!async) {
      if (c.rank() == 1) throw mls::Error("rank one's data loader failed");
      c.allreduce(t);  // rank 0 waits for rank 1, which is gone
      return;
    }
    mls::Tensor big = mls::Tensor::ones({1 << 20});
    Request first = c.iallreduce(big);  // both ranks: in flight on the communication thread
    if (c.rank() == 1) throw mls::Error("rank one failed with an iallreduce in flight");
    first.wait();
    Request second = c.iallreduce(t);  // rank 1 never issues it
    second.wait();                     // rank 0 waits here until the job ends with rank 1's message
  });
}
