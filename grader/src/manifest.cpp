#include "mls/grader/manifest.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "mls/common/error.hpp"
#include "mls/grader/util.hpp"

namespace mls::grader {

using nlohmann::json;

const char* to_string(Visibility v) {
  switch (v) {
    case Visibility::Visible: return "visible";
    case Visibility::Hidden: return "hidden";
    case Visibility::AfterDueDate: return "after_due_date";
  }
  return "visible";
}

double round_points(double v) { return std::round(v * 100.0) / 100.0; }

std::vector<double> split_points(double points, std::size_t n) {
  std::vector<double> shares;
  if (n == 0) return shares;
  const auto hundredths = static_cast<long long>(std::llround(points * 100.0));
  const auto count = static_cast<long long>(n);
  for (long long i = 0; i < count; ++i)
    shares.push_back(static_cast<double>(hundredths / count + (i < hundredths % count ? 1 : 0)) / 100.0);
  return shares;
}

double Manifest::total_points() const {
  double t = 0;
  for (const auto& g : groups) t += g.points;
  return round_points(t);
}

const Group* Manifest::group(const std::string& name) const {
  for (const auto& g : groups)
    if (g.name == name) return &g;
  return nullptr;
}

std::string Manifest::graded_program(const std::string& program) const {
  return oracle_free ? program + "_graded" : program;
}

std::vector<std::string> Manifest::test_binaries() const {
  std::vector<std::string> out = {test_binary};
  for (const auto& g : groups)
    if (!g.binary.empty() && std::find(out.begin(), out.end(), g.binary) == out.end()) out.push_back(g.binary);
  return out;
}

namespace {

struct Ctx {
  std::string source;
  [[noreturn]] void bad(const std::string& field, const std::string& what) const {
    mls::fail(source, ": field '", field, "': ", what);
  }
};

const json& need(const Ctx& c, const json& j, const std::string& key, const std::string& path) {
  if (!j.is_object() || !j.contains(key)) c.bad(path + key, "is missing");
  return j.at(key);
}

std::string get_string(const Ctx& c, const json& j, const std::string& key, const std::string& path,
                       bool required = true, const std::string& def = "") {
  if (!j.contains(key)) {
    if (required) c.bad(path + key, "is missing");
    return def;
  }
  const json& v = j.at(key);
  if (!v.is_string()) c.bad(path + key, "must be a string");
  return v.get<std::string>();
}

double get_number(const Ctx& c, const json& j, const std::string& key, const std::string& path,
                  std::optional<double> def) {
  if (!j.contains(key)) {
    if (!def) c.bad(path + key, "is missing");
    return *def;
  }
  const json& v = j.at(key);
  if (!v.is_number()) c.bad(path + key, "must be a number");
  return v.get<double>();
}

std::vector<std::string> get_strings(const Ctx& c, const json& j, const std::string& key,
                                     const std::string& path, bool required) {
  std::vector<std::string> out;
  if (!j.contains(key)) {
    if (required) c.bad(path + key, "is missing");
    return out;
  }
  const json& v = j.at(key);
  if (!v.is_array()) c.bad(path + key, "must be an array of strings");
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) c.bad(path + key + "[" + std::to_string(i) + "]", "must be a string");
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

void check_relative(const Ctx& c, const std::string& field, const std::string& p) {
  if (p.empty() || p.front() == '/' || p.find("..") != std::string::npos || p.find('\\') != std::string::npos)
    c.bad(field, "'" + p + "' must be a relative path inside the repository, without '..'");
}

bool get_bool(const Ctx& c, const json& j, const std::string& key, const std::string& path, bool def) {
  if (!j.contains(key)) return def;
  const json& v = j.at(key);
  if (!v.is_boolean()) c.bad(path + key, "must be true or false");
  return v.get<bool>();
}

Visibility parse_visibility(const Ctx& c, const std::string& field, const std::string& s) {
  if (s == "visible") return Visibility::Visible;
  if (s == "hidden") return Visibility::Hidden;
  if (s == "after_due_date") return Visibility::AfterDueDate;
  c.bad(field, "'" + s + "' is not one of visible, hidden, after_due_date");
}

}  // namespace

Manifest parse_manifest(const json& j, const std::string& source) {
  Ctx c{source};
  if (!j.is_object()) mls::fail(source, ": the manifest must be a JSON object");
  static const std::set<std::string> known = {"lab", "dir", "title", "test_binary", "student_files",
                                              "hidden_files", "time_limit_s", "memory_limit_mb",
                                              "build_time_limit_s", "build_memory_limit_mb", "student_opt", "oracle_free", "groups", "benchmarks",
                                              "build", "$comment"};
  for (const auto& [k, v] : j.items())
    if (!known.count(k)) c.bad(k, "is not a manifest field (known: lab, dir, title, test_binary, student_files, "
                                  "hidden_files, time_limit_s, memory_limit_mb, build_time_limit_s, build_memory_limit_mb, "
                                  "student_opt, oracle_free, groups, benchmarks, build)");
  Manifest m;
  const json& lab = need(c, j, "lab", "");
  if (!lab.is_number_integer() || lab.get<int>() < 0) c.bad("lab", "must be a non-negative integer");
  m.lab = lab.get<int>();
  m.dir = get_string(c, j, "dir", "");
  check_relative(c, "dir", m.dir);
  m.title = get_string(c, j, "title", "");
  m.test_binary = get_string(c, j, "test_binary", "");
  if (m.test_binary.empty()) c.bad("test_binary", "must not be empty");
  m.student_files = get_strings(c, j, "student_files", "", true);
  if (m.student_files.empty()) c.bad("student_files", "must list at least one file");
  std::set<std::string> seen_files, seen_base;
  for (const auto& f : m.student_files) {
    check_relative(c, "student_files", f);
    if (!seen_files.insert(f).second) c.bad("student_files", "'" + f + "' is listed twice");
  }
  m.hidden_files = get_strings(c, j, "hidden_files", "", false);
  for (const auto& f : m.hidden_files) check_relative(c, "hidden_files", f);
  m.time_limit_s = get_number(c, j, "time_limit_s", "", 20.0);
  if (!(m.time_limit_s > 0 && m.time_limit_s <= 3600)) c.bad("time_limit_s", "must be in (0, 3600]");
  m.memory_limit_mb = get_number(c, j, "memory_limit_mb", "", 4096.0);
  if (!(m.memory_limit_mb >= 64)) c.bad("memory_limit_mb", "must be at least 64");
  m.build_time_limit_s = get_number(c, j, "build_time_limit_s", "", 900.0);
  m.student_opt = get_string(c, j, "student_opt", "", false);
  m.oracle_free = get_bool(c, j, "oracle_free", "", false);
  if (!m.student_opt.empty() && m.student_opt != "reference")
    c.bad("student_opt", "'" + m.student_opt + "' is not 'reference' (the only value: grade this lab's student files at the "
                         "reference build's flags)");
  if (!(m.build_time_limit_s > 0 && m.build_time_limit_s <= 7200)) c.bad("build_time_limit_s", "must be in (0, 7200]");
  m.build_memory_limit_mb = get_number(c, j, "build_memory_limit_mb", "", 4096.0);
  if (!(m.build_memory_limit_mb >= 256)) c.bad("build_memory_limit_mb", "must be at least 256");

  const json& groups = need(c, j, "groups", "");
  if (!groups.is_array() || groups.empty()) c.bad("groups", "must be a non-empty array");
  std::set<std::string> names;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    std::string p = "groups[" + std::to_string(i) + "].";
    const json& g = groups[i];
    if (!g.is_object()) c.bad(p.substr(0, p.size() - 1), "must be an object");
    static const std::set<std::string> known_group = {"name", "match", "points", "visibility", "binary",
                                                      "gpu", "mpi", "given", "judge", "run_with", "functions",
                                                      "needs", "$comment"};
    for (const auto& [k, v] : g.items())
      if (!known_group.count(k))
        c.bad(p + k, "is not a group field (known: name, match, points, visibility, binary, gpu, mpi, given, judge, "
                     "run_with, functions, needs)");
    Group gr;
    gr.name = get_string(c, g, "name", p);
    if (!names.insert(gr.name).second) c.bad(p + "name", "'" + gr.name + "' is used twice");
    gr.match = get_string(c, g, "match", p);
    if (trim(gr.match).empty()) c.bad(p + "match", "must not be empty");
    gr.points = get_number(c, g, "points", p, std::nullopt);
    if (!(gr.points >= 0)) c.bad(p + "points", "must be >= 0");
    if (std::abs(gr.points * 100.0 - std::round(gr.points * 100.0)) > 1e-6)
      c.bad(p + "points", "must have at most 2 decimal places (each test's share is in hundredths of a point), not " +
                              json(gr.points).dump());
    gr.visibility = parse_visibility(c, p + "visibility", get_string(c, g, "visibility", p, false, "visible"));
    gr.binary = get_string(c, g, "binary", p, false, m.test_binary);
    if (trim(gr.binary).empty()) c.bad(p + "binary", "must not be empty");
    gr.gpu = get_bool(c, g, "gpu", p, false);
    gr.mpi = get_bool(c, g, "mpi", p, false);
    if (gr.gpu && gr.mpi) c.bad(p + "mpi", "a group is gpu or mpi, not both");
    gr.given = get_bool(c, g, "given", p, false);
    gr.run_with = get_string(c, g, "run_with", p, false, "");
    if (g.contains("run_with") && (trim(gr.run_with).empty() || gr.run_with.find_first_of("\"\n\r") != std::string::npos))
      c.bad(p + "run_with", "must be one line of command words, without quotes (e.g. \"lab5_parallel/tests/run_mpi.sh 2\")");
    gr.functions = get_strings(c, g, "functions", p, false);
    gr.needs = get_strings(c, g, "needs", p, false);
    for (const auto& f : gr.functions)
      if (trim(f).empty() || f.find_first_of(" \t\n\"") != std::string::npos)
        c.bad(p + "functions", "'" + f + "' is not a function name (the name MLS_TODO gives a region, e.g. \"Tensor::permute\")");
    const std::string judge = get_string(c, g, "judge", p, false, "differential");
    if (judge == "differential") gr.judge = Judge::Differential;
    else if (judge == "local_only") gr.judge = Judge::LocalOnly;
    else c.bad(p + "judge", "must be 'differential' or 'local_only', not '" + judge + "'");
    m.groups.push_back(gr);
  }
  for (std::size_t i = 0; i < m.groups.size(); ++i)
    for (const auto& n : m.groups[i].needs)
      if (n == m.groups[i].name || !names.count(n))
        c.bad("groups[" + std::to_string(i) + "].needs",
              "'" + n + "' is " + (n == m.groups[i].name ? "the group itself" : "not a group of this lab") +
                  " (needs names other groups)");
  if (j.contains("benchmarks")) {
    const json& bs = j.at("benchmarks");
    if (!bs.is_array()) c.bad("benchmarks", "must be an array");
    for (std::size_t i = 0; i < bs.size(); ++i) {
      std::string p = "benchmarks[" + std::to_string(i) + "].";
      const json& b = bs[i];
      Benchmark bm;
      bm.name = get_string(c, b, "name", p);
      bm.binary = get_string(c, b, "binary", p);
      bm.filter = get_string(c, b, "filter", p, false, "");
      bm.metric = get_string(c, b, "metric", p, false, "ratio");
      bm.peer = get_string(c, b, "peer", p, false, "");
      bm.order = get_string(c, b, "order", p, false, "desc");
      bm.check = get_string(c, b, "check", p, false, "");
      if (bm.order != "asc" && bm.order != "desc") c.bad(p + "order", "must be 'asc' or 'desc'");
      if (bm.metric == "ratio" && bm.peer.empty()) c.bad(p + "peer", "is needed when metric is 'ratio'");
      m.benchmarks.push_back(bm);
    }
  }
  if (j.contains("build")) {
    const json& b = j.at("build");
    if (!b.is_object()) c.bad("build", "must be an object");
    DirectBuild d;
    d.sources = get_strings(c, b, "sources", "build.", true);
    d.include_dirs = get_strings(c, b, "include_dirs", "build.", false);
    d.flags = get_strings(c, b, "flags", "build.", false);
    for (const auto& s : d.sources) check_relative(c, "build.sources", s);
    for (const auto& s : d.include_dirs) check_relative(c, "build.include_dirs", s);
    for (const auto& f : d.flags)
      if (f.empty() || f[0] != '-' || f.find(' ') != std::string::npos)
        c.bad("build.flags", "'" + f + "' must be one compiler option");
    m.build = d;
    for (std::size_t i = 0; i < m.groups.size(); ++i)
      if (m.groups[i].binary != m.test_binary)
        c.bad("groups[" + std::to_string(i) + "].binary",
              "a lab with a direct 'build' section has one test program, '" + m.test_binary + "'");
  }
  return m;
}

