#include "mls/grader/strip.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <set>

#include "mls/common/error.hpp"
#include "mls/grader/util.hpp"

namespace mls::grader {

namespace {
// Spelled in two pieces so that this file holds no marker line itself.
constexpr std::string_view kBegin = "// BEGIN " "SOLUTION";
constexpr std::string_view kEnd = "// END " "SOLUTION";

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines = split(text, '\n');
  return lines;  // the last element is "" when text ends with '\n'
}

bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

constexpr std::string_view kStudentHeader = "// Student file of lab ";

/// `text` with its first line replaced by `line` (the rest, its line breaks included, as it was).
std::string with_first_line(std::string_view text, const std::string& line) {
  std::size_t eol = text.find('\n');
  return line + std::string(eol == std::string_view::npos ? std::string_view{} : text.substr(eol));
}
}  // namespace

int student_header_lab(std::string_view line) {
  if (!starts_with(line, kStudentHeader)) return -1;
  std::size_t i = kStudentHeader.size();
  int n = 0;
  bool digits = false;
  while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i])) && n < 100000) {
    n = n * 10 + (line[i++] - '0');
    digits = true;
  }
  return digits && i < line.size() && line[i] == ':' ? n : -1;
}

std::string handout_student_header(int lab, bool stripped, std::string_view lab_prefix) {
  const std::string n = std::to_string(lab);
  if (!stripped)
    return std::string(kStudentHeader) + n + ": given complete here, as lab " + n +
           "'s reference solution (later labs build on it; lab " + n + "'s own handout has stubs in its place).";
  const std::string prefix = lab_prefix.empty() ? "lab" + n : std::string(lab_prefix);
  return std::string(kStudentHeader) + n + ": replace each MLS_TODO(\"" + prefix +
         ": <function>\") with that function's body (it throws \"not implemented\" until then); mls-grader grades this file.";
}

bool is_begin_marker(std::string_view line) { return starts_with(trim(line), kBegin); }
bool is_end_marker(std::string_view line) { return starts_with(trim(line), kEnd); }
bool contains_marker_text(std::string_view text) {
  return text.find("BEGIN SOLUTION") != std::string_view::npos || text.find("END SOLUTION") != std::string_view::npos;
}

std::string enclosing_function(const std::vector<std::string>& lines, std::size_t line_index) {
  static const std::set<std::string> keywords = {"if", "for", "while", "switch", "return", "catch", "sizeof",
                                                 "decltype", "static_assert", "alignof", "MLS_CHECK", "do"};
  // Walk back to the nearest line that opens a body, then read the name before its '('. The
  // signature may span lines: join up to 6 lines ending at the '{' line.
  std::size_t depth_needed = 1;
  (void)depth_needed;
  for (std::size_t k = line_index; k-- > 0;) {
    std::string_view t = trim(lines[k]);
    if (t.empty() || t.back() != '{') continue;
    std::string sig;
    for (std::size_t s = (k >= 5 ? k - 5 : 0); s <= k; ++s) {
      std::string_view ls = trim(lines[s]);
      if (s < k && (ls.empty() || ls.back() == ';' || ls.back() == '}' || ls.back() == '{' ||
                    starts_with(ls, "//") || starts_with(ls, "#"))) {
        sig.clear();
        continue;
      }
      sig += std::string(ls) + " ";
    }
    // Attributes are not the signature: `__attribute__((target("avx2"))) static void f(`.
    for (std::size_t a; (a = sig.find("__attribute__")) != std::string::npos;) {
      std::size_t i = sig.find('(', a);
      if (i == std::string::npos) break;
      int depth = 0;
      std::size_t j = i;
      for (; j < sig.size(); ++j) {
        if (sig[j] == '(') ++depth;
        else if (sig[j] == ')' && --depth == 0) break;
      }
      sig.erase(a, j + 1 - a);
    }
    std::size_t paren = sig.find('(');
    if (paren == std::string::npos) {
      // `} else {`, `do {`, `try {`: a block inside the function, keep walking back; a namespace,
      // class, struct or enum: not inside a function.
      std::string_view st = trim(sig);
      const bool block = st.find("else") != std::string_view::npos || st == "do {" || st == "try {" || st == "{";
      if (block) continue;
      return "";
    }
    std::size_t e = paren;
    while (e > 0 && sig[e - 1] == ' ') --e;
    std::size_t b = e;
    while (b > 0 && (is_ident(sig[b - 1]) || sig[b - 1] == ':' || sig[b - 1] == '~')) --b;
    std::string name = sig.substr(b, e - b);
    // operator overloads: `Tensor::operator+(`
    if (b == e || name.empty()) {
      std::size_t op = sig.rfind("operator", e);
      if (op != std::string::npos && op < e) {
        std::size_t nb = op;
        while (nb > 0 && (is_ident(sig[nb - 1]) || sig[nb - 1] == ':')) --nb;
        name = std::string(trim(sig.substr(nb, e - nb)));
      }
    }
    if (name.empty() || keywords.count(name)) continue;
    if (name.find("operator") != std::string::npos && name.size() <= 10) {
      std::size_t nb = sig.rfind("operator", e);
      while (nb > 0 && (is_ident(sig[nb - 1]) || sig[nb - 1] == ':')) --nb;
      name = std::string(trim(sig.substr(nb, e - nb)));
    }
    return name;
  }
  return "";
}

