#include "mls/grader/group_check.hpp"

#include <algorithm>
#include <cstdio>

#include "mls/common/error.hpp"
#include "mls/grader/grade.hpp"
#include "mls/grader/strip.hpp"
#include "mls/grader/util.hpp"

namespace mls::grader {
namespace fs = std::filesystem;

namespace {
std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}
std::string first_line(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  return line.size() > 300 ? line.substr(0, 300) + " ..." : line;
}
}  // namespace

std::vector<SolutionRegion> solution_regions(const Manifest& m, const fs::path& root) {
  std::vector<SolutionRegion> out;
  for (const auto& rel : m.student_files) {
    const fs::path p = root / rel;
    if (!fs::exists(p)) mls::fail("check-groups: student file ", rel, " of lab ", m.lab, " does not exist under ", root.string());
    for (const auto& fn : strip_solutions(read_file(p), rel, "lab" + std::to_string(m.lab)).functions)
      out.push_back({rel, fn});
  }
  return out;
}

std::vector<std::string> check_group_functions(const Manifest& m, const std::vector<SolutionRegion>& regions) {
  std::vector<std::string> problems;
  std::map<std::string, std::vector<std::string>> owners;  // function -> groups naming it
  for (const auto& g : m.groups) {
    if (g.given && !g.functions.empty())
      problems.push_back("group '" + g.name + "' is given (its code is complete in the handout) but names functions");
    for (const auto& f : g.functions) owners[f].push_back(g.name);
  }
  std::set<std::string> region_functions;
  for (const auto& r : regions) region_functions.insert(r.function);
  for (const auto& r : regions) {
    auto it = owners.find(r.function);
    if (it == owners.end())
      problems.push_back(r.file + ": the region of '" + r.function + "' belongs to no group (add it to a group's "
                         "\"functions\" in " + m.dir + "/lab.json)");
  }
  for (const auto& [f, gs] : owners) {
    if (gs.size() > 1) problems.push_back("'" + f + "' is named by several groups (" + join(gs, ", ") + "): one owns it, "
                                          "the others list that group in \"needs\"");
    if (!region_functions.count(f))
      problems.push_back("group '" + gs.front() + "' names '" + f + "', which is no solution region of the lab's "
                         "student files (the names are those MLS_TODO gives, e.g. \"Tensor::permute\")");
  }
  // Deduplicate (a function with two regions is reported once).
  std::sort(problems.begin(), problems.end());
  problems.erase(std::unique(problems.begin(), problems.end()), problems.end());
  return problems;
}

std::set<std::string> groups_affected_by(const Manifest& m, const std::string& group) {
  std::set<std::string> out{group};
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& g : m.groups)
      if (!out.count(g.name))
        for (const auto& n : g.needs)
          if (out.count(n)) {
            out.insert(g.name);
            grew = true;
            break;
          }
  }
  return out;
}

std::map<std::string, std::string> group_variant_files(const Manifest& m, const fs::path& root,
                                                       const std::vector<std::string>& functions) {
  const std::set<std::string> pick(functions.begin(), functions.end());
  std::map<std::string, std::string> files;
  for (const auto& rel : m.student_files) {
    StripResult s = strip_solutions(read_file(root / rel), rel, "lab" + std::to_string(m.lab),
                                    [&](const std::string& fn) { return pick.count(fn) > 0; });
    files[rel] = std::move(s.text);
  }
  return files;
}

