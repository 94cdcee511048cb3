#include "mls/grader/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "mls/common/error.hpp"
#include "mls/grader/util.hpp"

namespace mls::grader {

using nlohmann::json;

namespace {
std::string fmt(double v, int prec = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}
double round4(double v) { return std::round(v * 10000.0) / 10000.0; }
const Outcome kOutcomes[] = {Outcome::Pass, Outcome::Fail, Outcome::Crash, Outcome::Timeout,
                             Outcome::Memory, Outcome::OutputLimit, Outcome::NoResult, Outcome::NotImplemented,
                             Outcome::Skipped};
/// "(21.00 points of GPU tests not counted: this machine cannot run them; ...)" or "".
std::string uncounted_note(const LabResult& r, const Manifest& m) {
  int n = 0;
  bool gpu = false, mpi = false;
  for (const auto& t : r.tests) {
    if (t.counts()) continue;
    ++n;
    const Group* g = m.group(t.group);
    gpu = gpu || (g && g->gpu);
    mpi = mpi || (g && g->mpi);
  }
  if (n == 0) return "";
  const char* what = gpu && mpi ? "GPU and MPI" : mpi ? "MPI" : "GPU";
  return "(" + fmt(r.uncounted_points()) + " points of " + what +
         " tests not counted: this machine cannot run them; left out of the maximum)";
}
/// The headline of a result (a build's first errors), once, ending with a blank line; or "".
std::string headline_block(const LabResult& r) {
  if (r.headline.empty()) return "";
  std::string h = sanitize_text(r.headline, 6000);
  while (!h.empty() && h.back() == '\n') h.pop_back();
  return h + "\n\n";
}
}  // namespace

json to_gradescope(const LabResult& r, const Manifest& m) {
  json j;
  j["score"] = round_points(r.score());
  j["execution_time"] = round4(r.execution_time_s);
  std::string note = uncounted_note(r, m);
  // The first lines: the isolation level, the score, then what to read first (a build's errors).
  std::string out = (r.isolation.empty() ? "" : r.isolation + "\n") + "Lab " + std::to_string(r.lab) + ": " + r.title +
                    "\nScore " + fmt(r.score()) + " / " + fmt(r.max_score()) + (note.empty() ? "" : "  " + note) + "\n" +
                    headline_block(r) + r.output;
  j["output"] = sanitize_text(out, 16000);
  j["tests"] = json::array();
  int number = 0;
  std::map<std::string, int> group_index;
  for (const auto& g : m.groups) group_index[g.name] = static_cast<int>(group_index.size()) + 1;
  std::map<std::string, int> within;
  for (const auto& t : r.tests) {
    json tj;
    ++number;
    int gi = group_index.count(t.group) ? group_index[t.group] : 0;
    tj["name"] = sanitize_text(t.group + ": " + t.name, 500);
    tj["number"] = std::to_string(gi) + "." + std::to_string(++within[t.group]);
    std::string o = std::string(to_string(t.outcome)) + " (" + fmt(t.wall_s, 2) + " s)";
    if (t.counts()) {
      // Shares in hundredths (split_points): the max_scores of a group add up to its points.
      tj["score"] = round_points(t.score);
      tj["max_score"] = round_points(t.max_score);
      tj["status"] = t.outcome == Outcome::Pass ? "passed" : "failed";
    } else {
      // Not counted on this machine (a SKIPPED GPU test): Gradescope's informational test case,
      // with no score, no max_score and no status, so it is shown but neither passed nor
      // failed, and adds nothing to the total (the spec's "status" is only "passed"/"failed").
      o += ", not counted (neither passed nor failed)";
    }
    if (!t.message.empty()) o += "\n" + t.message;
    // A failed test's message is its feedback (feedback.hpp: what differed first, a few lines,
    // the command that runs it locally); any output is held to 2 KB, its first lines kept.
    tj["output"] = sanitize_text(o, 2048);
    tj["visibility"] = to_string(t.visibility);
    tj["tags"] = json::array({t.group, to_string(t.outcome)});
    if (!t.counts()) tj["tags"].push_back("not counted");
    j["tests"].push_back(tj);
  }
  j["leaderboard"] = json::array();
  for (const auto& e : r.leaderboard)
    j["leaderboard"].push_back({{"name", e.name}, {"value", e.value}, {"order", e.order}, {"how", e.how}});
  j["extra_data"] = {{"lab", r.lab},
                     {"submission", sanitize_text(r.submission, 300)},
                     {"max_score", round_points(r.max_score())},
                     {"isolation", sanitize_text(r.isolation, 1000)}};
  return j;
}

std::string format_table(const LabResult& r, const Manifest& m, bool colour) {
  const char* green = colour ? "\033[32m" : "";
  const char* red = colour ? "\033[31m" : "";
  const char* yellow = colour ? "\033[33m" : "";
  const char* bold = colour ? "\033[1m" : "";
  const char* reset = colour ? "\033[0m" : "";
  std::ostringstream os;
  char line[512];
  if (!r.isolation.empty()) os << sanitize_text(r.isolation, 1000) << "\n";
  os << bold << "Lab " << r.lab << ": " << r.title
     << (r.submission.empty() ? "" : "  [" + sanitize_text(display_name(r.submission, 120), 200) + "]") << reset << "\n";
  if (!r.headline.empty()) os << red << headline_block(r) << reset;
  std::snprintf(line, sizeof line, "%-22s %7s %15s %8s  %s\n", "group", "passed", "points", "time s", "outcomes");
  os << line;
  std::vector<std::string> order;
  for (const auto& g : m.groups) order.push_back(g.name);
  for (const auto& t : r.tests)
    if (std::find(order.begin(), order.end(), t.group) == order.end()) order.push_back(t.group);
  for (const auto& g : order) {
    int n = 0, passed = 0;
    double s = 0, mx = 0, time = 0;
    std::map<Outcome, int> counts;
    int uncounted = 0;
    for (const auto& t : r.tests) {
      if (t.group != g) continue;
      ++n;
      passed += t.outcome == Outcome::Pass;
      if (t.counts()) {
        s += t.score;
        mx += t.max_score;
      } else {
        ++uncounted;
      }
      time += t.wall_s;
      counts[t.outcome]++;
    }
    if (n == 0) continue;
    std::string oc;
    for (Outcome o : kOutcomes)
      if (counts[o]) oc += std::string(oc.empty() ? "" : " ") + to_string(o) + "=" + std::to_string(counts[o]);
    const char* c = passed == n ? green : uncounted == n ? yellow : red;
    if (uncounted) oc += " (not counted: this machine cannot run them)";
    std::snprintf(line, sizeof line, "%-22.22s %s%3d/%-3d%s %7s/%-7s %8.2f  %s\n", g.c_str(), c, passed, n, reset,
                  fmt(s).c_str(), fmt(mx).c_str(), time, oc.c_str());
    os << line;
  }
  int n = static_cast<int>(r.tests.size()), passed = r.count(Outcome::Pass);
  std::string note = uncounted_note(r, m);
  std::snprintf(line, sizeof line, "%s%-22s %3d/%-3d %7s/%-7s %8.2f%s%s%s%s\n", bold, "total", passed, n, fmt(r.score()).c_str(),
                fmt(r.max_score()).c_str(), r.execution_time_s, reset, note.empty() ? "" : "  ", yellow, note.c_str());
  os << line;
  if (!note.empty()) os << reset;
  return os.str();
}

std::string format_failures(const LabResult& r, std::size_t max_per_test) {
  std::string out;
  for (const auto& t : r.tests) {
    if (t.outcome == Outcome::Pass) continue;
    std::string msg = t.message.size() > max_per_test ? t.message.substr(0, max_per_test) + " ..." : t.message;
    out += std::string(to_string(t.outcome)) + "  " + t.group + ": " + sanitize_text(t.name, 500) + "\n";
    msg = sanitize_text(msg, max_per_test + 200);
    if (!msg.empty()) {
      for (const auto& l : split(msg, '\n')) out += "    " + l + "\n";
    }
  }
  return out;
}

std::string to_junit(const LabResult& r, const Manifest& m) {
  std::ostringstream os;
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  os << "<testsuites name=\"" << xml_escape("lab" + std::to_string(r.lab) + " " + r.title) << "\" tests=\""
     << r.tests.size() << "\" failures=\"" << (r.tests.size() - r.count(Outcome::Pass) - r.count(Outcome::Skipped))
     << "\" skipped=\"" << r.count(Outcome::Skipped) << "\" time=\""
     << fmt(r.execution_time_s, 3) << "\">\n";
  std::vector<std::string> groups;
  for (const auto& g : m.groups) groups.push_back(g.name);
  for (const auto& t : r.tests)
    if (std::find(groups.begin(), groups.end(), t.group) == groups.end()) groups.push_back(t.group);
  for (const auto& g : groups) {
    std::vector<const TestResult*> ts;
    for (const auto& t : r.tests)
      if (t.group == g) ts.push_back(&t);
    if (ts.empty()) continue;
    int fails = 0, skips = 0;
    for (auto* t : ts) {
      fails += t->outcome != Outcome::Pass && t->outcome != Outcome::Skipped;
      skips += t->outcome == Outcome::Skipped;
    }
    os << "  <testsuite name=\"" << xml_escape(g) << "\" tests=\"" << ts.size() << "\" failures=\"" << fails
       << "\" skipped=\"" << skips << "\">\n";
    for (auto* t : ts) {
      os << "    <testcase classname=\"lab" << r.lab << "." << xml_escape(g) << "\" name=\"" << xml_escape(sanitize_text(t->name, 500))
         << "\" time=\"" << fmt(t->wall_s, 3) << "\"";
      if (t->outcome == Outcome::Pass) {
        os << "/>\n";
      } else if (t->outcome == Outcome::Skipped) {
        os << ">\n      <skipped message=\"" << xml_escape(sanitize_text(t->message, 500)) << "\"/>\n    </testcase>\n";
      } else {
        os << ">\n      <failure type=\"" << to_string(t->outcome) << "\" message=\"" << to_string(t->outcome) << "\">"
           << xml_escape(sanitize_text(t->message, 4000)) << "</failure>\n    </testcase>\n";
      }
    }
    os << "  </testsuite>\n";
  }
  os << "</testsuites>\n";
  return os.str();
}

namespace {
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}
}  // namespace