StripResult strip_solutions(std::string_view text, std::string_view file, std::string_view lab_prefix,
                            const std::function<bool(const std::string&)>& which) {
  std::vector<std::string> lines = split_lines(text);
  StripResult r;
  std::string out, kept;  // kept: the current region's lines, for a region `which` leaves as it is
  std::size_t begin_line = 0;
  bool inside = false;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    bool last = (i + 1 == lines.size());
    if (is_begin_marker(line)) {
      if (inside)
        mls::fail(file, ":", i + 1, ": nested '", kBegin, "' (the region opened at line ", begin_line + 1,
                  " is not closed)");
      inside = true;
      begin_line = i;
      kept.clear();
      continue;
    }
    if (is_end_marker(line)) {
      if (!inside) mls::fail(file, ":", i + 1, ": '", kEnd, "' without a '", kBegin, "' before it");
      inside = false;
      std::string_view begin = lines[begin_line];
      std::string indent(begin.substr(0, begin.find_first_not_of(" \t")));
      std::string fn = enclosing_function(lines, begin_line);
      if (fn.empty()) {
        std::string base = std::string(file);
        std::size_t slash = base.rfind('/');
        if (slash != std::string::npos) base = base.substr(slash + 1);
        fn = base + ":" + std::to_string(begin_line + 1);
      }
      r.functions.push_back(fn);
      ++r.regions;
      if (which && !which(fn)) {
        out += kept;  // kept whole, without its marker lines
        continue;
      }
      r.stubbed.push_back(fn);
      out += indent + "MLS_TODO(\"" + std::string(lab_prefix) + ": " + fn + "\");\n";
      continue;
    }
    if (inside) {
      kept += line;
      kept += '\n';
      continue;
    }
    out += line;
    if (!last) out += '\n';
  }
  if (inside) mls::fail(file, ":", begin_line + 1, ": '", kBegin, "' is never closed by '", kEnd, "'");
  const int header_lab = lines.empty() ? -1 : student_header_lab(lines[0]);
  if (!r.stubbed.empty() && header_lab >= 0) out = with_first_line(out, handout_student_header(header_lab, true, lab_prefix));
  r.text = std::move(out);
  return r;
}

int lab_number_of_dir(std::string_view name) {
  if (!starts_with(name, "lab") || name.size() < 4 || !std::isdigit(static_cast<unsigned char>(name[3]))) return -1;
  int n = 0;
  std::size_t i = 3;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) n = n * 10 + (name[i++] - '0');
  if (i < name.size() && name[i] != '_') return -1;
  return n;
}

std::vector<std::vector<std::string>> checked_command_blocks(std::string_view markdown) {
  std::vector<std::vector<std::string>> blocks;
  bool marked = false, inside = false;
  for (const auto& line : split(markdown, '\n')) {
    std::string_view t = trim(line);
    if (inside) {
      if (starts_with(t, "```")) inside = false;
      else blocks.back().push_back(line);
    } else if (t == kCheckedCommandsMarker) {
      marked = true;
    } else if (marked && starts_with(t, "```")) {
      marked = false;
      inside = true;
      blocks.emplace_back();
    }
  }
  return blocks;
}

