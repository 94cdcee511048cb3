#pragma once
/// An emulated slow link (issue 30): on one machine the links are memory copies, too fast to need
/// hiding. With
///   MLS_LINK_GBPS=<gigabits per second>   every message is paced to this bandwidth
///   MLS_LINK_US=<microseconds>            and pays this latency
/// the MPI backend holds each message back on its sender until the link (one per process, shared
/// by its communicators and threads) would have carried it: start = max(now, link free) (the
/// link free time itself when now is less than 100 us past it: the sender's sleep overshot),
/// done = start + us·1e-6 + 8·bytes / (gbps·1e9); the sender sleeps (never spins) until `done`
/// and posts the send then. A program may set the link itself (mpi_set_link: mls-dp-bench
/// --link-auto); its label then names it (origin). The simulated
/// backend takes them as its α = us·1e-6 and β = 8 / (gbps·1e9) (the one that is unset keeps
/// the cost model's value). Every program that runs with them prints the label() line: the
/// figures are of an emulated link, not of the hardware. Unset or empty: no emulation.
#include <chrono>
#include <cstdint>
#include <string>

namespace mls::parallel {

/// The pacing's credit: a sender that arrives less than this after its link became free starts
/// its message when the link became free (its sleep overshot; the link was never idle). So a
/// message can finish up to this much sooner after its sender arrived than seconds() says, and a
/// lower bound on a sequence of k paced messages is k · (seconds() − kLinkCredit).
inline constexpr std::chrono::microseconds kLinkCredit{100};

struct LinkEmulation {
  double gbps = 0;  // 0: no bandwidth limit
  double us = 0;    // latency per message
  bool has_gbps = false, has_us = false;
  /// Who chose the figures when not the environment (e.g. "mls-dp-bench --link-auto"); the
  /// label names it instead of the variables.
  std::string origin;
  bool active() const { return has_gbps || has_us; }
  /// Seconds one message of `bytes` payload bytes occupies the link.
  double seconds(std::int64_t bytes) const;
  /// "emulated link: 1 Gbit/s, 50 us per message (MLS_LINK_GBPS=1, MLS_LINK_US=50; not the
  /// hardware's figures)", or "" when inactive; with an origin "(set by <origin>; not ...)".
  std::string label() const;
};

/// Parses the two settings ("" = unset). A spec that makes no sense (not a number, trailing
/// text, a bandwidth <= 0, a latency < 0, not finite, a latency over 1 s) is an mls::Error
/// naming the variable and the value.
LinkEmulation parse_link(const std::string& gbps, const std::string& us);
/// parse_link of the environment's MLS_LINK_GBPS and MLS_LINK_US.
LinkEmulation link_from_env();

}  // namespace mls::parallel
