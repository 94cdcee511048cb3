// The overlap timeline (timeline.hpp): gathering the spans and drawing them.
#include "mls/parallel/timeline.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mls/common/error.hpp"
#include "mls/common/svg.hpp"

namespace mls::parallel {

double step_over_max_floor(double t_compute, double t_comm, double efficiency) {
  MLS_CHECK(std::isfinite(t_compute) && t_compute > 0 && std::isfinite(t_comm) && t_comm > 0,
            "step_over_max_floor: t_compute = ", t_compute, " s, t_comm = ", t_comm, " s, expected both > 0");
  MLS_CHECK(efficiency >= 0 && efficiency <= 1, "step_over_max_floor: efficiency = ", efficiency,
            ", expected 0 <= efficiency <= 1");
  return (t_compute + t_comm - efficiency * std::min(t_compute, t_comm)) / std::max(t_compute, t_comm);
}

std::vector<RankTimeline> gather_timeline(Communicator& comm, const RankTimeline& mine) {
  Tensor count = Tensor::scalar(static_cast<double>(mine.size()), DType::Float64);
  comm.allreduce(count, ReduceOp::Max);
  const auto most = static_cast<std::int64_t>(count.item());
  Tensor rows = Tensor::full({most + 1, 4}, -1.0, DType::Float64);  // row 0: [count, 0, 0, 0]
  rows.set({0, 0}, static_cast<double>(mine.size()));
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const auto r = static_cast<std::int64_t>(i) + 1;
    rows.set({r, 0}, mine[i].lane);
    rows.set({r, 1}, mine[i].kind);
    rows.set({r, 2}, mine[i].start);
    rows.set({r, 3}, mine[i].end);
  }
  const Tensor all = comm.gather(rows, 0);
  std::vector<RankTimeline> out;
  if (comm.rank() != 0) return out;
  for (int r = 0; r < comm.size(); ++r) {
    RankTimeline t;
    const auto n = static_cast<std::int64_t>(all.at({r, 0, 0}));
    for (std::int64_t i = 1; i <= n; ++i)
      t.push_back({static_cast<int>(all.at({r, i, 0})), static_cast<int>(all.at({r, i, 1})), all.at({r, i, 2}),
                   all.at({r, i, 3})});
    out.push_back(std::move(t));
  }
  return out;
}

RankTimeline comm_spans(const Communicator& comm, double since, double t0, int kind) {
  RankTimeline out;
  for (const auto& s : comm.spans())
    if (s.start >= since) out.push_back({1, kind, s.start - t0, s.end - t0});
  return out;
}

std::string timeline_svg(const std::vector<std::pair<std::string, std::vector<RankTimeline>>>& panels,
                         const std::vector<std::string>& kinds, const std::string& title, const std::string& note) {
  MLS_CHECK(!panels.empty(), "timeline_svg: no panels to draw");
  static const char* palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#d62728", "#8c564b", "#e377c2", "#7f7f7f"};
  const std::size_t ranks = panels[0].second.size();
  double t_max = 1e-9;
  for (const auto& [name, tl] : panels) {
    MLS_CHECK(tl.size() == ranks, "timeline_svg: panel '", name, "' has ", tl.size(), " ranks, expected ", ranks);
    for (const auto& r : tl)
      for (const auto& s : r) {
        MLS_CHECK(s.kind >= 0 && static_cast<std::size_t>(s.kind) < kinds.size(), "timeline_svg: span kind ", s.kind,
                  " is not one of the ", kinds.size(), " kinds");
        t_max = std::max(t_max, s.end);
      }
  }
  const double lane_h = 18, rank_gap = 10, left = 110, right = 20, top = note.empty() ? 50 : 66, panel_w = 420, gap = 40;
  const double rank_h = 2 * lane_h + rank_gap;
  const double plot_h = static_cast<double>(ranks) * rank_h;
  const double width = left + static_cast<double>(panels.size()) * (panel_w + gap) - gap + right;
  const double height = top + 24 + plot_h + 60 + 20 * static_cast<double>((kinds.size() + 3) / 4);
  svg::Document d(width, height);
  d.text(left, 22, title, {.size = 15, .weight = "bold"});
  if (!note.empty()) d.text(left, 40, note, {.size = 11, .fill = "#a00"});
  for (std::size_t p = 0; p < panels.size(); ++p) {
    const double x0 = left + static_cast<double>(p) * (panel_w + gap);
    const svg::Scale x(0, t_max * 1e3, x0, x0 + panel_w);
    const double y0 = top + 20;
    d.text(x0 + panel_w / 2, top + 8, panels[p].first, {.anchor = svg::Anchor::Middle, .size = 13, .weight = "bold"});
    for (std::size_t r = 0; r < ranks; ++r) {
      const double yr = y0 + static_cast<double>(r) * rank_h;
      for (int lane = 0; lane < 2; ++lane) {
        const double yl = yr + lane * lane_h;
        d.rect(x0, yl, panel_w, lane_h - 2, {.fill = lane == 0 ? "#f4f4f4" : "#eef2f8"});
        if (p == 0)
          d.text(left - 6, yl + lane_h - 6, "rank " + std::to_string(r) + (lane == 0 ? " compute" : " comm"),
                 {.anchor = svg::Anchor::End, .size = 11});
      }
      for (const auto& s : panels[p].second[r]) {
        const double xa = x(std::max(0.0, s.start) * 1e3), xb = x(std::max(s.start, s.end) * 1e3);
        const double yl = yr + s.lane * lane_h;
        char tip[160];
        std::snprintf(tip, sizeof tip, "%s: %.3f to %.3f ms", kinds[static_cast<std::size_t>(s.kind)].c_str(),
                      s.start * 1e3, s.end * 1e3);
        d.rect(xa, yl + 1, std::max(0.8, xb - xa), lane_h - 4,
               {.fill = palette[static_cast<std::size_t>(s.kind) % 8], .stroke = "white", .stroke_width = 0.5,
                .title = tip});
      }
    }
    d.x_axis(x, y0 + plot_h + 2, {.title = "milliseconds from the step's start", .title_gap = 30});
  }
  std::vector<svg::LegendEntry> legend;
  for (std::size_t k = 0; k < kinds.size(); ++k)
    legend.push_back({kinds[k], palette[k % 8], svg::LegendEntry::Box});
  d.legend(left, top + 24 + plot_h + 50, legend, {.horizontal = true, .row = 24});
  return d.str();
}

}  // namespace mls::parallel