std::string first_test_name(std::string_view match, const std::vector<std::pair<std::string, std::string>>& sources) {
  // The spec's tags: "[a][b]" only.
  std::vector<std::string> tags;
  std::string_view spec = trim(match);
  while (!spec.empty()) {
    if (spec.front() != '[') return "";
    std::size_t close = spec.find(']');
    if (close == std::string_view::npos || close == 1) return "";
    tags.emplace_back(spec.substr(0, close + 1));
    spec = spec.substr(close + 1);
  }
  if (tags.empty()) return "";
  static constexpr std::string_view kUnsafe = ",[]*~\"\\$`!";
  static constexpr std::string_view kTestCase = "TEST_CASE(";
  for (const auto& [file, text] : sources) {
    (void)file;
    for (std::size_t at = text.find(kTestCase); at != std::string::npos; at = text.find(kTestCase, at + 1)) {
      if (at > 0 && is_ident(text[at - 1])) continue;  // e.g. METHOD_AS_TEST_CASE(
      // TEST_CASE("name", "tags"): two string literals, without escapes.
      std::size_t q1 = text.find_first_not_of(" \t\n", at + kTestCase.size());
      if (q1 == std::string::npos || text[q1] != '"') continue;
      std::size_t q2 = text.find('"', q1 + 1);
      if (q2 == std::string::npos) continue;
      std::string name = text.substr(q1 + 1, q2 - q1 - 1);
      std::size_t comma = text.find_first_not_of(" \t\n", q2 + 1);
      if (comma == std::string::npos || text[comma] != ',') continue;
      std::size_t t1 = text.find_first_not_of(" \t\n", comma + 1);
      if (t1 == std::string::npos || text[t1] != '"') continue;
      std::size_t t2 = text.find('"', t1 + 1);
      if (t2 == std::string::npos) continue;
      std::string_view test_tags(text.data() + t1 + 1, t2 - t1 - 1);
      bool all = true;
      for (const auto& tag : tags) all = all && test_tags.find(tag) != std::string_view::npos;
      if (!all || name.empty() || name != trim(name) || name.find_first_of(kUnsafe) != std::string::npos) continue;
      bool printable = true;
      for (char c : name) printable = printable && static_cast<unsigned char>(c) >= 0x20;
      if (printable) return name;
    }
  }
  return "";
}

namespace {

std::string format_points(double p) {
  char buf[32];
  if (p == static_cast<double>(static_cast<long long>(p))) std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(p));
  else std::snprintf(buf, sizeof buf, "%g", p);
  return buf;
}

/// "a", "a and b", "a, b and c".
std::string join_and(const std::vector<std::string>& items) {
  std::string s;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) s += (i + 1 == items.size()) ? " and " : ", ";
    s += items[i];
  }
  return s;
}

}  // namespace