std::string to_csv(const std::vector<LabResult>& results, const Manifest& m) {
  std::string out = "submission,lab,score,max_score,built";
  for (Outcome o : kOutcomes) out += std::string(",") + to_string(o);
  for (const auto& g : m.groups) out += "," + csv_field("group:" + g.name);
  out += "\n";
  for (const auto& r : results) {
    out += csv_field(sanitize_text(r.submission, 300)) + "," + std::to_string(r.lab) + "," + fmt(r.score()) + "," + fmt(r.max_score()) + "," +
           (r.built ? "yes" : "no");
    for (Outcome o : kOutcomes) out += "," + std::to_string(r.count(o));
    // The points earned in each group (0 where the group does not count on this machine).
    for (const auto& g : m.groups) {
      double earned = 0;
      for (const auto& t : r.tests)
        if (t.group == g.name && t.counts()) earned += t.score;
      out += "," + fmt(round_points(earned));
    }
    out += "\n";
  }
  return out;
}

LeaderboardRow leaderboard_row_from_results(const json& j, const std::string& fallback_name) {
  // What every results.json of mls-grader has (to_gradescope): anything else is refused, with
  // what it lacks, rather than shown as a row of lab 0.
  if (!j.is_object())
    mls::fail("not a results.json of mls-grader (grade, test or bench --results): a JSON ", j.type_name(),
              ", not an object with score, tests and extra_data");
  const json* x = j.contains("extra_data") && j["extra_data"].is_object() ? &j["extra_data"] : nullptr;
  std::vector<std::string> missing;
  if (!j.contains("score") || !j["score"].is_number()) missing.push_back("score (a number)");
  if (!j.contains("tests") || !j["tests"].is_array()) missing.push_back("tests (an array)");
  if (!x) missing.push_back("extra_data (an object with lab and max_score)");
  if (x && !(x->contains("lab") && (*x)["lab"].is_number_integer() && (*x)["lab"].get<long long>() >= 0 &&
             (*x)["lab"].get<long long>() <= 1000000))
    missing.push_back("extra_data.lab (the lab number, an integer >= 0)");
  if (x && !(x->contains("max_score") && (*x)["max_score"].is_number())) missing.push_back("extra_data.max_score (a number)");
  if (j.contains("leaderboard") && !j["leaderboard"].is_array()) missing.push_back("leaderboard (an array, when present)");
  if (!missing.empty()) {
    std::string what;
    for (const auto& s : missing) what += (what.empty() ? "" : ", ") + s;
    mls::fail("not a results.json of mls-grader (grade, test or bench --results): missing or of the wrong type: ", what);
  }
  LeaderboardRow row;
  row.submission = fallback_name;
  if (x->contains("submission") && (*x)["submission"].is_string() && !(*x)["submission"].get<std::string>().empty())
    row.submission = (*x)["submission"].get<std::string>();
  row.submission = sanitize_text(display_name(row.submission, 120), 300);
  row.lab = (*x)["lab"].get<int>();
  row.max_score = (*x)["max_score"].get<double>();
  row.score = j["score"].get<double>();
  if (j.contains("leaderboard")) {
    for (const auto& e : j["leaderboard"]) {
      if (!e.is_object() || !e.contains("name") || !e.contains("value") || !e["value"].is_number()) continue;
      LeaderboardEntry le;
      le.name = e["name"].is_string() ? sanitize_text(display_name(e["name"].get<std::string>(), 80), 200) : "?";
      le.value = e["value"].get<double>();
      le.order = e.contains("order") && e["order"].is_string() && e["order"].get<std::string>() == "asc" ? "asc" : "desc";
      if (e.contains("how") && e["how"].is_string()) le.how = sanitize_text(e["how"].get<std::string>(), 600);
      row.entries.push_back(le);
    }
  }
  return row;
}

