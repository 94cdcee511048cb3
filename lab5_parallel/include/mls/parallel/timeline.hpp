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

/// The least t_step / max(t_compute, t_comm) an overlap efficiency `efficiency` allows: the
/// efficiency's formula, (t_compute + t_comm − t_step) / min(t_compute, t_comm), solved for t_step,
/// over max(t_compute, t_comm): (t_compute + t_comm − efficiency·min) / max. At t_comm = t_compute
/// it is 2 − efficiency, so a step within 1.15 × max needs an efficiency (and a ceiling) >= 0.85.
/// mls-dp-bench and mls-zero-bench print it for their efficiency ceilings. Errors: a time <= 0 or
/// not finite, an efficiency outside [0, 1].
double step_over_max_floor(double t_compute, double t_comm, double efficiency);

/// One SVG: a column per panel ({title, per-rank timelines}), in each a compute and a
/// communication lane per rank, one time axis (milliseconds) shared by the panels; `kinds`
/// names each span kind (with its colour, in order from a fixed palette); `note` is printed
/// under the title (e.g. the emulated link's label).
std::string timeline_svg(const std::vector<std::pair<std::string, std::vector<RankTimeline>>>& panels,
                         const std::vector<std::string>& kinds, const std::string& title, const std::string& note = "");

}  // namespace mls::parallel
