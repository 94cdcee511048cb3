#include <catch2/catch.hpp>

#include <cmath>

#include "helpers.hpp"
#include "mls/common/error.hpp"
#include "mls/grader/bench.hpp"
#include "mls/grader/report.hpp"

using namespace mls::grader;
using nlohmann::json;

namespace {
LabResult sample() {
  LabResult r;
  r.lab = 99;
  r.title = "Grader fixture";
  r.submission = "alice";
  r.execution_time_s = 1.5;
  r.tests.push_back({"add small", "add", Visibility::Visible, Outcome::Pass, 2, 2, 0.01, ""});
  r.tests.push_back({"add <neg>", "add", Visibility::Visible, Outcome::Crash, 0, 2, 0.02, "crashed\x01 & burned"});
  r.tests.push_back({"sum", "sum", Visibility::AfterDueDate, Outcome::Timeout, 0, 2, 3, "slow"});
  r.leaderboard.push_back({"speed", 1.5, "desc", "a test figure"});
  return r;
}
}  // namespace

TEST_CASE("report: Gradescope results.json has the fields Gradescope reads", "[grader][report]") {
  Manifest m = testing::fixture_manifest();
  json j = to_gradescope(sample(), m);
  CHECK(j["score"] == 2.0);
  CHECK(j["execution_time"] == 1.5);
  REQUIRE(j["tests"].size() == 3);
  CHECK(j["tests"][0]["name"] == "add: add small");
  CHECK(j["tests"][0]["number"] == "1.1");
  CHECK(j["tests"][1]["number"] == "1.2");
  CHECK(j["tests"][2]["number"] == "3.1");
  CHECK(j["tests"][1]["status"] == "failed");
  CHECK(j["tests"][1]["max_score"] == 2.0);
  CHECK(j["tests"][2]["visibility"] == "after_due_date");
  CHECK_THAT(j["tests"][1]["output"].get<std::string>(), Catch::Contains("CRASH") && Catch::Contains("crashed? & burned"));
  CHECK(j["leaderboard"][0]["name"] == "speed");
  CHECK(j["extra_data"]["submission"] == "alice");
}

TEST_CASE("report: table, failures, JUnit XML and CSV", "[grader][report]") {
  Manifest m = testing::fixture_manifest();
  LabResult r = sample();
  std::string t = format_table(r, m, false);
  CHECK_THAT(t, Catch::Contains("add") && Catch::Contains("1/2") && Catch::Contains("CRASH=1") && Catch::Contains("total"));
  CHECK_THAT(format_failures(r), Catch::Contains("TIMEOUT  sum: sum") && !Catch::Contains("add small"));
  std::string x = to_junit(r, m);
  CHECK_THAT(x, Catch::Contains("<testcase classname=\"lab99.add\" name=\"add &lt;neg&gt;\"") &&
                    Catch::Contains("<failure type=\"CRASH\"") && Catch::Contains("tests=\"3\" failures=\"2\""));
  std::string csv = to_csv({r}, m);
  CHECK_THAT(csv, Catch::StartsWith("submission,lab,score,max_score,built,PASS,FAIL,CRASH") &&
                      Catch::Contains("alice,99,2.00,6.00,no,1,0,1,1,"));
  // One column per group of the manifest, named in the header: the points earned in it.
  const auto lines = split(csv, '\n');
  REQUIRE(lines.size() >= 2);
  CHECK_THAT(lines[0], Catch::EndsWith(",SKIPPED,group:add,group:mul,group:sum,group:gpu"));
  CHECK_THAT(lines[1], Catch::EndsWith(",2.00,0.00,0.00,0.00"));
  CHECK(split(lines[0], ',').size() == split(lines[1], ',').size());
}