std::string student_readme(const Manifest& m, const std::vector<Manifest>& labs, std::string_view writeup,
                           const std::vector<std::pair<std::string, std::string>>& test_sources) {
  const std::string n = std::to_string(m.lab);
  const std::string label = "lab" + n;
  const std::string handout = "handouts/lab" + n + "/README.md";
  const std::string program = "build/release/" + m.dir + "/" + m.test_binary;
  std::vector<std::string> earlier, parts;
  for (const auto& l : labs) {
    if (l.lab < m.lab) earlier.push_back("`" + l.dir + "/`");
    if (l.lab <= m.lab) parts.push_back(l.dir);
  }
  std::string md;
  md += "# Lab " + n + ": " + m.title + "\n\n";
  md += "This folder is the starter tree of lab " + n + " of mlsys-labs. `" + m.dir +
        "/` is the lab: each function you write has the body `MLS_TODO(\"" + label +
        ": <function>\")`, which throws `not implemented: " + label +
        ": <function>` until you replace it, so every test fails cleanly at first and turns green as you go.";
  if (!earlier.empty())
    md += " " + join_and(earlier) + (earlier.size() == 1 ? " is" : " are") +
          " given complete, as reference solutions: a lab builds on the earlier labs' reference, never on your own.";
  md += " `common/` is the code every lab shares, `grader/` the grader you run yourself.\n\n";
  md += "The write-up, what to build function by function with hints, is [`" + handout + "`](" + handout +
        "); each function's doc comment says what it must do, the shapes and a hint.\n\n";

  // Build and test: the write-up's own checked block that configures, which its CTest runs as written.
  std::vector<std::string> commands;
  for (const auto& block : checked_command_blocks(writeup)) {
    for (const auto& line : block)
      if (starts_with(trim(line), "cmake --preset ")) commands = block;
    if (!commands.empty()) break;
  }
  if (commands.empty()) {
    std::string targets;
    for (const auto& g : m.groups)
      if (!g.gpu && targets.find(g.binary.empty() ? m.test_binary : g.binary) == std::string::npos)
        targets += (g.binary.empty() ? m.test_binary : g.binary) + " ";
    if (targets.empty()) targets = m.test_binary + " ";
    std::string list;
    for (const auto& p : parts) list += (list.empty() ? "" : ";") + p;
    commands = {"cmake --preset release -DMLS_LABS=\"" + list + "\"",
                "cmake --build --preset release --target " + targets + "mls-grader",
                "ctest --preset release -L " + label};
  }
  auto has = [&](std::string_view needle) {
    for (const auto& c : commands)
      if (c.find(needle) != std::string::npos) return true;
    return false;
  };
  // One test by name, from the first group a student writes code for.
  const Group* pick = nullptr;
  std::string name;
  for (const auto& g : m.groups) {
    if (g.gpu || g.mpi || g.given || g.visibility == Visibility::Hidden) continue;
    if (!g.binary.empty() && g.binary != m.test_binary) continue;
    name = first_test_name(g.match, test_sources);
    if (!name.empty()) {
      pick = &g;
      break;
    }
  }
  if (pick != nullptr) {
    commands.push_back(program + " \"" + name + "\"   # one test, with every check it makes");
    commands.push_back(program + " \"" + name + "\" -a   # the same, stopping at its first failed check");
    commands.push_back(program + " \"" + pick->match + "\" -x 3   # a group, stopping after 3 failed checks");
  }
  const std::string grader_test = "build/release/bin/mls-grader test --lab " + n;
  if (!has(grader_test)) commands.push_back(grader_test + "   # the score, each test isolated as in grading");

  md += "## Build and test\n\n";
  md += "From this folder, after `scripts/setup.sh` has installed the packages once (Debian 12, as root or with "
        "sudo):\n\n";
  md += std::string(kCheckedCommandsMarker) + "\n```\n";
  for (const auto& c : commands) md += c + "\n";
  md += "```\n\n";
  md += "The first two lines configure this lab with the earlier labs it builds on, and build only the programs "
        "named. `ctest -L " + label + "` runs every test of the lab, one line each. Run the test program "
        "(`" + program + "`) yourself to see a test's checks in full, with what each one got and wanted; "
        "Catch2's `-a` stops at the first failed check, `-x N` after N, and `--list-tests \"[group]\"` lists "
        "a group's test names. `mls-grader test --lab " + n +
        "` runs each test in its own process with the grader's time limits, as grading does, and prints "
        "your score.\n\n";

  md += "## Submit\n\nOnly these files are graded (the grader takes them and nothing else; the rest comes from "
        "this tree as it is):\n\n";
  for (const auto& f : m.student_files) md += "- `" + f + "`\n";
  md += "\n";

  md += "## Points (from `" + m.dir + "/lab.json`)\n\n";
  md += "| group | tests | points | visibility | notes |\n|---|---|---:|---|---|\n";
  bool any_hidden = false, any_after = false, any_machine = false, any_local = false;
  for (const auto& g : m.groups) {
    std::vector<std::string> notes;
    if (g.given) notes.push_back("given: passes from the start");
    if (g.gpu) notes.push_back("needs a GPU");
    if (g.mpi) notes.push_back("runs under `mpirun`");
    if (!g.binary.empty() && g.binary != m.test_binary) notes.push_back("program `" + g.binary + "`");
    if (g.judge == Judge::LocalOnly) notes.push_back("judged by your own process: 0 points when graded");
    if (!g.functions.empty()) {
      std::string fs_text;
      for (const auto& f : g.functions) fs_text += (fs_text.empty() ? "`" : ", `") + f + "`";
      notes.push_back("yours: " + fs_text);
    }
    if (!g.needs.empty()) {
      std::string ns;
      for (const auto& x : g.needs) ns += (ns.empty() ? "" : ", ") + x;
      notes.push_back("needs the groups " + ns + " first");
    }
    any_hidden = any_hidden || g.visibility == Visibility::Hidden;
    any_after = any_after || g.visibility == Visibility::AfterDueDate;
    any_machine = any_machine || g.needs_machine();
    any_local = any_local || g.judge == Judge::LocalOnly;
    std::string notes_text;
    for (const auto& x : notes) notes_text += (notes_text.empty() ? "" : "; ") + x;
    std::string match = g.match;
    for (std::size_t i = 0; (i = match.find('|', i)) != std::string::npos; i += 2) match.replace(i, 1, "\\|");
    md += "| " + g.name + " | `" + match + "` | " + format_points(g.points) + " | " + to_string(g.visibility) + " | " +
          notes_text + " |\n";
  }
  md += "| **total** | | **" + format_points(m.total_points()) + "** | | |\n\n";
  md += "A group's points are split evenly among its tests.";
  if (std::any_of(m.groups.begin(), m.groups.end(), [](const Group& g) { return !g.functions.empty(); }))
    md += " \"yours\" names the functions a group's tests check; a group that needs others also calls their "
          "functions, so it passes once those do (`mls-grader check-groups --lab " + n + "` checks this table).";
  if (any_hidden) md += " A hidden group's tests are not in this tree: they run when your files are graded.";
  if (any_after) md += " An after_due_date group's results are shown after the due date.";
  if (any_machine)
    md += " Where a machine lacks what a group needs (a GPU, `mpirun`), its tests are SKIPPED and left out of the "
          "maximum, said in the score's total line; grading runs them where they can run.";
  if (any_local) md += " A group judged by your own process counts in `mls-grader test`, not in the grade.";
  md += "\n";
  return md;
}