namespace {
struct LabTable {
  int lab;
  std::vector<std::string> columns;
  std::map<std::string, std::string> order;
  std::map<std::string, std::string> how;  ///< per column: how its figures were measured
  std::vector<const LeaderboardRow*> rows;
};

std::vector<LabTable> tables(const std::vector<LeaderboardRow>& rows) {
  std::map<int, LabTable> by_lab;
  for (const auto& r : rows) {
    LabTable& t = by_lab[r.lab];
    t.lab = r.lab;
    t.rows.push_back(&r);
    for (const auto& e : r.entries) {
      if (std::find(t.columns.begin(), t.columns.end(), e.name) == t.columns.end()) t.columns.push_back(e.name);
      t.order[e.name] = e.order;
      if (!e.how.empty()) t.how[e.name] = e.how;
    }
  }
  std::vector<LabTable> out;
  for (auto& [k, t] : by_lab) {
    // Default ranking: the first metric in its order, then the score.
    std::string first = t.columns.empty() ? "" : t.columns[0];
    bool desc = first.empty() || t.order[first] != "asc";
    std::stable_sort(t.rows.begin(), t.rows.end(), [&](const LeaderboardRow* a, const LeaderboardRow* b) {
      auto val = [&](const LeaderboardRow* r, double& v) {
        for (const auto& e : r->entries)
          if (e.name == first) {
            v = e.value;
            return true;
          }
        return false;
      };
      double va = 0, vb = 0;
      bool ha = !first.empty() && val(a, va), hb = !first.empty() && val(b, vb);
      if (ha != hb) return ha;
      if (ha && va != vb) return desc ? va > vb : va < vb;
      return a->score > b->score;
    });
    out.push_back(t);
  }
  return out;
}

/// How each column was measured, said once for the columns that share it (in column order).
std::vector<std::pair<std::vector<std::string>, std::string>> legend(const LabTable& t) {
  std::vector<std::pair<std::vector<std::string>, std::string>> out;
  for (const auto& c : t.columns) {
    const std::string how = t.how.count(c) ? t.how.at(c) : "measured how is not recorded (an older results.json)";
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.second == how; });
    if (it == out.end()) out.push_back({{c}, how});
    else it->first.push_back(c);
  }
  return out;
}