TEST_CASE("report: a group's points are split in hundredths that add up exactly", "[grader][report]") {
  CHECK(split_points(1, 3) == std::vector<double>{0.34, 0.33, 0.33});
  CHECK(split_points(4, 2) == std::vector<double>{2, 2});
  CHECK(split_points(2, 0).empty());
  CHECK(split_points(0, 3) == std::vector<double>{0, 0, 0});
  for (double points : {1.0, 2.5, 7.0, 10.0, 15.0, 33.33, 99.0}) {
    for (std::size_t n = 1; n <= 41; ++n) {
      INFO(points << " points over " << n << " tests");
      long long sum = 0;
      for (double share : split_points(points, n)) {
        const long long hundredths = std::llround(share * 100);
        CHECK(std::abs(share * 100 - static_cast<double>(hundredths)) < 1e-9);  // at most 2 decimals
        sum += hundredths;
      }
      CHECK(sum == std::llround(points * 100));
    }
  }
  // In results.json: the printed max_scores of 7 points over 3 tests add up to 7.00, and the
  // total is the manifest's.
  Manifest m = testing::fixture_manifest();
  LabResult r;
  r.lab = 99;
  const auto shares = split_points(7, 3);
  for (std::size_t k = 0; k < shares.size(); ++k)
    r.tests.push_back({"t" + std::to_string(k), "add", Visibility::Visible, Outcome::Pass, shares[k], shares[k], 0, ""});
  json j = json::parse(to_gradescope(r, m).dump());
  long long sum = 0;
  for (const auto& t : j["tests"]) {
    const std::string printed = t["max_score"].dump();
    CHECK(printed.size() <= 4);  // "2.34": two decimals at most
    sum += std::llround(t["max_score"].get<double>() * 100);
  }
  CHECK(sum == 700);
  CHECK(j["score"].dump() == "7.0");
  CHECK(j["extra_data"]["max_score"].dump() == "7.0");
}

TEST_CASE("leaderboard: HTML (sortable, no external assets) and Markdown, ranked by the metric's order",
          "[grader][report][leaderboard]") {
  Manifest m = testing::fixture_manifest();
  std::vector<LeaderboardRow> rows;
  for (auto [name, v] : std::vector<std::pair<std::string, double>>{{"alice", 1.5}, {"bob", 2.5}, {"<carol>", 0.5}}) {
    LabResult r = sample();
    r.submission = name;
    r.leaderboard[0].value = v;
    rows.push_back(leaderboard_row_from_results(to_gradescope(r, m), "fallback"));
  }
  rows.push_back(leaderboard_row_from_results(
      json::parse(R"({"score": 1, "tests": [], "extra_data": {"lab": 99, "max_score": 6}})"), "dave"));
  CHECK(rows[3].submission == "dave");
  std::string html = leaderboard_html(rows, "Board");
  CHECK_THAT(html, Catch::Contains("<table class=\"board\"") && Catch::Contains("&lt;carol&gt;") &&
                       Catch::Contains("addEventListener('click'") && !Catch::Contains("http") &&
                       !Catch::Contains("<link") && !Catch::Contains("src="));
  CHECK(html.find("bob") < html.find("alice"));
  CHECK(html.find("alice") < html.find("&lt;carol&gt;"));
  std::string md = leaderboard_markdown(rows, "Board");
  CHECK_THAT(md, Catch::Contains("| rank | submission | score | speed |"));
  // One score format in both: score / maximum.
  CHECK_THAT(md, Catch::Contains("| 1 | bob | 2.00 / 6.00 | 2.5 |") && Catch::Contains("| dave | 1.00 / 6.00 |"));
  CHECK_THAT(html, Catch::Contains("<td>bob</td><td>2.00 / 6.00</td>") && Catch::Contains("<td>dave</td><td>1.00 / 6.00</td>"));
}

TEST_CASE("leaderboard: columns measured the same way share one line of explanation", "[grader][report][leaderboard]") {
  LeaderboardRow r;
  r.lab = 1;
  r.submission = "alice";
  r.score = r.max_score = 1;
  for (const char* name : {"a_vs_reference", "b_vs_reference", "c_vs_peer"})
    r.entries.push_back({name, 1.0, "desc", std::string(name) == "c_vs_peer" ? "the peer time" : "the grader clock"});
  const std::string html = leaderboard_html({r}, "Board");
  const std::string md = leaderboard_markdown({r}, "Board");
  CHECK_THAT(html, Catch::Contains("<p><b>a_vs_reference</b>, <b>b_vs_reference</b>: the grader clock</p>") &&
                       Catch::Contains("<p><b>c_vs_peer</b>: the peer time</p>"));
  CHECK_THAT(md, Catch::Contains("- **a_vs_reference**, **b_vs_reference**: the grader clock\n") &&
                     Catch::Contains("- **c_vs_peer**: the peer time\n"));
}

