#pragma once
/// The simulated backend's transports, for callers that run the rank threads themselves
/// (run_simulated in comm.hpp does that for you).
#include <memory>
#include <vector>

#include "mls/parallel/comm.hpp"

namespace mls::parallel {

/// `n` transports of one simulated world (rank r is element r), sharing mailboxes and clocks.
std::vector<std::unique_ptr<Transport>> make_sim_world(int n, const SimOptions& opts = {});

}  // namespace mls::parallel
