#include "mls/grader/intake.hpp"

#include <sys/stat.h>

#include <cctype>
#include <map>
#include <set>

#include "mls/grader/util.hpp"

namespace mls::grader {

std::string strip_comments_and_strings(std::string_view s) {
  std::string out(s);
  std::size_t i = 0, n = s.size();
  auto blank = [&](std::size_t a, std::size_t b) {
    for (std::size_t k = a; k < b && k < n; ++k)
      if (out[k] != '\n') out[k] = ' ';
  };
  while (i < n) {
    char c = s[i];
    if (c == '/' && i + 1 < n && s[i + 1] == '/') {
      std::size_t e = s.find('\n', i);
      if (e == std::string_view::npos) e = n;
      blank(i, e);
      i = e;
    } else if (c == '/' && i + 1 < n && s[i + 1] == '*') {
      std::size_t e = s.find("*/", i + 2);
      e = (e == std::string_view::npos) ? n : e + 2;
      blank(i, e);
      i = e;
    } else if (c == 'R' && i + 1 < n && s[i + 1] == '"' && (i == 0 || !std::isalnum(static_cast<unsigned char>(s[i - 1])))) {
      std::size_t open = s.find('(', i + 2);
      if (open == std::string_view::npos) break;
      std::string delim = ")" + std::string(s.substr(i + 2, open - i - 2)) + "\"";
      std::size_t e = s.find(delim, open);
      e = (e == std::string_view::npos) ? n : e + delim.size();
      blank(i + 1, e);
      i = e;
    } else if (c == '"' || c == '\'') {
      std::size_t k = i + 1;
      while (k < n && s[k] != c && s[k] != '\n') k += (s[k] == '\\') ? 2 : 1;
      blank(i + 1, std::min(k, n));
      i = k + 1;
    } else {
      ++i;
    }
  }
  return out;
}

std::vector<std::string> forbidden_symbols(std::string_view source) {
  std::vector<std::string> why;
  std::set<std::string> seen;
  auto add = [&](const std::string& s) {
    if (seen.insert(s).second) why.push_back(s);
  };
  // Includes first (a quoted include is a string literal, blanked below).
  for (const auto& line : split(source, '\n')) {
    std::string_view l = trim(line);
    if (!starts_with(l, "#")) continue;
    std::string low(l);
    for (auto& ch : low) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (low.find("include") != std::string::npos && low.find("catch") != std::string::npos)
      add("includes Catch2 (" + std::string(l) + "): student files may not use the test framework");
  }
  std::string code = strip_comments_and_strings(source);
  static const std::map<std::string, std::string> banned = {
      {"main", "defines or names `main`: the test program has its own main (rename the function)"},
      {"Catch", "uses the Catch2 namespace"},
      {"TEST_CASE", "defines Catch2 test cases"},
      {"CATCH_REGISTER_LISTENER", "registers a Catch2 listener"},
      {"TestEventListenerBase", "defines a Catch2 listener"},
      {"CATCH_CONFIG_MAIN", "defines the Catch2 main"},
      {"CATCH_CONFIG_RUNNER", "defines a Catch2 runner"},
      {"mls_grader_harness", "uses the grader harness's symbols"},
      {"MLS_GRADER_FD", "uses the grader harness's channel"},
  };
  std::size_t i = 0, n = code.size();
  while (i < n) {
    if (!(std::isalpha(static_cast<unsigned char>(code[i])) || code[i] == '_')) {
      ++i;
      continue;
    }
    std::size_t b = i;
    while (i < n && (std::isalnum(static_cast<unsigned char>(code[i])) || code[i] == '_')) ++i;
    std::string id = code.substr(b, i - b);
    auto it = banned.find(id);
    if (it == banned.end()) continue;
    if (id == "main") {
      // `obj.main` / `p->main` name a member, not the program's main.
      std::size_t k = b;
      while (k > 0 && std::isspace(static_cast<unsigned char>(code[k - 1]))) --k;
      if (k > 0 && (code[k - 1] == '.' || (k > 1 && code[k - 1] == '>' && code[k - 2] == '-'))) continue;
    }
    add(it->second);
  }
  return why;
}

IntakeReport intake_submission(const fs::path& submission, const Manifest& m) {
  IntakeReport r;
  std::error_code ec;
  if (!fs::is_directory(submission, ec)) {
    r.errors.push_back("the submission '" + submission.string() + "' is not a folder");
    return r;
  }
  std::map<std::string, int> base_count;
  for (const auto& f : m.student_files) base_count[fs::path(f).filename().string()]++;
  std::set<std::string> used;  // submission paths taken
  for (const auto& rel : m.student_files) {
    std::vector<fs::path> candidates = {submission / rel};
    std::string base = fs::path(rel).filename().string();
    if (base_count[base] == 1) candidates.push_back(submission / base);
    bool found = false;
    for (const auto& c : candidates) {
      struct stat st {};
      if (::lstat(c.c_str(), &st) != 0) continue;
      found = true;
      std::string shown = fs::relative(c, submission, ec).generic_string();
      used.insert(shown);
      if (S_ISLNK(st.st_mode)) {
        r.notes.push_back("refused " + shown + ": it is a symbolic link (submit the file itself)");
        break;
      }
      if (!S_ISREG(st.st_mode)) {
        r.notes.push_back("refused " + shown + ": not a regular file");
        break;
      }
      if (static_cast<std::size_t>(st.st_size) > kMaxStudentFileBytes) {
        r.notes.push_back("refused " + shown + ": " + std::to_string(st.st_size) + " bytes is over the limit of " +
                          std::to_string(kMaxStudentFileBytes));
        break;
      }
      std::string text = read_file(c);
      if (text.find('\0') != std::string::npos) {
        r.notes.push_back("refused " + shown + ": a binary file (object files are not accepted; submit source)");
        break;
      }
      for (const auto& why : forbidden_symbols(text)) r.errors.push_back(shown + ": " + why);
      r.accepted.push_back({rel, c});
      break;
    }
    if (!found || r.accepted.empty() || r.accepted.back().rel != rel) {
      if (!found) r.notes.push_back("missing " + rel + ": the handout stub is used (its tests score 0)");
      r.missing.push_back(rel);
    }
  }
  // Everything else in the submission is ignored; say so (a few names).
  std::size_t ignored = 0;
  std::vector<std::string> shown;
  for (auto it = fs::recursive_directory_iterator(submission, ec); it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    if (it->is_directory(ec) && !it->is_symlink(ec)) continue;
    std::string rel = fs::relative(it->path(), submission, ec).generic_string();
    if (used.count(rel)) continue;
    ++ignored;
    if (shown.size() < 8) shown.push_back(rel);
  }
  if (ignored > 0) {
    std::string s = "ignored " + std::to_string(ignored) + " file(s) not in the lab's student files:";
    for (const auto& x : shown) s += " " + x;
    if (ignored > shown.size()) s += " ...";
    r.notes.push_back(s);
  }
  return r;
}

}  // namespace mls::grader