GroupVerdict judge_group_variant(const Manifest& m, const std::string& group, const LabResult& r) {
  GroupVerdict v;
  v.group = group;
  const std::set<std::string> allowed = groups_affected_by(m, group);
  if (!r.built) {
    v.why = "the variant did not build: " + first_line(r.headline.empty() ? r.output : r.headline);
    return v;
  }
  int own_skipped = 0;
  for (const auto& t : r.tests) {
    const bool failed = t.outcome != Outcome::Pass && t.outcome != Outcome::Skipped;
    if (t.group == group) {
      ++v.own_tests;
      if (t.outcome == Outcome::Skipped || !t.counted) ++own_skipped;
      else if (failed) ++v.own_failed;
      continue;
    }
    if (!failed || !t.counted) continue;
    if (allowed.count(t.group)) v.dependents_failed.insert(t.group);
    else v.unexpected[t.group].push_back(t.name);
  }
  if (v.own_tests > 0 && own_skipped == v.own_tests) {
    v.skipped = true;
    return v;
  }
  if (!v.unexpected.empty()) {
    std::vector<std::string> gs;
    for (const auto& [g, tests] : v.unexpected) gs.push_back(g + " (" + std::to_string(tests.size()) + ")");
    v.why = "tests of other groups fail without '" + group + "''s functions: " + join(gs, ", ") +
            "; split those tests, or add \"" + group + "\" to each such group's \"needs\"";
  } else if (v.own_failed == 0) {
    v.why = "none of its " + std::to_string(v.own_tests) + " tests fails with its functions stubbed: they do not "
            "test those functions (fix \"functions\" in " + m.dir + "/lab.json)";
  }
  return v;
}

std::vector<GroupVerdict> check_groups(const Manifest& m, const fs::path& root, const GradeOptions& opt,
                                       const std::vector<std::string>& only, int parallel,
                                       const std::function<void(const GroupVerdict&)>& on_done) {
  for (const auto& name : only)
    if (std::none_of(m.groups.begin(), m.groups.end(), [&](const Group& g) { return g.name == name; }))
      mls::fail("check-groups: lab ", m.lab, " has no group '", name, "'");
  std::vector<const Group*> picked;
  for (const auto& g : m.groups)
    if (!g.functions.empty() && (only.empty() || std::find(only.begin(), only.end(), g.name) != only.end()))
      picked.push_back(&g);
  if (picked.empty()) mls::fail("check-groups: lab ", m.lab, " has no group with \"functions\" to check");
  const fs::path work = make_temp_dir("mls-check-groups");
  std::vector<fs::path> subs;
  for (const Group* g : picked) {
    const fs::path dir = work / g->name;
    for (const auto& [rel, text] : group_variant_files(m, root, g->functions)) {
      fs::create_directories((dir / rel).parent_path());
      write_file_atomic(dir / rel, text);
    }
    subs.push_back(dir);
  }
  std::vector<GroupVerdict> verdicts(picked.size());
  try {
    grade_batch(m, subs, opt, parallel, [&](std::size_t i, const LabResult& r) {
      // grade_batch calls this one at a time.
      GroupVerdict v = judge_group_variant(m, picked[i]->name, r);
      if (on_done) on_done(v);
      verdicts[i] = std::move(v);
    });
  } catch (...) {
    remove_tree(work);
    throw;
  }
  remove_tree(work);
  return verdicts;
}

std::string format_group_verdicts(const std::vector<GroupVerdict>& verdicts) {
  std::string out;
  int bad = 0;
  for (const auto& v : verdicts) {
    char line[512];
    const char* mark = v.skipped ? "SKIP" : v.ok() ? "ok  " : "FAIL";
    std::snprintf(line, sizeof line, "%s %-32s own tests failed %d/%d", mark, v.group.c_str(), v.own_failed, v.own_tests);
    out += line;
    if (!v.dependents_failed.empty())
      out += "; documented dependents failed: " + join(std::vector<std::string>(v.dependents_failed.begin(),
                                                                                 v.dependents_failed.end()), ", ");
    if (v.skipped) out += " (this machine cannot run them)";
    out += "\n";
    if (!v.ok()) {
      ++bad;
      out += "     " + v.why + "\n";
      for (const auto& [g, tests] : v.unexpected) {
        std::size_t shown = 0;
        for (const auto& t : tests) {
          if (++shown > 3) {
            out += "       ... and " + std::to_string(tests.size() - 3) + " more of " + g + "\n";
            break;
          }
          out += "       " + g + ": " + t + "\n";
        }
      }
    }
  }
  out += std::to_string(verdicts.size()) + " group(s) checked, " + std::to_string(bad) + " with problems\n";
  return out;
}

}  // namespace mls::grader
