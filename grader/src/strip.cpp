#include "mls/grader/strip.hpp"

#include <algorithm>
#include <cctype>
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
}  // namespace

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
    std::size_t paren = sig.find('(');
    if (paren == std::string::npos) return "";  // namespace, class, struct, enum: not inside a function
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

StripResult strip_solutions(std::string_view text, std::string_view file, std::string_view lab_prefix) {
  std::vector<std::string> lines = split_lines(text);
  StripResult r;
  std::string out;
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
      out += indent + "MLS_TODO(\"" + std::string(lab_prefix) + ": " + fn + "\");\n";
      ++r.regions;
      continue;
    }
    if (inside) continue;
    out += line;
    if (!last) out += '\n';
  }
  if (inside) mls::fail(file, ":", begin_line + 1, ": '", kBegin, "' is never closed by '", kEnd, "'");
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
  for (const auto& rel : files) {
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
  return out;
}

}  // namespace mls::grader
