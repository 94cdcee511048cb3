#pragma once
/// Reporters: Gradescope results.json, terminal table, JUnit XML, CSV, leaderboard HTML/Markdown.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mls/grader/manifest.hpp"
#include "mls/grader/result.hpp"

namespace mls::grader {

/// Gradescope's results.json: score, execution_time, output, tests[], leaderboard[]; texts
/// sanitized and capped; `extra_data` carries lab, submission and max_score for the leaderboard.
/// The output opens with the isolation level, the score and the result's headline (a build's
/// first errors). A test that counts has its score and max_score (hundredths: a group's add up
/// to its points) and status passed or failed; one that does not count on this machine (a
/// SKIPPED GPU test) has none of the three: Gradescope shows it, neither passed nor failed, and
/// adds nothing to the total; its output says "not counted".
nlohmann::json to_gradescope(const LabResult& r, const Manifest& m);
/// The score table: the result's headline first (a build's first errors), then one line per
/// group (tests passed, points, outcome counts, time) and a total.
std::string format_table(const LabResult& r, const Manifest& m, bool colour);
/// One line per failing test with its outcome and message.
std::string format_failures(const LabResult& r, std::size_t max_per_test = 600);
/// JUnit XML (one testsuite per group).
std::string to_junit(const LabResult& r, const Manifest& m);
/// CSV of a batch: submission, lab, score, max_score, built, one column per outcome count, then
/// one column per group of `m` ("group:<name>": the points earned in it).
std::string to_csv(const std::vector<LabResult>& results, const Manifest& m);

struct LeaderboardRow {
  std::string submission;
  int lab = 0;
  double score = 0, max_score = 0;
  std::vector<LeaderboardEntry> entries;
};
/// Reads a results.json of mls-grader; the submission name comes from extra_data or
/// `fallback_name` (the parent folder). Throws mls::Error naming what is missing when `j` is not
/// one (no numeric score, no tests array, no extra_data with an integer lab and a max_score).
LeaderboardRow leaderboard_row_from_results(const nlohmann::json& j, const std::string& fallback_name);
/// A static HTML page: one sortable table per lab (inline CSS and JS, no external assets); the
/// score reads "7.00 / 99.00", as in the Markdown.
std::string leaderboard_html(const std::vector<LeaderboardRow>& rows, const std::string& title);
/// The same as Markdown tables.
std::string leaderboard_markdown(const std::vector<LeaderboardRow>& rows, const std::string& title);

}  // namespace mls::grader