TEST_CASE("leaderboard: a JSON that is not a grader result is refused, naming what it lacks", "[grader][report][leaderboard]") {
  auto error_of = [](const std::string& text) {
    try {
      leaderboard_row_from_results(json::parse(text), "x");
    } catch (const mls::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(error_of("{}"), Catch::Contains("not a results.json of mls-grader") && Catch::Contains("score (a number)") &&
                                 Catch::Contains("tests (an array)") && Catch::Contains("extra_data (an object"));
  CHECK_THAT(error_of("[1, 2]"), Catch::Contains("a JSON array"));
  CHECK_THAT(error_of("3"), Catch::Contains("a JSON number"));
  CHECK_THAT(error_of(R"({"score": 1, "tests": [], "extra_data": {"lab": "one", "max_score": 6}})"),
             Catch::Contains("extra_data.lab") && !Catch::Contains("max_score (a number)") && !Catch::Contains("score (a number)"));
  CHECK_THAT(error_of(R"({"score": 1, "tests": [], "extra_data": {"lab": 1}})"), Catch::Contains("extra_data.max_score"));
  CHECK_THAT(error_of(R"({"score": "7", "tests": [], "extra_data": {"lab": 1, "max_score": 6}})"),
             Catch::Contains("score (a number)"));
  CHECK_THAT(error_of(R"({"score": 1, "tests": [], "extra_data": {"lab": 1, "max_score": 6}, "leaderboard": {}})"),
             Catch::Contains("leaderboard (an array"));
  // What to_gradescope writes is a grader result.
  CHECK(error_of(to_gradescope(sample(), testing::fixture_manifest()).dump()).empty());
}

TEST_CASE("bench: median of a Google Benchmark report, ratio against the peer", "[grader][bench]") {
  json rep = json::parse(R"({"benchmarks": [
    {"name": "BM_Add/1024_median", "run_name": "BM_Add/1024", "aggregate_name": "median", "real_time": 50.0, "GB/s": 12.0},
    {"name": "BM_Add/1024_mean", "run_name": "BM_Add/1024", "aggregate_name": "mean", "real_time": 70.0},
    {"name": "BM_Memcpy/1024", "run_name": "BM_Memcpy/1024", "real_time": 20.0, "GB/s": 30.0},
    {"name": "BM_Memcpy/1024", "run_name": "BM_Memcpy/1024", "real_time": 30.0, "GB/s": 20.0},
    {"name": "BM_Memcpy/1024", "run_name": "BM_Memcpy/1024", "real_time": 25.0, "GB/s": 24.0}]})");
  CHECK(gbench_median(rep, "BM_Add", "real_time") == 50.0);
  CHECK(gbench_median(rep, "BM_Memcpy", "real_time") == 25.0);
  Benchmark b{"add_vs_memcpy", "bin", "BM_Add", "ratio", "BM_Memcpy", "desc", ""};
  BenchResult r = evaluate_benchmark(rep, b);
  REQUIRE(r.ok);
  CHECK(r.value == Approx(0.5));
  Benchmark c{"add_gbs", "bin", "BM_Add", "GB/s", "BM_Memcpy", "desc", ""};
  r = evaluate_benchmark(rep, c);
  REQUIRE(r.ok);
  CHECK(r.value == 12.0);
  CHECK_THAT(r.message, Catch::Contains("50.0% of the peer"));
  Benchmark d{"none", "bin", "BM_Nothing", "ratio", "BM_Memcpy", "desc", ""};
  CHECK_FALSE(evaluate_benchmark(rep, d).ok);
}
