#pragma once
/// Internals shared by the Communicator and the transports (not a public header).
#include <string>

#include "mls/parallel/comm.hpp"

namespace mls::parallel::detail {

/// Collective ids carried in Header::op.
enum CollOp : int {
  kUser = -1, kBarrier = 1, kBroadcast, kReduce, kAllreduce, kGather, kAllgather, kScatter,
  kReduceScatter, kAllToAll, kSplit, kAllToAllv
};
const char* coll_name(int op);

/// The tag of every collective message (above every user tag).
constexpr int kCollTag = Communicator::kMaxUserTag + 1;
/// The tag the sim transport's split exchange uses.
constexpr int kSplitTag = Communicator::kMaxUserTag + 2;

/// Compares a received header with the expected one; returns "" when they agree, else the
/// error text ("allreduce: rank 1 has 12 elements but rank 0 sent 10 ...").
std::string header_mismatch(const Header& expect, const Header& got, const char* what, int me, int src);


/// Whether a transport's waits on this thread sleep between polls. The communication thread sets
/// it: it shares its rank's core with the compute it hides behind, so it must not spin while a
/// collective waits for the peer. Every other thread (a blocking collective) polls back to back,
/// as MPI_Wait does: a nap there only makes each message, and each fragment of a large one, late.
inline bool& this_thread_waits_nap() {
  thread_local bool nap = false;
  return nap;
}

}  // namespace mls::parallel::detail
