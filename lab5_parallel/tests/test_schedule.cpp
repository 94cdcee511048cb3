// Pipeline schedules as pure functions: GPipe and 1F1B lists, their ideal-machine timeline, the
// bubble (p-1)/(m+p-1), the peak of live micro-batches, the text and SVG drawings.
#include <catch2/catch.hpp>

#include "mls/parallel/pipeline.hpp"
#include "mls/testing.hpp"

using namespace mls;
using namespace mls::parallel;
using mls::testing::require_error;

namespace {
std::string str(const std::vector<PipeStep>& steps) {
  std::string s;
  for (const auto& st : steps) {
    s += st.kind == PipeStep::Forward ? 'F' : 'B';
    s += std::to_string(st.micro);
    s += ' ';
  }
  return s;
}
}  // namespace

TEST_CASE("schedule: GPipe and 1F1B lists for p = 4, m = 8 (the worked example)", "[lab5][schedule]") {
  const auto g = make_schedule(4, 8, ScheduleKind::GPipe);
  MLS_OBSERVE(g.size());
  MLS_ORACLE_CHECK(REQUIRE(g.size() == 4));
  for (const auto& st : g) mls::testing::observe("gpipe stage", str(st));
  MLS_ORACLE_CHECK(for (const auto& st : g) CHECK(str(st) == "F0 F1 F2 F3 F4 F5 F6 F7 B7 B6 B5 B4 B3 B2 B1 B0 "));
  const auto o = make_schedule(4, 8, ScheduleKind::OneFOneB);
  MLS_OBSERVE(o.size());
  for (const auto& st : o) mls::testing::observe("1f1b stage", str(st));
  const auto short_warmup = make_schedule(4, 2, ScheduleKind::OneFOneB), one_stage = make_schedule(1, 3, ScheduleKind::OneFOneB);
  REQUIRE(!short_warmup.empty());  // guards the [0] below
  REQUIRE(!one_stage.empty());
  MLS_OBSERVE(str(short_warmup[0]));
  MLS_OBSERVE(str(one_stage[0]));
  MLS_ORACLE_CHECK(REQUIRE(o.size() == 4);
                   CHECK(str(o[0]) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7 ");
                   CHECK(str(o[1]) == "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7 ");
                   CHECK(str(o[2]) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7 ");
                   CHECK(str(o[3]) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 ");
                   // fewer micro-batches than stages: the warm-up is cut at m
                   CHECK(str(short_warmup[0]) == "F0 F1 B0 B1 ");
                   CHECK(str(one_stage[0]) == "F0 B0 F1 B1 F2 B2 "));
}

TEST_CASE("schedule: every (p, m) gives a valid schedule of both kinds", "[lab5][schedule]") {
  for (int p = 1; p <= 6; ++p)
    for (int m = 1; m <= 9; ++m)
      for (auto k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
        INFO("p = " << p << ", m = " << m << ", " << to_string(k));
        const auto s = make_schedule(p, m, k);
        mls::testing::observe("stages", s.size());
        MLS_ORACLE_CHECK(REQUIRE(static_cast<int>(s.size()) == p));
        for (const auto& st : s) mls::testing::observe("stage", str(st));  // the canonical lists (as in the worked example)
        CHECK_NOTHROW(validate_schedule(s, m));
        MLS_ORACLE_CHECK(for (const auto& st : s) CHECK(static_cast<int>(st.size()) == 2 * m));
      }
}

TEST_CASE("schedule: simulated bubble equals (p-1)/(m+p-1), 1F1B keeps at most p micro-batches alive",
          "[lab5][schedule]") {
  MLS_OBSERVE(bubble_fraction(4, 8), {1e-9, 1e-12});
  MLS_ORACLE_CHECK(CHECK(bubble_fraction(4, 8) == Approx(3.0 / 11.0)));
  for (int p = 1; p <= 6; ++p)
    for (int m = 1; m <= 12; ++m) {
      INFO("p = " << p << ", m = " << m);
      const Timeline g = simulate_schedule(make_schedule(p, m, ScheduleKind::GPipe));
      const Timeline o = simulate_schedule(make_schedule(p, m, ScheduleKind::OneFOneB));
      mls::testing::observe("gpipe total, 1f1b total", std::vector<double>{g.total, o.total}, {1e-9, 0.0});
      mls::testing::observe("gpipe bubble", g.bubble, {1e-9, 1e-12});
      mls::testing::observe("1f1b bubble", o.bubble, {1e-9, 1e-12});
      mls::testing::observe("gpipe peak live", g.peak_live);
      mls::testing::observe("1f1b peak live", o.peak_live);
      MLS_ORACLE_CHECK(CHECK(g.total == Approx(2.0 * (m + p - 1))); CHECK(o.total == Approx(2.0 * (m + p - 1)));
                       REQUIRE(static_cast<int>(g.bubble.size()) == p); REQUIRE(static_cast<int>(o.bubble.size()) == p);
                       REQUIRE(static_cast<int>(g.peak_live.size()) == p); REQUIRE(static_cast<int>(o.peak_live.size()) == p);
                       for (int s = 0; s < p; ++s) {
                         const auto su = static_cast<std::size_t>(s);
                         CHECK(g.bubble[su] == Approx(bubble_fraction(p, m)));
                         CHECK(o.bubble[su] == Approx(bubble_fraction(p, m)));
                         CHECK(g.peak_live[su] == m);
                         CHECK(o.peak_live[su] == std::min(p - s, m));
                         CHECK(o.peak_live[su] <= p);
                       });
    }
  const Timeline t = simulate_schedule(make_schedule(4, 8, ScheduleKind::OneFOneB));
  MLS_OBSERVE(t.bubble_fraction(), {1e-9, 1e-12});
  MLS_ORACLE_CHECK(CHECK(t.bubble_fraction() == Approx(3.0 / 11.0)));
}

TEST_CASE("schedule: timeline of GPipe p = 2, m = 2 slot by slot", "[lab5][schedule]") {
  const Timeline t = simulate_schedule(make_schedule(2, 2, ScheduleKind::GPipe), 1.0, 2.0);
  for (const auto& sl : t.slots)
    mls::testing::observe("slot " + std::to_string(sl.stage) + " " + str({sl.step}), std::vector<double>{sl.start, sl.end});
  MLS_OBSERVE(t.total);
  MLS_OBSERVE(t.slots.size());
  // stage 0: F0 [0,1) F1 [1,2) ... B1 after stage 1's B1; stage 1: F0 [1,2) F1 [2,3) B1 [3,5) B0 [5,7)
  MLS_ORACLE(std::vector<std::tuple<int, std::string, double, double>> want = {
      {0, "F0 ", 0, 1}, {0, "F1 ", 1, 2}, {0, "B1 ", 5, 7}, {0, "B0 ", 7, 9},
      {1, "F0 ", 1, 2}, {1, "F1 ", 2, 3}, {1, "B1 ", 3, 5}, {1, "B0 ", 5, 7}};)
  MLS_ORACLE_CHECK(REQUIRE(t.slots.size() == want.size()); for (std::size_t i = 0; i < want.size(); ++i) {
    CHECK(t.slots[i].stage == std::get<0>(want[i]));
    CHECK(str({t.slots[i].step}) == std::get<1>(want[i]));
    CHECK(t.slots[i].start == std::get<2>(want[i]));
    CHECK(t.slots[i].end == std::get<3>(want[i]));
  } CHECK(t.total == 9.0));
}

TEST_CASE("schedule: text and SVG drawings", "[lab5][schedule]") {
  const Timeline t = simulate_schedule(make_schedule(4, 8, ScheduleKind::OneFOneB));
  const std::string txt = schedule_text(t);
  const std::string svg = schedule_svg(t, "1f1b");
  // The drawings whole (schedule_text and schedule_svg are given code: what differs is the timeline).
  MLS_OBSERVE(txt);
  MLS_OBSERVE(svg);
  std::size_t boxes = 0;
  for (std::size_t pos = 0; (pos = svg.find("rx=\"3\"", pos)) != std::string::npos; ++pos) ++boxes;
  MLS_OBSERVE(boxes);
  MLS_OBSERVE(txt.substr(0, txt.find('\n')));
  MLS_ORACLE_CHECK(CHECK(txt.find("stage  0 | F0 F1 F2 F3 .. .. .. B0 F4 B1") == 0);
                   CHECK(txt.find("stage  3 | .. .. .. F0 B0 F1 B1") != std::string::npos);
                   CHECK(txt.find("bubble 0.2727") != std::string::npos);
                   CHECK(svg.rfind("<svg", 0) == 0);
                   CHECK(svg.find("</svg>") != std::string::npos);
                   CHECK(svg.find("stage 3") != std::string::npos);
                   CHECK(svg.find("bubble 0.273") != std::string::npos);
                   CHECK(boxes == 4 * 16));
}

TEST_CASE("schedule: GPipe and 1F1B drawn in one SVG, one panel each on one time scale, peak live per stage",
          "[lab5][schedule]") {
  const Timeline g = simulate_schedule(make_schedule(4, 8, ScheduleKind::GPipe));
  const Timeline o = simulate_schedule(make_schedule(4, 8, ScheduleKind::OneFOneB));
  const std::string svg = schedule_comparison_svg({g, o}, {"gpipe", "1f1b"});
  MLS_OBSERVE(svg);
  std::size_t boxes = 0;
  for (std::size_t pos = 0; (pos = svg.find("rx=\"3\"", pos)) != std::string::npos; ++pos) ++boxes;
  MLS_OBSERVE(boxes);
  const std::string txt = schedule_text(o);
  MLS_OBSERVE(txt.substr(txt.rfind("peak live")));
  MLS_ORACLE_CHECK(CHECK(boxes == 2 * 4 * 16);
                   CHECK(svg.find("gpipe: p = 4, m = 8, bubble 0.273") != std::string::npos);
                   CHECK(svg.find("1f1b: p = 4, m = 8, bubble 0.273") != std::string::npos);
                   CHECK(svg.find("gpipe: p = 4") < svg.find("1f1b: p = 4"));  // GPipe above 1F1B
                   CHECK(svg.find("peak live micro-batches") != std::string::npos);
                   CHECK(txt.find("peak live micro-batches per stage: 4 3 2 1\n") != std::string::npos));
  // The single drawing is the one-panel case.
  MLS_ORACLE_CHECK(CHECK(schedule_svg(o, "1f1b") == schedule_comparison_svg({o}, {"1f1b"})));
  require_error([&] { schedule_comparison_svg({g, o}, {"gpipe"}); }, "schedule_comparison_svg: 2 timelines and 1 titles");
  require_error([] { schedule_comparison_svg({}, {}); }, "at least one timeline");
}

TEST_CASE("schedule: bad inputs are errors", "[lab5][train_errors]") {
  MLS_OBSERVE(make_schedule(2, 2, ScheduleKind::GPipe).size());  // your code first
  MLS_ORACLE_CHECK(CHECK(make_schedule(2, 2, ScheduleKind::GPipe).size() == 2));
  require_error([] { make_schedule(0, 4, ScheduleKind::GPipe); }, "make_schedule: the number of stages p = 0");
  require_error([] { make_schedule(2, 0, ScheduleKind::OneFOneB); }, "make_schedule: the number of micro-batches m = 0");
  require_error([] { bubble_fraction(0, 1); }, "bubble_fraction: p = 0");
  require_error([] { schedule_kind_from_string("zigzag"); }, "unknown schedule 'zigzag'");
  PipelineSchedule bad = {{{PipeStep::Backward, 0}, {PipeStep::Forward, 0}}};
  require_error([&] { validate_schedule(bad, 1); }, "validate_schedule: stage 0 runs B0 before F0");
  PipelineSchedule dl = {{{PipeStep::Forward, 0}, {PipeStep::Backward, 1}, {PipeStep::Forward, 1}, {PipeStep::Backward, 0}}};
  require_error([&] { validate_schedule(dl, 2); }, "validate_schedule: stage 0 runs B1 before F1");
  // stage 0 waits for stage 1's B0, stage 1 waits for stage 0's F1
  PipelineSchedule dl3 = {{{PipeStep::Forward, 0}, {PipeStep::Backward, 0}, {PipeStep::Forward, 1}, {PipeStep::Backward, 1}},
                          {{PipeStep::Forward, 1}, {PipeStep::Backward, 1}, {PipeStep::Forward, 0}, {PipeStep::Backward, 0}}};
  require_error([&] { simulate_schedule(dl3); }, "simulate_schedule: the schedule deadlocks: stage 0 at B0; stage 1 at F1;");
  require_error([] { simulate_schedule(make_schedule(2, 2, ScheduleKind::GPipe), 0.0); }, "step times must be > 0");
  require_error([] { partition_layers(2, 3); }, "partition_layers: cannot split 2 layers into 3 stages");
  MLS_OBSERVE(partition_layers(7, 3));
  MLS_ORACLE_CHECK(CHECK(partition_layers(7, 3) == std::vector<int>{0, 3, 5, 7}));
}