/// A row's score, one format in every rendering: "7.00 / 99.00".
std::string score_cell(const LeaderboardRow& r) { return fmt(r.score) + " / " + fmt(r.max_score); }

std::string value_of(const LeaderboardRow* r, const std::string& col, bool& has) {
  for (const auto& e : r->entries)
    if (e.name == col) {
      has = true;
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.4g", e.value);
      return buf;
    }
  has = false;
  return "";
}
}  // namespace

std::string leaderboard_html(const std::vector<LeaderboardRow>& rows, const std::string& title) {
  std::ostringstream os;
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << xml_escape(title) << "</title>\n<style>\n"
     << "body{font-family:system-ui,sans-serif;margin:2em;color:#222}\n"
     << "table{border-collapse:collapse;margin-bottom:2em;min-width:30em}\n"
     << "th,td{border:1px solid #bbb;padding:.35em .8em;text-align:right;white-space:nowrap}\n"
     << "th{background:#e8eef7;cursor:pointer;user-select:none}\nth:hover{background:#d0dcf0}\n"
     << "td:nth-child(2),th:nth-child(2){text-align:left}\ntr:nth-child(even) td{background:#f7f7f7}\n"
     << "th.asc::after{content:' \\25B2'}th.desc::after{content:' \\25BC'}\n</style></head><body>\n";
  os << "<h1>" << xml_escape(title) << "</h1>\n";
  if (rows.empty()) os << "<p>No results.</p>\n";
  for (const auto& t : tables(rows)) {
    os << "<h2>Lab " << t.lab << "</h2>\n<table class=\"board\" id=\"lab" << t.lab << "\"><thead><tr>"
       << "<th data-type=\"num\">rank</th><th data-type=\"text\">submission</th><th data-type=\"num\">score</th>";
    for (const auto& c : t.columns)
      os << "<th data-type=\"num\" title=\"" << (t.order.at(c) == "asc" ? "lower is better" : "higher is better") << "\">"
         << xml_escape(c) << "</th>";
    os << "</tr></thead><tbody>\n";
    int rank = 0;
    for (const auto* r : t.rows) {
      os << "<tr><td>" << ++rank << "</td><td>" << xml_escape(r->submission) << "</td><td>" << score_cell(*r) << "</td>";
      for (const auto& c : t.columns) {
        bool has;
        std::string v = value_of(r, c, has);
        os << "<td>" << (has ? v : "&ndash;") << "</td>";
      }
      os << "</tr>\n";
    }
    os << "</tbody></table>\n";
    for (const auto& [cols, how] : legend(t)) {
      os << "<p>";
      for (std::size_t i = 0; i < cols.size(); ++i) os << (i ? ", " : "") << "<b>" << xml_escape(cols[i]) << "</b>";
      os << ": " << xml_escape(how) << "</p>\n";
    }
  }
  os << "<script>\n"
     << "document.querySelectorAll('table.board').forEach(function(table){\n"
     << "  table.querySelectorAll('th').forEach(function(th, col){\n"
     << "    th.addEventListener('click', function(){\n"
     << "      var asc = !th.classList.contains('asc');\n"
     << "      table.querySelectorAll('th').forEach(function(h){h.classList.remove('asc','desc');});\n"
     << "      th.classList.add(asc ? 'asc' : 'desc');\n"
     << "      var num = th.dataset.type === 'num';\n"
     << "      var body = table.tBodies[0];\n"
     << "      var rows = Array.prototype.slice.call(body.rows);\n"
     << "      rows.sort(function(a, b){\n"
     << "        var x = a.cells[col].textContent, y = b.cells[col].textContent;\n"
     << "        if (num) { x = parseFloat(x); y = parseFloat(y); if (isNaN(x)) x = -Infinity; if (isNaN(y)) y = -Infinity;\n"
     << "          return asc ? x - y : y - x; }\n"
     << "        return asc ? x.localeCompare(y) : y.localeCompare(x);\n"
     << "      });\n"
     << "      rows.forEach(function(r){ body.appendChild(r); });\n"
     << "    });\n  });\n});\n</script>\n</body></html>\n";
  return os.str();
}

