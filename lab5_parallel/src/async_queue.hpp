#pragma once
/// The asynchronous collectives' queue (internal: communicator.cpp and the progress loop in
/// async.cpp). One queue and one communication thread per Communicator that issued one.
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "mls/common/memory.hpp"
#include "mls/parallel/comm.hpp"

namespace mls::parallel {

/// One issued asynchronous collective.
struct AsyncOp {
  const char* name = "";          // "iallreduce", ...
  std::int64_t index = 0;         // issue number on this communicator (0, 1, ...)
  std::function<void()> run;      // the blocking collective, run by the communication thread
  double issued_at = 0.0;         // compute-lane time when issued (sim)
  double issued_wall = 0.0;       // Communicator::wall_now() when issued (its Span's issued)
  double finished_at = 0.0;       // communication-lane time when it finished (sim)
  mem::Tag mem_tag = mem::Tag::Other;  // the issuing thread's memory scope: the collective's
  int mem_rank = 0, thread_rank = 0;   // buffers count where the blocking call's would
  // completion, guarded by AsyncQueue::mu
  bool done = false;
  std::exception_ptr error;
};

struct Communicator::AsyncQueue {
  std::mutex mu;
  std::condition_variable cv;                 // signalled on every issue, completion and stop
  std::deque<std::shared_ptr<AsyncOp>> queued;  // issued, not started, in issue order
  int in_flight = 0;                          // issued and not complete
  bool stopping = false;
  std::exception_ptr failed;                  // the first failure: later collectives fail with it
  Transport* transport = nullptr;             // for lane_join; null once the communicator is gone
  std::shared_ptr<AsyncOp> current;           // taken by next(), not yet complete
  double last_finished = 0.0;                 // finished_at of the latest completed collective
  bool dead = false;                          // the loop ended: later collectives fail at once
  std::thread worker;

  /// Blocks until a collective is queued and returns it (the oldest: issue order), or returns
  /// nullptr when the communicator shuts down and nothing is left.
  std::shared_ptr<AsyncOp> next();
  /// The first failure of an earlier collective on this communicator (null if none): a
  /// collective queued behind a failed one must not run (the ranks no longer agree where
  /// they are), it fails with the same error.
  std::exception_ptr failure();
  /// Runs `op` on `c` (on the calling thread, the communication thread): the blocking
  /// collective, started on the communication lane at op.issued_at; records op.finished_at.
  /// Throws what the collective throws.
  void run(Communicator& c, AsyncOp& op);
  /// Marks `op` complete (with `error`, or null on success) and wakes its waiters; the first
  /// error is remembered as the queue's failure.
  void complete(AsyncOp& op, std::exception_ptr error);
  /// After the loop ended (returned, or threw `why`): completes whatever is left with an error
  /// and marks the queue dead (given plumbing, not part of the loop).
  void abandon(std::exception_ptr why);
};

}  // namespace mls::parallel
