// Student file of lab 5: write the bodies between the SOLUTION markers (mls-grader grades this file).
// The progress engine of the asynchronous collectives (iallreduce, ireduce_scatter, iallgather,
// ibroadcast: comm.hpp).
//
// Design: one communication thread per Communicator runs the same algorithms as the blocking
// collectives (ring, tree, Rabenseifner ...), unchanged, one after the other in issue order,
// while the caller's thread computes. Why a thread and not non-blocking sends driven from
// test()/wait(): the algorithms are straight-line code over blocking send/recv (you wrote them
// so); a thread runs them as they are on every backend (sim, MPI, NCCL), and it makes progress
// even when the caller does not call test() for a long stretch of compute — exactly when
// overlap matters. The price: MPI must provide MPI_THREAD_MULTIPLE (mpi.hpp).
//
// The queue (src/async_queue.hpp, given):
//   q.next()            blocks for the oldest queued collective; nullptr when shutting down
//   q.failure()         the first error of an earlier collective (null if none)
//   q.run(*this, op)    runs op's collective on this thread (throws its error)
//   q.complete(op, e)   marks op done with error e (null: success), wakes whoever waits on it
#include "async_queue.hpp"

#include "mls/common/error.hpp"

namespace mls::parallel {

/// The communication thread's loop: until q.next() returns nullptr, take the next collective
/// and complete it — run it, unless an earlier collective on this communicator failed (then it
/// fails with that error without sending anything: after a failure the ranks no longer agree
/// on where they are), and complete it with the error it threw, if any. Never let an exception
/// escape the loop: a collective's error belongs to its request (wait() rethrows it).
/// Hint: std::current_exception() inside catch (...) captures any exception.
void Communicator::progress_loop(AsyncQueue& q) {
  // BEGIN SOLUTION
  while (std::shared_ptr<AsyncOp> op = q.next()) {
    std::exception_ptr error = q.failure();
    if (!error) {
      try {
        q.run(*this, *op);
      } catch (...) {
        error = std::current_exception();
      }
    }
    q.complete(*op, error);
  }
  // END SOLUTION
}

}  // namespace mls::parallel