Manifest load_manifest(const fs::path& file) {
  std::string text = read_file(file);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    mls::fail(file.string(), ": not valid JSON: ", e.what());
  }
  Manifest m = parse_manifest(j, file.string());
  m.path = fs::absolute(file).lexically_normal();
  return m;
}

std::vector<Manifest> discover_labs(const fs::path& root) {
  std::vector<Manifest> labs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    std::string name = e.path().filename().string();
    if (!e.is_directory() || !starts_with(name, "lab")) continue;
    fs::path f = e.path() / "lab.json";
    if (fs::is_regular_file(f)) labs.push_back(load_manifest(f));
  }
  std::sort(labs.begin(), labs.end(), [](const Manifest& a, const Manifest& b) { return a.lab < b.lab; });
  for (std::size_t i = 1; i < labs.size(); ++i)
    MLS_CHECK(labs[i].lab != labs[i - 1].lab, "discover_labs: lab ", labs[i].lab, " is declared by both ",
              labs[i - 1].path.string(), " and ", labs[i].path.string());
  return labs;
}

Manifest find_lab(const fs::path& root, int n) {
  auto labs = discover_labs(root);
  std::string have;
  for (const auto& m : labs) {
    if (m.lab == n) return m;
    have += (have.empty() ? "" : ", ") + std::to_string(m.lab);
  }
  mls::fail("no lab ", n, " in ", root.string(), " (labs with a lab.json: ", have.empty() ? "none" : have, ")");
}

}  // namespace mls::grader