std::string leaderboard_markdown(const std::vector<LeaderboardRow>& rows, const std::string& title) {
  std::ostringstream os;
  os << "# " << title << "\n\n";
  if (rows.empty()) os << "No results.\n";
  auto md = [](std::string s) {
    std::string out;
    for (char c : s) {
      if (c == '|') out += "\\|";
      else if (c == '<') out += "&lt;";
      else if (c == '>') out += "&gt;";
      else if (c == '&') out += "&amp;";
      else out += (c == '\n' ? ' ' : c);
    }
    return out;
  };
  for (const auto& t : tables(rows)) {
    os << "## Lab " << t.lab << "\n\n| rank | submission | score |";
    for (const auto& c : t.columns) os << " " << md(c) << (t.order.at(c) == "asc" ? " (lower is better)" : "") << " |";
    os << "\n|---:|:---|---:|";
    for (std::size_t i = 0; i < t.columns.size(); ++i) os << "---:|";
    os << "\n";
    int rank = 0;
    for (const auto* r : t.rows) {
      os << "| " << ++rank << " | " << md(r->submission) << " | " << score_cell(*r) << " |";
      for (const auto& c : t.columns) {
        bool has;
        std::string v = value_of(r, c, has);
        os << " " << (has ? v : "-") << " |";
      }
      os << "\n";
    }
    os << "\n";
    for (const auto& [cols, how] : legend(t)) {
      os << "- ";
      for (std::size_t i = 0; i < cols.size(); ++i) os << (i ? ", " : "") << "**" << md(cols[i]) << "**";
      os << ": " << md(how) << "\n";
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace mls::grader
