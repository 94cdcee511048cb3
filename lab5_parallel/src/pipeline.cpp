// Student file of lab 5: write the bodies between the SOLUTION markers (mls-grader grades this file).
// Pipeline parallelism: the schedule generators (student code), their ideal-machine simulation
// and drawings, and the executor that runs a schedule over send/recv.
#include "mls/parallel/pipeline.hpp"

#include <cstdio>
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

#include "mls/common/error.hpp"
#include "mls/common/svg.hpp"

namespace mls::parallel {

const char* to_string(ScheduleKind k) { return k == ScheduleKind::GPipe ? "gpipe" : "1f1b"; }
ScheduleKind schedule_kind_from_string(const std::string& s) {
  if (s == "gpipe") return ScheduleKind::GPipe;
  if (s == "1f1b") return ScheduleKind::OneFOneB;
  fail("pipeline: unknown schedule '", s, "', expected gpipe or 1f1b");
}

PipelineSchedule make_schedule(int p, int m, ScheduleKind kind) {
  MLS_CHECK(p >= 1, "make_schedule: the number of stages p = ", p, " must be >= 1");
  MLS_CHECK(m >= 1, "make_schedule: the number of micro-batches m = ", m, " must be >= 1");
  // BEGIN SOLUTION
  PipelineSchedule sched(static_cast<std::size_t>(p));
  for (int s = 0; s < p; ++s) {
    auto& steps = sched[static_cast<std::size_t>(s)];
    if (kind == ScheduleKind::GPipe) {
      for (int i = 0; i < m; ++i) steps.push_back({PipeStep::Forward, i});
      for (int i = m - 1; i >= 0; --i) steps.push_back({PipeStep::Backward, i});
      continue;
    }
    const int warm = std::min(p - 1 - s, m);
    int f = 0, b = 0;
    for (; f < warm; ++f) steps.push_back({PipeStep::Forward, f});      // warm-up
    for (; f < m; ++f, ++b) {                                           // steady state: 1F then 1B
      steps.push_back({PipeStep::Forward, f});
      steps.push_back({PipeStep::Backward, b});
    }
    for (; b < m; ++b) steps.push_back({PipeStep::Backward, b});        // cool-down
  }
  return sched;
  // END SOLUTION
}

double bubble_fraction(int p, int m) {
  MLS_CHECK(p >= 1 && m >= 1, "bubble_fraction: p = ", p, " and m = ", m, " must be >= 1");
  return static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
}

static std::string step_str(const PipeStep& st) {
  std::string s(1, st.kind == PipeStep::Forward ? 'F' : 'B');
  s += std::to_string(st.micro);
  return s;
}

void validate_schedule(const PipelineSchedule& s, int m) {
  MLS_CHECK(!s.empty(), "validate_schedule: the schedule has no stages");
  for (std::size_t st = 0; st < s.size(); ++st) {
    std::vector<int> fwd(static_cast<std::size_t>(m), 0), bwd(static_cast<std::size_t>(m), 0);
    for (const PipeStep& step : s[st]) {
      MLS_CHECK(step.micro >= 0 && step.micro < m, "validate_schedule: stage ", st, " has step ", step_str(step),
                " outside micro-batches 0..", m - 1);
      auto& count = step.kind == PipeStep::Forward ? fwd : bwd;
      MLS_CHECK(++count[static_cast<std::size_t>(step.micro)] == 1, "validate_schedule: stage ", st, " runs ",
                step_str(step), " twice");
      MLS_CHECK(step.kind == PipeStep::Forward || fwd[static_cast<std::size_t>(step.micro)] == 1,
                "validate_schedule: stage ", st, " runs ", step_str(step), " before F", step.micro);
    }
    for (int i = 0; i < m; ++i)
      MLS_CHECK(fwd[static_cast<std::size_t>(i)] == 1 && bwd[static_cast<std::size_t>(i)] == 1,
                "validate_schedule: stage ", st, " misses F", i, " or B", i);
  }
}

double Timeline::bubble_fraction() const {
  if (bubble.empty()) return 0.0;
  double s = 0.0;
  for (double b : bubble) s += b;
  return s / static_cast<double>(bubble.size());
}

Timeline simulate_schedule(const PipelineSchedule& s, double t_fwd, double t_bwd) {
  MLS_CHECK(t_fwd > 0 && t_bwd > 0, "simulate_schedule: step times must be > 0, got t_fwd = ", t_fwd,
            ", t_bwd = ", t_bwd);
  const int p = static_cast<int>(s.size());
  MLS_CHECK(p >= 1, "simulate_schedule: the schedule has no stages");
  int m = 0;
  for (const auto& st : s)
    for (const PipeStep& step : st) m = std::max(m, step.micro + 1);
  validate_schedule(s, m);
  constexpr double kNotDone = -1.0;
  // end[stage][kind][micro]
  std::vector<std::vector<double>> fend(static_cast<std::size_t>(p), std::vector<double>(static_cast<std::size_t>(m), kNotDone));
  auto bend = fend;
  std::vector<std::size_t> next(static_cast<std::size_t>(p), 0);
  std::vector<double> free_at(static_cast<std::size_t>(p), 0.0);
  Timeline t;
  t.stages = p;
  t.micro = m;
  std::size_t remaining = 0;
  for (const auto& st : s) remaining += st.size();
  while (remaining > 0) {
    bool progress = false;
    for (int st = 0; st < p; ++st) {
      const auto su = static_cast<std::size_t>(st);
      while (next[su] < s[su].size()) {
        const PipeStep step = s[su][next[su]];
        const auto mu = static_cast<std::size_t>(step.micro);
        double dep = 0.0;
        if (step.kind == PipeStep::Forward) {
          if (st > 0) dep = fend[su - 1][mu];
        } else {
          dep = st < p - 1 ? bend[su + 1][mu] : fend[su][mu];
        }
        if (dep == kNotDone) break;
        const double start = std::max(free_at[su], dep);
        const double end = start + (step.kind == PipeStep::Forward ? t_fwd : t_bwd);
        (step.kind == PipeStep::Forward ? fend : bend)[su][mu] = end;
        free_at[su] = end;
        t.slots.push_back({st, step, start, end});
        ++next[su];
        --remaining;
        progress = true;
      }
    }
    if (!progress) {
      std::ostringstream os;
      for (int st = 0; st < p; ++st)
        if (next[static_cast<std::size_t>(st)] < s[static_cast<std::size_t>(st)].size())
          os << " stage " << st << " at " << step_str(s[static_cast<std::size_t>(st)][next[static_cast<std::size_t>(st)]]) << ";";
      fail("simulate_schedule: the schedule deadlocks:", os.str());
    }
  }
  for (double f : free_at) t.total = std::max(t.total, f);
  t.busy.assign(static_cast<std::size_t>(p), 0.0);
  t.bubble.assign(static_cast<std::size_t>(p), 0.0);
  t.peak_live.assign(static_cast<std::size_t>(p), 0);
  for (const auto& sl : t.slots) t.busy[static_cast<std::size_t>(sl.stage)] += sl.end - sl.start;
  for (int st = 0; st < p; ++st) {
    const auto su = static_cast<std::size_t>(st);
    t.bubble[su] = (t.total - t.busy[su]) / t.total;
    int live = 0;
    for (const PipeStep& step : s[su]) {
      live += step.kind == PipeStep::Forward ? 1 : -1;
      t.peak_live[su] = std::max(t.peak_live[su], live);
    }
  }
  std::sort(t.slots.begin(), t.slots.end(), [](const TimelineSlot& a, const TimelineSlot& b) {
    return a.stage != b.stage ? a.stage < b.stage : a.start < b.start;
  });
  return t;
}

namespace {

/// An axis label: integers as integers ("12", not "1e+01"), else up to 3 significant digits.
std::string tick_label(double v) {
  char buf[32];
  if (std::abs(v - std::round(v)) < 1e-9) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(std::llround(v)));
  } else {
    std::snprintf(buf, sizeof buf, "%.3g", v);
  }
  return buf;
}

}  // namespace