namespace {

bool is_text_source(const fs::path& p) {
  static const std::set<std::string> exts = {".cpp", ".hpp", ".h", ".cc", ".cu", ".cuh", ".c", ".inl",
                                             ".txt", ".cmake", ".json", ".md", ".py", ".sh", ""};
  return exts.count(p.extension().string()) > 0;
}

void walk_files(const fs::path& dir, const fs::path& base, std::vector<std::string>& out) {
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, fs::directory_options::none, ec)) {
    auto st = e.symlink_status();
    if (!fs::is_regular_file(st)) continue;
    std::string rel = fs::relative(e.path(), base).generic_string();
    bool hidden_part = false;
    for (const auto& part : fs::path(rel)) {
      std::string s = part.string();
      hidden_part = hidden_part || (s.size() > 1 && s[0] == '.') || s == "__pycache__" || s == "build";
    }
    if (!hidden_part) out.push_back(rel);
  }
}

}  // namespace

HandoutReport make_handout(const fs::path& root, const std::vector<Manifest>& labs, int lab, const fs::path& out,
                           const HandoutOptions& opt) {
  const Manifest* target = nullptr;
  for (const auto& m : labs)
    if (m.lab == lab) target = &m;
  MLS_CHECK(target != nullptr, "handout: no manifest for lab ", lab);
  std::error_code ec;
  if (fs::exists(out)) {
    MLS_CHECK(fs::is_directory(out) && fs::is_empty(out, ec), "handout: '", out.string(),
              "' exists and is not an empty folder");
  }

  // Which files go in: root-level files, common/, scripts/, grader/, labs <= lab, handouts/labK.
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(root)) {
    std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || name == "build") continue;
    auto st = e.symlink_status();
    if (fs::is_regular_file(st)) {
      files.push_back(name);
      continue;
    }
    if (!fs::is_directory(st)) continue;
    int n = lab_number_of_dir(name);
    if (name == "common" || name == "scripts" || name == "grader" || (n >= 0 && n <= lab)) {
      walk_files(e.path(), root, files);
    } else if (name == "handouts") {
      for (const auto& h : fs::directory_iterator(e.path())) {
        std::string hn = h.path().filename().string();
        int k = lab_number_of_dir(hn);
        if (k >= 0 && k <= lab && h.is_directory()) walk_files(h.path(), root, files);
      }
    }
  }
  std::sort(files.begin(), files.end());

  std::set<std::string> hidden, to_strip, student_of_any;
  std::map<std::string, int> lab_of_student;
  for (const auto& m : labs) {
    if (m.lab > lab) continue;
    for (const auto& h : m.hidden_files) hidden.insert(h);
    for (const auto& s : m.student_files) {
      student_of_any.insert(s);
      lab_of_student[s] = m.lab;
      if (m.lab == lab || opt.strip_previous) to_strip.insert(s);
    }
  }

  HandoutReport rep;
  fs::create_directories(out);
  fs::permissions(out, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                          fs::perms::others_read | fs::perms::others_exec);
  // The student README in place of the instructor's: the write-up's commands, the lab's test
  // sources for a test name, the manifest for the rest.
  std::vector<std::pair<std::string, std::string>> test_sources;
  for (const auto& rel : files) {
    const std::string tests = target->dir + "/tests/";
    const std::string base = fs::path(rel).filename().string();
    if (starts_with(rel, tests) && rel.find('/', tests.size()) == std::string::npos && starts_with(base, "test_") &&
        fs::path(rel).extension() == ".cpp" && !hidden.count(rel))
      test_sources.emplace_back(rel, read_file(root / rel));
  }
  const fs::path writeup = root / "handouts" / ("lab" + std::to_string(lab)) / "README.md";
  std::vector<Manifest> in_tree;
  for (const auto& m : labs)
    if (m.lab <= lab) in_tree.push_back(m);
  write_file_atomic(out / "README.md",
                    student_readme(*target, in_tree, fs::exists(writeup) ? read_file(writeup) : std::string(), test_sources));
  rep.notes.push_back("README.md: the student README of lab " + std::to_string(lab) +
                      " (generated from its manifest and write-up; the instructor's README is left out)");

  for (const auto& rel : files) {
    if (rel == "README.md") continue;  // written above
    if (starts_with(rel, "grader/tests/")) continue;  // the grader's own adversarial suite stays out
    if (hidden.count(rel)) {
      rep.notes.push_back("left out hidden test file " + rel);
      continue;
    }
    fs::path src = root / rel;
    fs::path dst = out / rel;
    fs::create_directories(dst.parent_path());
    bool grader_file = starts_with(rel, "grader/");
    if (!grader_file && is_text_source(src)) {
      std::string text = read_file(src);
      if (to_strip.count(rel)) {
        std::string prefix = "lab" + std::to_string(lab_of_student[rel]);
        StripResult s = strip_solutions(text, rel, prefix);
        rep.regions += s.regions;
        rep.stripped_files.push_back(rel + " (" + std::to_string(s.regions) + " regions)");
        write_file_atomic(dst, s.text);
        continue;
      }
      if (student_of_any.count(rel)) {  // an earlier lab kept as reference: code stays, markers go
        write_file_atomic(dst, unmark_solutions(text, rel));
        continue;
      }
      bool has_marker_lines = false;
      for (const auto& l : split(text, '\n')) has_marker_lines = has_marker_lines || is_begin_marker(l) || is_end_marker(l);
      if (has_marker_lines && !student_of_any.count(rel))
        mls::fail("handout: ", rel, " has solution markers but is not a student file of any lab manifest; "
                  "add it to student_files or remove the markers");
    }
    copy_file_readable(src, dst);
  }
  for (const auto& s : to_strip)
    MLS_CHECK(fs::exists(out / s), "handout: student file ", s, " of lab ", lab_of_student[s], " does not exist");
  // Folders everyone may enter whatever the umask (the grading copy is built by a sandboxed uid).
  for (auto it = fs::recursive_directory_iterator(out); it != fs::recursive_directory_iterator(); ++it)
    if (fs::is_directory(it->symlink_status())) fs::permissions(it->path(), fs::perms(0755));
  return rep;
}

std::string unmark_solutions(std::string_view text, std::string_view file) {
  strip_solutions(text, file, "check");  // validates the markers (balanced, not nested)
  std::vector<std::string> lines = split_lines(text);
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (is_begin_marker(lines[i]) || is_end_marker(lines[i])) continue;
    out += lines[i];
    if (i + 1 < lines.size()) out += '\n';
  }
  const int header_lab = lines.empty() ? -1 : student_header_lab(lines[0]);
  if (header_lab >= 0) out = with_first_line(out, handout_student_header(header_lab, false));
  return out;
}

}  // namespace mls::grader
