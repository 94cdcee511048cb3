#pragma once
/// The overlap timeline (issue 30): per rank a compute lane and a communication lane, for a
/// blocking and an overlapped step side by side — the picture a profiler shows. Spans are wall
/// seconds from the start of the step on each rank. Drawn with common's SVG writer.
#include <string>
#include <utility>
#include <vector>

#include "mls/parallel/comm.hpp"

namespace mls::parallel {

struct TimelineSpan {
  int lane = 0;   // 0: compute (the caller's thread), 1: communication (the collectives)
  int kind = 0;   // index into the kinds passed to timeline_svg ("forward", "backward", ...)
  double start = 0, end = 0;
};
using RankTimeline = std::vector<TimelineSpan>;

/// Every rank's spans on rank 0, in rank order (other ranks get an empty vector). Collective:
/// every rank calls it.
std::vector<RankTimeline> gather_timeline(Communicator& comm, const RankTimeline& mine);

/// The collectives `comm` recorded since `since` (Communicator::spans) as communication-lane
/// spans of kind `kind`, times made relative to `t0`.
RankTimeline comm_spans(const Communicator& comm, double since, double t0, int kind);

/// One SVG: a column per panel ({title, per-rank timelines}), in each a compute and a
/// communication lane per rank, one time axis (milliseconds) shared by the panels; `kinds`
/// names each span kind (with its colour, in order from a fixed palette); `note` is printed
/// under the title (e.g. the emulated link's label).
std::string timeline_svg(const std::vector<std::pair<std::string, std::vector<RankTimeline>>>& panels,
                         const std::vector<std::string>& kinds, const std::string& title, const std::string& note = "");

}  // namespace mls::parallel