namespace {
/// The time unit of the drawings: the shortest step.
double time_unit(const Timeline& t) {
  double u = std::numeric_limits<double>::infinity();
  for (const auto& sl : t.slots) u = std::min(u, sl.end - sl.start);
  return std::isfinite(u) && u > 0 ? u : 1.0;
}
}  // namespace

std::string schedule_text(const Timeline& t) {
  const double u = time_unit(t);
  const int digits = static_cast<int>(std::to_string(std::max(0, t.micro - 1)).size());
  const int w = digits + 2;  // "F" + number + a space
  const auto cells = static_cast<std::size_t>(std::llround(t.total / u));
  std::vector<std::string> lanes(static_cast<std::size_t>(t.stages), std::string(cells * static_cast<std::size_t>(w), '.'));
  for (auto& lane : lanes)
    for (std::size_t c = 0; c < cells; ++c) lane[c * static_cast<std::size_t>(w) + static_cast<std::size_t>(w) - 1] = ' ';
  for (const auto& sl : t.slots) {
    const auto c0 = static_cast<std::size_t>(std::llround(sl.start / u));
    const auto c1 = static_cast<std::size_t>(std::llround(sl.end / u));
    std::string& lane = lanes[static_cast<std::size_t>(sl.stage)];
    for (std::size_t c = c0; c < c1; ++c) {
      std::string cell = step_str(sl.step);
      if (c > c0) cell = std::string(cell.size(), sl.step.kind == PipeStep::Forward ? 'f' : 'b');
      cell.resize(static_cast<std::size_t>(w) - 1, ' ');
      lane.replace(c * static_cast<std::size_t>(w), cell.size(), cell);
    }
  }
  std::ostringstream os;
  for (int s = 0; s < t.stages; ++s) {
    std::string lane = lanes[static_cast<std::size_t>(s)];
    while (!lane.empty() && lane.back() == ' ') lane.pop_back();
    os << "stage " << std::setw(2) << s << " | " << lane << '\n';
  }
  os << std::fixed << std::setprecision(4) << "F = forward, B = backward, . = idle; total " << t.total
     << ", bubble " << t.bubble_fraction() << " (closed form (p-1)/(m+p-1) = "
     << bubble_fraction(std::max(1, t.stages), std::max(1, t.micro)) << ")\n";
  os << "peak live micro-batches per stage:";
  for (int live : t.peak_live) os << ' ' << live;
  os << '\n';
  return os.str();
}

