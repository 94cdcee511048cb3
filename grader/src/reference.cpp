// The reference side of differential grading: the instructor's build of a lab (cached by the
// content of its tree, with the commands a submission's build replays) and its observation
// streams under the grading's secret salt.
#include "mls/grader/reference.hpp"

#include <algorithm>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "grade_internal.hpp"
#include "mls/common/error.hpp"
#include "mls/grader/grade.hpp"  // GradeOptions
#include "mls/grader/util.hpp"

namespace mls::grader {

using namespace detail;


namespace {

/// A content hash of a folder tree (relative paths and bytes, in sorted order).
std::string tree_hash(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string all;
  for (const auto& f : files) {
    all += fs::relative(f, dir).generic_string() + "\n";
    all += fnv1a_hex(read_file(f)) + "\n";
  }
  return fnv1a_hex(all);
}

nlohmann::json programs_to_json(const TestPrograms& p) {
  nlohmann::json j;
  for (const auto& [k, v] : p.built) j["built"][k] = v.string();
  for (const auto& [k, v] : p.not_configured) j["not_configured"][k] = v;
  for (const auto& [k, v] : p.failed) j["failed"][k] = v;
  return j;
}
TestPrograms programs_from_json(const nlohmann::json& j) {
  TestPrograms p;
  if (j.contains("built"))
    for (const auto& [k, v] : j["built"].items()) p.built[k] = v.get<std::string>();
  if (j.contains("not_configured"))
    for (const auto& [k, v] : j["not_configured"].items()) p.not_configured[k] = v.get<std::string>();
  if (j.contains("failed"))
    for (const auto& [k, v] : j["failed"].items()) p.failed[k] = v.get<std::string>();
  return p;
}

}  // namespace

fs::path reference_cache_dir(const BuildOptions& opt) {
  return (opt.cache_dir.empty() ? default_binary_dir() / "grader-cache" : opt.cache_dir) / "reference";
}

BuildResult build_reference(const Manifest& m, const BuildOptions& opt) {
  auto t0 = Clock::now();
  fs::path cache = reference_cache_dir(opt);
  fs::create_directories(cache);
  fs::permissions(cache, fs::perms(0755));
  fs::path staging = cache / ("staging-" + std::to_string(::getpid()) + "-" + random_hex(4));
  remove_tree(staging);
  copy_reference_tree(opt.root, m, staging);
  // A direct build links the grader's harness and common archives: they are part of the key.
  std::string libs;
  if (m.build) {
    for (const auto& lib : {opt.harness_lib, opt.common_lib})
      if (!lib.empty() && fs::exists(lib)) libs += fnv1a_hex(read_file(lib));
    // The manifest's recipe too: its lab.json may live outside the tree (--manifest FILE).
    for (const auto* list : {&m.build->sources, &m.build->include_dirs, &m.build->flags})
      for (const auto& s : *list) libs += s + "\n";
  }
  libs += m.test_binary + "\n";
  for (const auto& s : m.student_files) libs += s + "\n";
  const std::string key = "lab" + std::to_string(m.lab) + "-" + fnv1a_hex(tree_hash(staging) + libs) + (opt.werror ? "-werror" : "") + (opt.benchmarks ? "-bench" : "") + (m.oracle_free ? "-graded" : "") + "-r4";
  fs::path dir = cache / key;
  fs::path stamp = dir / "programs.json";
  // One builder per key: concurrent graders (a parallel test suite, two batches) wait here.
  struct Lock {
    int fd = -1;
    explicit Lock(const fs::path& p) {
      fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
      if (fd >= 0) ::flock(fd, LOCK_EX);
    }
    ~Lock() {
      if (fd >= 0) ::close(fd);
    }
  } lock(cache / (key + ".lock"));
  BuildResult b;
  if (fs::exists(stamp)) {
    try {
      auto j = nlohmann::json::parse(read_file(stamp));
      b.programs = programs_from_json(j.at("programs"));
      b.recipe = recipe_from_json(j.at("recipe"));
      b.ok = b.programs.built.count(m.test_binary) > 0;
      for (const auto& [k, v] : b.programs.built) b.ok = b.ok && fs::exists(v);
      if (b.ok) {
        remove_tree(staging);
        b.binary = b.programs.built.at(m.test_binary);
        b.log = "reference build reused: " + dir.string() + "\n";
        b.wall_s = since(t0);
        return b;
      }
    } catch (const std::exception&) {
    }
  }
  remove_tree(dir);
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms(0755));
  fs::rename(staging, dir / "src");
  BuildOptions bo = opt;
  bo.trusted = true;  // the instructor's own code: built as the grader's user, hidden tests included
  // bo.benchmarks as asked: with it, the recipe links a submission's benchmark programs too (grade --bench)
  b = build_lab(m, dir / "src", dir / "build", bo);
  if (b.ok && !m.build) b.recipe = ninja_recipe(dir / "src", dir / "build", b.programs);
  if (b.ok) write_file_atomic(stamp, nlohmann::json{{"programs", programs_to_json(b.programs)}, {"recipe", recipe_to_json(b.recipe)}}.dump(2));
  b.wall_s = since(t0);
  return b;
}

