#pragma once
/// The simulated backend's transports, for callers that run the rank threads themselves
/// (run_simulated in comm.hpp does that for you).
#include <memory>
#include <vector>

#include "mls/parallel/comm.hpp"

namespace mls::parallel {

/// `n` transports of one simulated world (rank r is element r), sharing mailboxes and clocks.
std::vector<std::unique_ptr<Transport>> make_sim_world(int n, const SimOptions& opts = {});

/// Rank `rank` of a world of `size` whose messages go nowhere: sends are dropped, receives write
/// zeros. A Communicator over it runs the collectives' local work and no
/// communication — the "no-op communicator of the same size" that times t_compute.
std::unique_ptr<Transport> make_noop_transport(int rank, int size);

}  // namespace mls::parallel