std::string schedule_svg(const Timeline& t, const std::string& title) {
  return schedule_comparison_svg({t}, {title});
}

std::string schedule_comparison_svg(const std::vector<Timeline>& ts, const std::vector<std::string>& titles) {
  MLS_CHECK(!ts.empty() && titles.size() == ts.size(), "schedule_comparison_svg: ", ts.size(), " timelines and ",
            titles.size(), " titles, expected one title per timeline and at least one timeline");
  // One time unit and one scale for every panel, so that the same width means the same time.
  double u = std::numeric_limits<double>::infinity(), total = 0;
  for (const auto& t : ts) {
    u = std::min(u, time_unit(t));
    total = std::max(total, t.total);
  }
  const double unit_px = 34, lane_h = 30, gap = 8, left = 78, top = 54, right = 160;
  const double plot_w = total / u * unit_px;
  auto panel_h = [&](const Timeline& t) { return top + t.stages * (lane_h + gap) + 64; };
  double height = 0;
  for (const auto& t : ts) height += panel_h(t);
  svg::Document d(left + plot_w + right, height,
                  {.font_family = "DejaVu Sans, Helvetica, Arial, sans-serif", .font_size = 12, .quote = '"'});
  const char* kForward = "#3b78c4";
  const char* kBackward = "#3f9e5a";
  double y0 = 0;
  for (std::size_t k = 0; k < ts.size(); ++k) {
    const Timeline& t = ts[k];
    std::ostringstream head;
    head << std::fixed << std::setprecision(3) << (titles[k].empty() ? "pipeline schedule" : titles[k])
         << ": p = " << t.stages << ", m = " << t.micro << ", bubble " << t.bubble_fraction();
    d.text(left, y0 + 24, head.str(), {.size = 16, .weight = "bold"});
    d.legend(left - 3, y0 + 45,
             {{"forward", kForward, svg::LegendEntry::Box},
              {"backward", kBackward, svg::LegendEntry::Box},
              {"idle (bubble)", "#eeeeee", svg::LegendEntry::Box, "", "#cccccc"}},
             {.horizontal = true, .row = 14, .font_size = 11});
    const double lanes_h = t.stages * (lane_h + gap);
    d.text(left + plot_w + 10, y0 + top - 8, "peak live micro-batches", {.size = 11, .fill = "#555555"});
    for (int s = 0; s < t.stages; ++s) {
      const double y = y0 + top + s * (lane_h + gap);
      d.text(left - 10, y + lane_h / 2 + 5, "stage " + std::to_string(s), {.anchor = svg::Anchor::End, .size = 13});
      d.rect(left, y, t.total / u * unit_px, lane_h, {.fill = "#eeeeee", .stroke = "#cccccc"});
      // The activations this stage keeps at once: what GPipe and 1F1B differ in.
      const int live = s < static_cast<int>(t.peak_live.size()) ? t.peak_live[static_cast<std::size_t>(s)] : 0;
      d.text(left + plot_w + 10, y + lane_h / 2 + 5, std::to_string(live), {.size = 13});
    }
    for (const auto& sl : t.slots) {
      const double x = left + sl.start / u * unit_px, w = (sl.end - sl.start) / u * unit_px;
      const double y = y0 + top + sl.stage * (lane_h + gap);
      const bool f = sl.step.kind == PipeStep::Forward;
      std::ostringstream tip;
      tip << std::fixed << std::setprecision(1) << "stage " << sl.stage << " " << step_str(sl.step) << " ["
          << sl.start << ", " << sl.end << ")";
      d.rect(x + 1, y + 1, w - 2, lane_h - 2, {.fill = f ? kForward : kBackward, .extra = {{"rx", 3}}, .title = tip.str()});
      d.text(x + w / 2, y + lane_h / 2 + 5, step_str(sl.step), {.anchor = svg::Anchor::Middle, .size = 13, .fill = "white"});
    }
    // The time axis, a tick every unit (at most about 20 of them).
    const auto ticks = static_cast<int>(std::llround(total / u));
    const int every = std::max(1, ticks / 20);
    svg::AxisStyle axis{.label = [u](double v) { return tick_label(v * u); }, .colour = "#555555", .font_size = 11,
                        .title = "time (units of one forward)", .title_gap = 36};
    for (int v = 0; v <= ticks; v += every) axis.ticks.push_back(v);
    d.x_axis(svg::Scale(0, std::max(ticks, 1), left, left + std::max(ticks, 1) * unit_px), y0 + top + lanes_h + 4, axis);
    y0 += panel_h(t);
  }
  return d.str();
}

std::vector<int> partition_layers(int n, int p) {
  MLS_CHECK(p >= 1 && n >= p, "partition_layers: cannot split ", n, " layers into ", p,
            " stages (need 1 <= p <= n)");
  std::vector<int> first(static_cast<std::size_t>(p) + 1, 0);
  for (int s = 0; s < p; ++s) first[static_cast<std::size_t>(s) + 1] = first[static_cast<std::size_t>(s)] + n / p + (s < n % p ? 1 : 0);
  return first;
}

}  // namespace mls::parallel
