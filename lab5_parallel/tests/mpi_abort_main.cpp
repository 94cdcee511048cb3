// Not a test case: a program in which rank 1 throws. mpi_run must end the whole job with the
// message (MPI_Abort), never leave rank 0 waiting. CTest runs it under mpirun and looks for
// the message (lab5:mpi:abort).
#include "mls/common/error.hpp"
#include "mls/parallel/mpi.hpp"

int main() {
  using namespace mls::parallel;
  return mpi_run([](Communicator& c) {
    mls::Tensor t = mls::Tensor::ones({4});
    if (c.rank() == 1) throw mls::Error("rank one's data loader failed");
    c.allreduce(t);  // rank 0 waits for rank 1, which is gone
  });
}