std::shared_ptr<Reference> built_reference(const Manifest& m, const GradeOptions& opt) {
  auto ref = std::make_shared<Reference>();
  BuildOptions bo = opt.build;
  bo.benchmarks = bo.benchmarks || opt.bench;  // grade --bench links the benchmark programs too
  ref->build = build_reference(m, bo);
  if (!ref->build.ok)
    throw ReferenceBuildFailed("the reference build of lab " + std::to_string(m.lab) +
                               " failed (a grader or course problem, not the submission's):\n" +
                               summarize_build_log(ref->build.log));
  return ref;
}

std::shared_ptr<Reference> prepare_reference(const Manifest& m, const GradeOptions& opt) {
  auto t0 = Clock::now();
  std::shared_ptr<Reference> ref = record_reference(m, opt, built_reference(m, opt));
  ref->seconds = since(t0);
  return ref;
}

std::shared_ptr<Reference> record_reference(const Manifest& m, const GradeOptions& opt, std::shared_ptr<Reference> ref) {
  auto t0 = Clock::now();
  ref->salt = opt.salt ? opt.salt : fresh_salt();
  RunOptions ro = opt.run;
  ro.filter.clear();
  ref->plan = plan_tests(ref->build.programs, m, ro);
  ReachablePrograms local(ref->build.programs, opt.run, "ref-");
  const std::size_t n = ref->plan.jobs.size();
  ref->cases.resize(n);
  // Two runs per test with the grading's salt; a test the reference fails under a salt (e.g. a
  // worked example tied to seed 0) is run unsalted, in both builds.
  // The first run is kept, the second merged into it as it arrives (never held: a test that
  // observes millions of values costs one copy of them).
  auto runs_with = [&](std::size_t i, std::uint64_t salt, CaseRun& a, CaseRun& b, std::optional<ReferenceMerger>& merger) {
    local.record_twice(ref->plan.jobs[i], m, salt, a, b, merger);
  };
  for_each_parallel(n, opt.run.jobs, [&](std::size_t i) {
    ReferenceCase& c = ref->cases[i];
    CaseRun a, b;
    std::optional<ReferenceMerger> merger;
    c.salt = ref->salt;
    runs_with(i, c.salt, a, b, merger);
    if (a.result.outcome != Outcome::Pass && a.result.outcome != Outcome::Skipped) {
      c.salt = 0;
      runs_with(i, 0, a, b, merger);
    }
    c.outcome = a.result.outcome;
    c.channel_bytes = std::max(a.channel_bytes, b.channel_bytes);
    if (a.result.outcome == Outcome::Skipped) return;
    if (a.result.outcome != Outcome::Pass || b.result.outcome != Outcome::Pass) {
      c.problem = "the reference build does not pass this test (" + std::string(to_string(a.result.outcome)) + ", " +
                  to_string(b.result.outcome) + "): " + a.result.message + b.result.message;
      return;
    }
    std::string problem;
    auto merged = merger->result(problem);
    if (!merged) {
      c.problem = "the test is nondeterministic: " + problem;
      return;
    }
    c.stream = std::move(*merged);
    c.ok = true;
  });
  ref->seconds = since(t0);
  return ref;
}

}  // namespace mls::grader
