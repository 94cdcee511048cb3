// Tests of the memory tracker (common/src/memory.cpp).
#include <catch2/catch.hpp>
#include <random>
#include <thread>
#include <vector>

#include "mls/common/memory.hpp"
#include "mls/testing.hpp"

using namespace mls::mem;
using mls::testing::observe;

TEST_CASE("memory tracker: current and peak per tag and rank against a naive replay", "[common][memory]") {
  Tracker t;
  t.set_enabled(true);
  std::mt19937 gen(7);
  struct Live {
    Token tok;
    std::int64_t bytes;
    Tag tag;
    int rank;
  };
  std::vector<Live> live;
  std::int64_t cur[3][kNumTags] = {}, peak[3][kNumTags] = {}, tot[3] = {}, ptot[3] = {};
  for (int i = 0; i < 2000; ++i) {
    if (live.empty() || gen() % 3 != 0) {
      const Tag tag = static_cast<Tag>(gen() % kNumTags);
      const int rank = static_cast<int>(gen() % 3);
      const std::int64_t b = gen() % 5000;
      live.push_back({t.alloc(tag, b, rank), b, tag, rank});
      auto& c = cur[rank][static_cast<int>(tag)];
      c += b;
      peak[rank][static_cast<int>(tag)] = std::max(peak[rank][static_cast<int>(tag)], c);
      tot[rank] += b;
      ptot[rank] = std::max(ptot[rank], tot[rank]);
    } else {
      const std::size_t k = gen() % live.size();
      t.release(live[k].tok, live[k].bytes);
      cur[live[k].rank][static_cast<int>(live[k].tag)] -= live[k].bytes;
      tot[live[k].rank] -= live[k].bytes;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  for (int r = 0; r < 3; ++r) {
    for (int g = 0; g < kNumTags; ++g) {
      CHECK(t.current(static_cast<Tag>(g), r) == cur[r][g]);
      CHECK(t.peak(static_cast<Tag>(g), r) == peak[r][g]);
    }
    CHECK(t.peak_total(r) == ptot[r]);
    CHECK(t.current_total(r) == tot[r]);
    observe("peak_total", t.peak_total(r));
  }
  CHECK(t.ranks() == 3);
  CHECK(t.dropped_events() == 0);
  CHECK(t.events().size() == 2000);
  observe("events", static_cast<std::int64_t>(t.events().size()));
}

TEST_CASE("memory tracker: disabled costs nothing, reset forgets old allocations", "[common][memory]") {
  Tracker t;
  Token off = t.alloc(Tag::Parameter, 100, 0);
  CHECK_FALSE(off.tracked());
  t.set_enabled(true);
  Token a = t.alloc(Tag::Parameter, 100, 1);
  CHECK(t.current(Tag::Parameter, 1) == 100);
  t.release(off, 100);  // untracked: ignored
  CHECK(t.current(Tag::Parameter, 1) == 100);
  t.reset();
  CHECK(t.current(Tag::Parameter, 1) == 0);
  t.release(a, 100);  // from before the reset: ignored, never negative
  CHECK(t.current(Tag::Parameter, 1) == 0);
  Token b = t.alloc(Tag::Gradient, 64, 0);
  t.release(b, 64);
  CHECK(t.peak(Tag::Gradient, 0) == 64);
  t.reset_peaks();
  CHECK(t.peak(Tag::Gradient, 0) == 0);
  observe("peak after reset_peaks", t.peak(Tag::Gradient, 0));
  t.reset();
  t.set_max_events(1);
  Token c = t.alloc(Tag::Other, 1, 0);
  t.release(c, 1);
  CHECK(t.events().size() == 1);
  CHECK(t.dropped_events() == 1);
  observe("dropped", t.dropped_events());
  mls::testing::require_error([&] { t.alloc(Tag::Other, 8, kMaxRanks); }, "rank");
  mls::testing::require_error([&] { t.alloc(Tag::Other, -8, 0); }, "bytes = -8");
}

TEST_CASE("memory tracker: thread-safe from many threads, scopes are per thread", "[common][memory]") {
  Tracker& g = global();
  const bool was = g.enabled();
  g.set_enabled(true);
  g.reset();
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r)
    threads.emplace_back([r] {
      TagScope s(Tag::Activation, r);
      CHECK(current_rank() == r);
      CHECK(current_tag() == Tag::Activation);
      for (int i = 0; i < 500; ++i) {
        Token k = on_alloc(10 + r);
        on_release(k, 10 + r);
      }
      Block keep(Tag::Workspace, 1000 * (r + 1));
      Buffer<float> buf(Tag::Gradient, 16, r);
      CHECK(buf.size() == 16);
    });
  for (auto& th : threads) th.join();
  for (int r = 0; r < 4; ++r) {
    CHECK(g.current(Tag::Activation, r) == 0);
    CHECK(g.peak(Tag::Activation, r) == 10 + r);
    CHECK(g.peak(Tag::Workspace, r) == 1000 * (r + 1));
    CHECK(g.peak(Tag::Gradient, r) == 64);
    CHECK(g.current_total(r) == 0);
    observe("peak workspace", g.peak(Tag::Workspace, r));
  }
  CHECK(current_rank() == 0);
  const std::string rep = g.report(true);
  CHECK(rep.find("activation") != std::string::npos);
  const std::string svg = g.timeline_svg(2, "timeline");
  CHECK(svg.rfind("<svg", 0) == 0);
  CHECK(svg.find("workspace") != std::string::npos);
  observe("svg has polylines", svg.find("<polyline") != std::string::npos);
  g.reset();
  g.set_enabled(was);
}

TEST_CASE("memory tracker: Block copies count twice, moves transfer, gb/human_bytes format", "[common][memory]") {
  Tracker& g = global();
  const bool was = g.enabled();
  g.set_enabled(true);
  g.reset();
  {
    Block a(Tag::Parameter, 40, 0);
    Block b = a;
    CHECK(g.current(Tag::Parameter, 0) == 80);
    Block c = std::move(a);
    CHECK(g.current(Tag::Parameter, 0) == 80);
    c.resize(10);
    CHECK(g.current(Tag::Parameter, 0) == 50);
    observe("current", g.current(Tag::Parameter, 0));
  }
  CHECK(g.current(Tag::Parameter, 0) == 0);
  CHECK(gb(120e9) == "120.0 GB");
  CHECK(gb(1.875e9) == "1.9 GB");
  CHECK(human_bytes(3 * 1024 * 1024) == "3.000 MiB");
  observe("gb", gb(31.40625e9));
  g.reset();
  g.set_enabled(was);
}
