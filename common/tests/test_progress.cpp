// Tests of the progress bar (common/src/progress.cpp).
#include <algorithm>
#include <catch2/catch.hpp>
#include <sstream>
#include <string>

#include "mls/common/error.hpp"
#include "mls/common/progress.hpp"

namespace {

std::size_t count_lines(const std::string& s) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

bool has_control_chars(const std::string& s) {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x20; });
}

/// "label [###   ] " followed by `rest`, as render() starts.
/// (Built with append: GCC 12 warns falsely on "literal" + std::string at -O3.)
std::string bar_text(const std::string& label, int filled, const std::string& rest) {
  std::string s = label;
  if (!s.empty()) s += ' ';
  s += '[';
  s.append(static_cast<std::size_t>(filled), '#');
  s.append(static_cast<std::size_t>(20 - filled), ' ');
  s += "] ";
  s += rest;
  return s;
}

}  // namespace

TEST_CASE("progress: render at 0%, 50%, 100% and with nothing to do", "[common][progress]") {
  std::ostringstream out;
  mls::ProgressBar bar(10, "train", &out, 0);

  const std::string zero = bar.render(0, "");
  CHECK(zero.rfind(bar_text("train", 0, "0% 0/10"), 0) == 0);
  CHECK_THAT(zero, Catch::Contains("elapsed, eta ?"));

  const std::string half = bar.render(5, "loss 0.42");
  CHECK(half.rfind(bar_text("train", 10, "50% 5/10"), 0) == 0);
  CHECK_THAT(half, Catch::Contains("eta 0:0"));
  CHECK_THAT(half, Catch::EndsWith(" | loss 0.42"));

  const std::string full = bar.render(10, "done");
  CHECK(full.rfind(bar_text("train", 20, "100% 10/10"), 0) == 0);
  CHECK_THAT(full, Catch::Contains(" elapsed | done"));
  CHECK_THAT(full, !Catch::Contains("eta"));

  // Out-of-range progress is clamped; render never emits control characters.
  CHECK(bar.render(-3, "").rfind(bar_text("train", 0, "0% 0/10"), 0) == 0);
  CHECK(bar.render(99, "").rfind(bar_text("train", 20, "100% 10/10"), 0) == 0);
  for (const auto& s : {zero, half, full}) CHECK_FALSE(has_control_chars(s));
  CHECK(out.str().empty());  // render does not print

  mls::ProgressBar empty(0, "nothing", &out, 0);
  CHECK(empty.render(0, "").rfind(bar_text("nothing", 20, "100% 0/0"), 0) == 0);

  mls::ProgressBar third(3, "", &out, 0);
  CHECK(third.render(1, "").rfind(bar_text("", 6, "33% 1/3"), 0) == 0);
}

TEST_CASE("progress: a negative total is refused", "[common][progress]") {
  std::ostringstream out;
  CHECK_THROWS_WITH(mls::ProgressBar(-1, "x", &out, 0),
                    Catch::Contains("ProgressBar: total -1 must be >= 0"));
}

TEST_CASE("progress: a log gets at most one line per 10%", "[common][progress]") {
  std::ostringstream out;
  mls::ProgressBar bar(1000, "steps", &out, 0);
  for (int i = 1; i <= 1000; ++i) bar.update(i, "step " + std::to_string(i));
  const std::string s = out.str();
  CHECK(count_lines(s) <= 11);
  CHECK(count_lines(s) >= 10);
  CHECK(s.find('\r') == std::string::npos);
  CHECK(s.find('\x1b') == std::string::npos);
  CHECK_THAT(s, Catch::Contains(bar_text("steps", 20, "100% 1000/1000")));
  CHECK_THAT(s, Catch::Contains("50% 500/1000"));

  bar.finish("done");
  const std::string t = out.str();
  CHECK(t.back() == '\n');
  CHECK_THAT(t, Catch::EndsWith(" | done\n"));
  CHECK(count_lines(t) == count_lines(s) + 1);
  bar.finish("again");  // a second finish prints nothing
  bar.update(3);        // nor does an update after finish
  CHECK(out.str() == t);
}

TEST_CASE("progress: finish without updates prints the full bar", "[common][progress]") {
  std::ostringstream out;
  mls::ProgressBar bar(7, "eval", &out, 0);
  bar.finish();
  CHECK(count_lines(out.str()) == 1);
  CHECK(out.str().rfind(bar_text("eval", 20, "100% 7/7"), 0) == 0);
  CHECK(out.str().back() == '\n');
}

TEST_CASE("progress: a terminal redraws one line in place", "[common][progress]") {
  std::ostringstream out;
  mls::ProgressBar bar(4, "tty", &out, 1);
  for (int i = 0; i <= 4; ++i) bar.update(i);
  const std::string s = out.str();
  CHECK(count_lines(s) == 0);
  CHECK(std::count(s.begin(), s.end(), '\r') == 5);
  bar.finish("ok");
  const std::string t = out.str();
  CHECK(count_lines(t) == 1);
  CHECK(t.back() == '\n');
  CHECK_THAT(t, Catch::Contains(bar_text("\rtty", 20, "100% 4/4")));

  SECTION("many updates redraw at most once per 0.1%") {
    std::ostringstream many;
    mls::ProgressBar big(1000000, "big", &many, 1);
    for (int i = 0; i <= 1000000; ++i) big.update(i);
    const std::string m = many.str();
    CHECK(std::count(m.begin(), m.end(), '\r') == 1001);
  }
}

TEST_CASE("progress: default stream is stderr and huge totals do not overflow",
          "[common][progress]") {
  // With out = nullptr the bar writes to std::cerr; is_tty = 0 keeps it to plain lines.
  mls::ProgressBar quiet(0, "", nullptr, 0);
  CHECK_THAT(quiet.render(0, ""), Catch::Contains("100% 0/0"));

  std::ostringstream out;
  const std::int64_t big = INT64_MAX;
  mls::ProgressBar bar(big, "huge", &out, 0);
  CHECK_THAT(bar.render(big / 2, ""), Catch::Contains("] 49% "));
  CHECK_THAT(bar.render(big, ""), Catch::Contains("] 100% "));
}
