#include "mls/grader/feedback.hpp"

#include <vector>

#include "mls/grader/result.hpp"
#include "mls/grader/util.hpp"

namespace mls::grader {

std::string format_feedback(std::string_view message, std::string_view rerun, FeedbackLimits lim) {
  // Distinct lines in order of first appearance, with their counts.
  std::vector<std::pair<std::string, std::size_t>> lines;
  std::size_t start = 0;
  while (start <= message.size()) {
    std::size_t nl = message.find('\n', start);
    std::string_view l = message.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    start = nl == std::string_view::npos ? message.size() + 1 : nl + 1;
    while (!l.empty() && (l.back() == ' ' || l.back() == '\r' || l.back() == '\t')) l.remove_suffix(1);
    if (l.empty()) continue;
    std::string line(l.substr(0, lim.line_bytes));
    if (l.size() > lim.line_bytes) line += " ...";
    bool seen = false;
    for (auto& [text, n] : lines)
      if (text == line) {
        ++n;
        seen = true;
        break;
      }
    if (!seen) lines.emplace_back(std::move(line), 1);
  }
  std::string tail;
  if (!rerun.empty()) tail = "run it locally: " + std::string(rerun.substr(0, lim.line_bytes));
  std::string out;
  std::size_t shown = 0;
  for (const auto& [text, n] : lines) {
    if (shown == lim.lines) break;
    std::string l = text + (n > 1 ? "  (x" + std::to_string(n) + ")" : "") + "\n";
    // Room is kept for the "more lines" note and the command.
    if (out.size() + l.size() + tail.size() + 64 > lim.bytes) break;
    out += l;
    ++shown;
  }
  if (shown < lines.size()) out += "(" + std::to_string(lines.size() - shown) + " more line(s) left out: run it locally)\n";
  out += tail;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out.size() > lim.bytes ? out.substr(0, lim.bytes) : out;
}

void add_feedback(TestResult& t, std::string_view rerun, FeedbackLimits lim) {
  if (t.outcome != Outcome::Fail && t.outcome != Outcome::Crash && t.outcome != Outcome::Memory &&
      t.outcome != Outcome::Timeout)
    return;
  t.message = format_feedback(t.message, rerun, lim);
}

std::string rerun_command(const Manifest& m, std::string_view group, std::string_view program,
                          std::string_view test_name, std::string_view preset) {
  std::string dir = m.dir.empty() ? "" : m.dir + "/";
  const Group* g = m.group(std::string(group));
  const std::string launcher = g && !g->run_with.empty() ? g->run_with + " " : "";
  return launcher + "build/" + std::string(preset) + "/" + dir + std::string(program) + " \"" +
         escape_test_name(std::string(test_name)) + "\"";
}

}  // namespace mls::grader
