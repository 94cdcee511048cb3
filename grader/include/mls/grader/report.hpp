#pragma once
/// Reporters: Gradescope results.json, terminal table, JUnit XML, CSV, leaderboard HTML/Markdown.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mls/grader/manifest.hpp"
#include "mls/grader/result.hpp"

namespace mls::grader {

/// Gradescope's results.json: score, execution_time, output, tests[], leaderboard[]; texts
/// sanitized and capped; `extra_data` carries lab and submission for the leaderboard.
nlohmann::json to_gradescope(const LabResult& r, const Manifest& m);
/// The score table: one line per group (tests passed, points, outcome counts, time) and a total.
std::string format_table(const LabResult& r, const Manifest& m, bool colour);
/// One line per failing test with its outcome and message.
std::string format_failures(const LabResult& r, std::size_t max_per_test = 600);
/// JUnit XML (one testsuite per group).
std::string to_junit(const LabResult& r, const Manifest& m);
/// CSV of a batch: submission, score, max_score, then one column per outcome count.
std::string to_csv(const std::vector<LabResult>& results);

struct LeaderboardRow {
  std::string submission;
  int lab = 0;
  double score = 0, max_score = 0;
  std::vector<LeaderboardEntry> entries;
};
/// Reads a results.json (ours); the submission name comes from extra_data or the parent folder.
LeaderboardRow leaderboard_row_from_results(const nlohmann::json& j, const std::string& fallback_name);
/// A static HTML page: one sortable table per lab (inline CSS and JS, no external assets).
std::string leaderboard_html(const std::vector<LeaderboardRow>& rows, const std::string& title);
/// The same as Markdown tables.
std::string leaderboard_markdown(const std::vector<LeaderboardRow>& rows, const std::string& title);

}  // namespace mls::grader
