// Running a lab's tests isolated (planning, then execution), differential verdicts, and the
// whole of `grade` for one submission.
#include "mls/grader/grade.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <unistd.h>

#include "grade_internal.hpp"
#include "mls/common/error.hpp"
#include "mls/common/grader_protocol.hpp"
#include "mls/grader/bench.hpp"
#include "mls/grader/differential.hpp"
#include "mls/grader/intake.hpp"
#include "mls/grader/strip.hpp"
#include "mls/grader/util.hpp"

namespace mls::grader {

namespace detail {

LabResult zero_result(const Manifest& m, const std::string& why, double t) {
  LabResult r;
  r.lab = m.lab;
  r.title = m.title;
  r.output = why;
  r.execution_time_s = t;
  for (const auto& g : m.groups) {
    TestResult tr;
    tr.name = g.name + " (all tests)";
    tr.group = g.name;
    tr.visibility = g.visibility;
    tr.outcome = Outcome::NoResult;
    tr.max_score = g.points;
    tr.message = "not run: " + why.substr(0, 300);
    r.tests.push_back(tr);
  }
  return r;
}

namespace {

SandboxSpec test_spec(const fs::path& binary, const Manifest& m, const fs::path& scratch, bool sanitized) {
  SandboxSpec s;
  s.cwd = scratch;
  s.env = minimal_env(scratch);
  s.limits.wall_s = m.time_limit_s;
  s.limits.cpu_s = m.time_limit_s * 2 + 1;  // threads may use several cores; the wall clock bounds time
  s.limits.address_space_mb = sanitized ? 0 : static_cast<std::size_t>(m.memory_limit_mb);
  s.argv = {binary.string()};
  return s;
}

}  // namespace

}  // namespace detail

using namespace detail;

std::vector<std::string> list_tests(const fs::path& binary, const std::string& spec, const Manifest& m) {
  fs::path scratch = make_temp_dir("mls-grader-list");
  SandboxSpec s = test_spec(fs::absolute(binary), m, scratch, binary_uses_sanitizer(binary));
  if (!spec.empty()) s.argv.push_back(spec);
  s.argv.insert(s.argv.end(), {"--rng-seed", "1234", "-w", "NoTests"});
  s.env.push_back("MLS_GRADER_LIST=1");
  std::string nonce = random_hex(16);
  s.channel_input = nonce;
  SandboxResult r = run_sandboxed(s);
  remove_tree(scratch);
  ChannelReport ch = parse_channel(r.channel, nonce);
  if (!ch.ended) {
    std::string why = r.timed_out ? "it ran past the time limit"
                      : r.signal  ? "it was killed by " + signal_name(r.signal)
                                  : "exit code " + std::to_string(r.exit_code);
    mls::fail("listing the tests of ", binary.filename().string(), " failed (", why,
              "): the program must link the grader harness listener (common/tests/mls_grader_listener.hpp "
              "in its Catch2 main), and nothing may end the program before main.",
              r.err.empty() ? "" : "\nstderr:\n" + sanitize_text(head_tail(r.err, 1500, 500), 2500));
  }
  return ch.listed;
}

LabResult run_lab_tests(const fs::path& binary, const Manifest& m, const RunOptions& opt, std::vector<std::string>* notes) {
  TestPrograms p;
  p.built[m.test_binary] = binary;
  return run_lab_tests(p, m, opt, notes);
}

namespace {
std::string empty_group_note(const Group& g) {
  return "group '" + g.name + "' (" + g.match + ") matches no test case";
}
}  // namespace

bool note_expected_in_handout(const Manifest& m, const std::string& note) {
  for (const auto& g : m.groups)
    if (g.visibility != Visibility::Visible && note == empty_group_note(g)) return true;
  return false;
}

namespace detail {

ReachablePrograms::ReachablePrograms(const TestPrograms& p, const RunOptions& opt, const std::string& tag) : built(p.built) {
  gpu_here = opt.gpu_present ? *opt.gpu_present : machine_has_gpu();
  mpi_here = machine_has_mpirun();
  for (const auto& [name, path] : built) sanitized[name] = binary_uses_sanitizer(path);
  if (!(isolation().level == Isolation::Uid && ::geteuid() == 0)) return;
  copies = make_temp_dir("mls-grader-bin");
  for (auto& [name, path] : built) {
    fs::path dst = copies / (tag + name);
    fs::copy_file(path, dst, fs::copy_options::overwrite_existing);
    fs::permissions(dst, fs::perms(0755));
    path = dst;
  }
}

ReachablePrograms::~ReachablePrograms() {
  if (!copies.empty()) remove_tree(copies);
}

void for_each_parallel(std::size_t n, int threads, const std::function<void(std::size_t)>& task) {
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) task(i);
  };
  std::vector<std::thread> pool;
  int k = std::max(1, std::min<int>(threads, static_cast<int>(n)));
  for (int t = 0; t < k; ++t) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
}

namespace {
CaseRun run_case(const fs::path& binary, const TestJob& job, const Group& g, const Manifest& m, std::uint64_t salt,
                 bool sanitized, bool machine_here, ObservationConsumer* consumer, std::size_t channel_limit) {
  fs::path scratch = make_temp_dir("mls-grader-run");
  SandboxSpec s = test_spec(fs::absolute(binary), m, scratch, sanitized);
  s.argv.insert(s.argv.end(), {escape_test_name(job.name), "-r", "xml", "--rng-seed", "1234", "-w", "NoTests"});
  s.limits.channel_cap = channel_limit;
  std::string nonce = random_hex(16);
  s.channel_input = grader_protocol::channel_input(nonce, salt);
  // The channel is decoded once, as it arrives: its observations go to `consumer` (compared, or
  // recorded for the reference) and are never held whole.
  ChannelDecoder decoder(nonce, consumer);
  s.on_channel = [&decoder](std::string_view bytes) {
    decoder.feed(bytes);
    return true;
  };
  SandboxResult r = run_sandboxed(s);
  decoder.finish();
  remove_tree(scratch);
  SkipPolicy skip = !g.needs_machine() ? SkipPolicy::Ignore : machine_here ? SkipPolicy::Refuse : SkipPolicy::Allow;
  CaseRun out;
  out.channel = std::move(decoder.report());
  out.channel_bytes = r.channel_bytes;
  out.result = classify(r, job.name, out.channel, skip);
  out.result.group = g.name;
  out.result.visibility = g.visibility;
  out.result.max_score = job.points;
  return out;
}

}  // namespace

CaseRun ReachablePrograms::run(const TestJob& job, const Manifest& m, std::uint64_t salt, ObservationConsumer* consumer,
                               std::size_t channel_limit) const {
  const Group& g = *m.group(job.group);
  return run_case(built.at(job.program), job, g, m, salt, sanitized.at(job.program), g.gpu ? gpu_here : mpi_here, consumer,
                  channel_limit);
}

CaseRun ReachablePrograms::record(const TestJob& job, const Manifest& m, std::uint64_t salt, ValueSample sample) const {
  StreamRecorder rec(sample);
  CaseRun c = run(job, m, salt, &rec);
  c.channel.observations = std::move(rec.stream);
  return c;
}

const ValueSample& grading_sample() {
  static const ValueSample s = ValueSample::drawn();
  return s;
}

void ReachablePrograms::record_twice(const TestJob& job, const Manifest& m, std::uint64_t salt, CaseRun& a, CaseRun& b,
                                     std::optional<ReferenceMerger>& merger) const {
  a = record(job, m, salt, grading_sample());
  merger.emplace(std::move(a.channel.observations), grading_sample());
  b = run(job, m, salt, &*merger);
}

std::uint64_t fresh_salt() {
  std::uint64_t s = std::strtoull(random_hex(8).c_str(), nullptr, 16);
  return s == 0 ? 1 : s;
}

/// The head of a run's result: the lab, built, the isolation line.
LabResult built_result(const Manifest& m) {
  LabResult res;
  res.lab = m.lab;
  res.title = m.title;
  res.built = true;
  res.isolation = isolation_line();
  return res;
}

}  // namespace detail

TestPlan plan_tests(const TestPrograms& programs, const Manifest& m, const RunOptions& opt) {
  TestPlan plan;
  ReachablePrograms local(programs, opt, "list-");
  for (const auto& bin_name : m.test_binaries()) {
    std::vector<const Group*> groups;
    for (const auto& g : m.groups)
      if (g.binary == bin_name) groups.push_back(&g);
    auto built = local.built.find(bin_name);
    if (built == local.built.end()) {
      // The program is not there: GPU groups of a program the configuration lacks are SKIPPED;
      // anything else is NO_RESULT (and, when the configuration lacks it, a manifest problem).
      auto nc = programs.not_configured.find(bin_name);
      auto fl = programs.failed.find(bin_name);
      std::string why = nc != programs.not_configured.end() ? nc->second
                        : fl != programs.failed.end()       ? fl->second
                                                            : "the test program " + bin_name + " was not built";
      for (const Group* g : groups) {
        TestResult tr;
        tr.name = g->name + " (" + bin_name + " not built)";
        tr.group = g->name;
        tr.visibility = g->visibility;
        tr.max_score = g->points;
        if (g->needs_machine() && nc != programs.not_configured.end()) {
          tr.outcome = Outcome::Skipped;
          tr.message = std::string("skipped: no ") + (g->gpu ? "GPU" : "MPI") + " test program on this machine: " + why +
                       "; the group's points are left out of this run's maximum";
        } else {
          tr.outcome = Outcome::NoResult;
          tr.message = why;
          if (nc != programs.not_configured.end())
            plan.notes.push_back("group '" + g->name + "' needs the test program " + bin_name + ", but " + why);
        }
        if (opt.filter.empty()) plan.decided.push_back(tr);
      }
      if (fl != programs.failed.end()) plan.output += fl->second + "\n";
      continue;
    }
    const fs::path& binary = built->second;
    std::map<std::string, std::vector<std::string>> owner;
    std::set<std::string> filtered;
    if (!opt.filter.empty())
      for (auto& n : list_tests(binary, opt.filter, m)) filtered.insert(n);
    for (const Group* g : groups) {
      std::vector<std::string> names = list_tests(binary, g->match, m);
      for (const auto& n : names) owner[n].push_back(g->name);
      if (names.empty()) plan.notes.push_back(empty_group_note(*g));
      for (const auto& n : names)
        if (opt.filter.empty() || filtered.count(n))
          plan.jobs.push_back({n, g->name, g->points / static_cast<double>(names.size()), bin_name});
    }
    std::map<std::string, std::string> by_normal;  // Catch2 matches names ignoring case and outer spaces
    for (const auto& n : list_tests(binary, "", m)) {
      if (std::string problem = test_name_problem(n, bin_name); !problem.empty()) plan.notes.push_back(problem);
      if (auto [it, fresh] = by_normal.emplace(normalised_test_name(n), n); !fresh)
        plan.notes.push_back("test cases '" + it->second + "' and '" + n + "' of " + bin_name +
                             " differ only in case or outer spaces: Catch2 matches names that way, so running one runs both");
      if (!owner.count(n)) plan.notes.push_back("test case '" + n + "' of " + bin_name + " is in no group (it is not scored)");
    }
    for (const auto& [n, gs] : owner)
      if (gs.size() > 1) {
        std::string s = "test case '" + n + "' of " + bin_name + " is in more than one group:";
        for (const auto& g : gs) s += " " + g;
        plan.notes.push_back(s);
      }
    // A group that matches nothing still counts in the maximum.
    for (const Group* g : groups) {
      bool any = false;
      for (const auto& [n, gs] : owner) any = any || std::find(gs.begin(), gs.end(), g->name) != gs.end();
      if (!any && opt.filter.empty()) {
        TestResult tr;
        tr.name = g->name + " (no test case)";
        tr.group = g->name;
        tr.visibility = g->visibility;
        tr.max_score = g->points;
        tr.message = "the group's pattern " + g->match + " matches no test case of " + bin_name;
        plan.decided.push_back(tr);
      }
    }
  }
  return plan;
}

LabResult run_lab_tests(const TestPrograms& programs, const Manifest& m, const RunOptions& opt,
                        std::vector<std::string>* notes) {
  auto t0 = Clock::now();
  LabResult res = built_result(m);
  TestPlan plan = plan_tests(programs, m, opt);
  ReachablePrograms local(programs, opt);
  std::vector<TestResult> results(plan.jobs.size());
  std::mutex cb_mu;
  for_each_parallel(plan.jobs.size(), opt.jobs, [&](std::size_t i) {
    const TestJob& j = plan.jobs[i];
    TestResult t = local.run(j, m, 0).result;
    t.score = t.outcome == Outcome::Pass ? j.points : 0;
    results[i] = t;
    if (opt.on_result) {
      std::lock_guard<std::mutex> lk(cb_mu);
      opt.on_result(t);
    }
  });
  res.tests = plan.decided;
  res.tests.insert(res.tests.end(), results.begin(), results.end());
  res.execution_time_s = since(t0);
  res.output = plan.output;
  if (notes) notes->insert(notes->end(), plan.notes.begin(), plan.notes.end());
  for (const auto& msg : plan.notes) res.output += msg + "\n";
  return res;
}

LabResult run_differential(const TestPrograms& student, const Manifest& m, const Reference& ref, const RunOptions& opt) {
  auto t0 = Clock::now();
  LabResult res = built_result(m);
  res.output = ref.plan.output;
  for (const auto& n : ref.plan.notes) res.output += "reference: " + n + "\n";
  ReachablePrograms local(student, opt);
  std::vector<TestResult> results(ref.plan.jobs.size());
  std::mutex cb_mu;
  for_each_parallel(ref.plan.jobs.size(), opt.jobs, [&](std::size_t i) {
    const TestJob& j = ref.plan.jobs[i];
    const ReferenceCase& rc = ref.cases[i];
    const Group& g = *m.group(j.group);
    const bool local_only = g.judge == Judge::LocalOnly;
    TestResult t;
    auto bin = local.built.find(j.program);
    if (bin == local.built.end()) {
      t.name = j.name;
      t.group = g.name;
      t.visibility = g.visibility;
      t.max_score = j.points;
      t.outcome = Outcome::NoResult;
      auto fl = student.failed.find(j.program);
      t.message = fl != student.failed.end() ? fl->second : "the test program " + j.program + " was not built";
    } else {
      // The student's stream is compared as it arrives (nothing of it is kept); a reference the
      // grader cannot judge by compares with an empty one, and its verdict is not used.
      static const ReferenceStream none;
      StreamComparator cmp(rc.ok ? rc.stream : none);
      CaseRun run = local.run(j, m, rc.salt, &cmp, student_channel_limit(rc.channel_bytes));
      t = run.result;
      const ChannelReport& ch = run.channel;
      if (ch.ended && ch.passed.empty() && ch.failed.empty() && ch.exited.empty() && t.outcome != Outcome::Pass) {
        t.outcome = Outcome::Fail;
        t.message = "the submission's test program has no test case named '" + j.name + "'";
      } else if (t.outcome == Outcome::Pass && !local_only) {
        // The student's process says PASS; the verdict is the comparison with the reference.
        if (!rc.ok) {
          t.outcome = Outcome::NoResult;
          t.message = "grader problem (not the submission's): " + rc.problem;
        } else if (strong_count(rc.stream.stream) == 0) {
          // Truth values alone can be written by anyone: such a test proves nothing.
          t.outcome = Outcome::NoResult;
          t.message = "grader problem (not the submission's): the test records only truth values (weak "
                      "observations, forgeable as \"true\"), so it gives no points until it observes a value "
                      "the code produced (mls-grader audit lists such tests)";
        } else if (std::string diff = cmp.verdict(); !diff.empty()) {
          t.outcome = Outcome::Fail;
          t.message = "differs from the reference build: " + diff;
        }
      } else if (t.outcome == Outcome::Skipped && rc.outcome != Outcome::Skipped) {
        t.outcome = Outcome::Fail;
        t.message = "the test reported a skip, but the reference build ran it";
      }
    }
    if (local_only) {
      t.max_score = 0;
      t.message = "local_only group: judged in the student's own process, 0 points in grade" +
                  std::string(t.message.empty() ? "" : "; " + t.message);
    }
    t.score = t.outcome == Outcome::Pass ? t.max_score : 0;
    results[i] = t;
    if (opt.on_result) {
      std::lock_guard<std::mutex> lk(cb_mu);
      opt.on_result(t);
    }
  });
  res.tests = ref.plan.decided;
  res.tests.insert(res.tests.end(), results.begin(), results.end());
  res.execution_time_s = since(t0);
  return res;
}

namespace {

/// The grading copy of the sources: the handout of lab `m` (earlier labs as reference, lab `m`'s
/// student files as stubs, later labs and hidden tests left out). Only the student files are
/// compiled from it (`build_submission`); the rest is there for the headers they include. A lab
/// with a direct build: its folder and common/include, its student files stubbed.
void make_grading_tree(const Manifest& m, const fs::path& root, const fs::path& tree) {
  if (!m.build) {
    make_handout(root, discover_labs(root), m.lab, tree, {});
    return;
  }
  copy_reference_tree(root, m, tree);
  for (const auto& h : m.hidden_files) {
    std::error_code ec;
    fs::remove(tree / h, ec);
  }
  for (const auto& rel : m.student_files) {
    fs::path p = tree / rel;
    if (fs::exists(p)) write_file_atomic(p, strip_solutions(read_file(p), rel, "lab" + std::to_string(m.lab)).text);
  }
}

/// The folder a submission is graded in (`src/`: the grading copy with its files, `build/`:
/// empty): a fresh one, or the batch's, where only the student files that change are rewritten.
fs::path grading_copy(const Manifest& m, const GradeOptions& opt, const IntakeReport& in) {
  BatchTree* bt = opt.batch_tree.get();
  fs::path dir = bt ? bt->dir : make_temp_dir("mls-grader");
  fs::path tree = dir / "src";
  std::map<std::string, std::string> own_stubs;
  auto& stubs = bt ? bt->stubs : own_stubs;
  if (!bt || !bt->made) {
    make_grading_tree(m, opt.build.root, tree);
    for (const auto& rel : m.student_files)
      if (fs::exists(tree / rel)) stubs[rel] = read_file(tree / rel);
    if (bt) bt->made = true;
  }
  std::map<std::string, std::string> want = stubs;
  for (const auto& f : in.accepted) want[f.rel] = f.text;
  for (const auto& [rel, text] : want) {
    std::error_code ec;
    if (fs::exists(tree / rel, ec) && read_file(tree / rel) == text) continue;
    fs::create_directories((tree / rel).parent_path());
    write_file_atomic(tree / rel, text);
  }
  remove_tree(dir / "build");
  fs::create_directories(dir / "build");
  return dir;
}

/// The reference a grading compares with and builds on (prepared when the options carry none;
/// the old verdict mode needs only its build).
std::shared_ptr<const Reference> reference_of(const Manifest& m, const GradeOptions& opt) {
  if (opt.reference) return opt.reference;
  if (opt.differential) return prepare_reference(m, opt);
  return built_reference(m, opt);
}

/// Nothing the student sees names the instructor's folders: the grading copy's paths become
/// relative, the checkout's and the submission's are replaced by placeholders.
LabResult redact_result(LabResult r, const GradeOptions& opt, const fs::path& submission, const fs::path& temp) {
  std::vector<std::pair<std::string, std::string>> pairs = {
      {opt.build.root.string() + "/", ""}, {opt.build.root.string(), "<course>"}, {submission.string(), "<submission>"}};
  if (!temp.empty()) {
    pairs.push_back({(temp / "src").string() + "/", ""});
    pairs.push_back({(temp / "build").string(), "<build>"});
    pairs.push_back({temp.string(), "<grading>"});
  }
  r.output = redact(std::move(r.output), pairs);
  for (auto& t : r.tests) {
    t.message = redact(std::move(t.message), pairs);
    t.name = redact(std::move(t.name), pairs);
  }
  return r;
}

/// The submission's files, or why it is rejected (errors) and what was left out (notes).
IntakeReport take_in(const Manifest& m, const fs::path& submission) {
  IntakeReport in;
  try {
    in = intake_submission(submission, m);
  } catch (const std::exception& e) {
    in.errors.push_back(std::string("intake failed: ") + e.what());
  }
  return in;
}

/// The build's options for one submission: its own folder and its batch's folder are hidden.
BuildOptions submission_build_options(const GradeOptions& opt, const fs::path& submission) {
  BuildOptions bo = opt.build;
  bo.hide.push_back(submission);
  // The batch folder (the other submissions), unless it is a top-level folder of the system.
  if (submission.parent_path().has_relative_path() && submission.parent_path().parent_path() != "/")
    bo.hide.push_back(submission.parent_path());
  return bo;
}

/// grade --bench: every benchmark of the lab measured in the submission's build, when every test
/// passed and its check agrees with the reference; the figures go to the leaderboard.
void add_benchmarks(const Manifest& m, const TestPrograms& programs, const Reference& ref, const GradeOptions& opt,
                    LabResult& r) {
  if (m.benchmarks.empty()) return;
  // A test the reference itself cannot judge (a grader problem, said so in its message) does not
  // hold the submission's figures back; every other test must pass.
  const int pass = r.count(Outcome::Pass), skipped = r.count(Outcome::Skipped);
  const auto grader_problems = std::count_if(r.tests.begin(), r.tests.end(), [](const TestResult& t) {
    return t.outcome == Outcome::NoResult && starts_with(t.message, "grader problem");
  });
  if (pass == 0 || pass + skipped + grader_problems != static_cast<long>(r.tests.size())) {
    r.output += "benchmarks: not run (a figure enters the leaderboard only when every test passes)\n";
    return;
  }
  for (const auto& bm : m.benchmarks) {
    // The figure is the grader's own measurement: never the benchmark program's report, which is
    // the student's code's own words (`mls-grader bench` still runs it, for the student).
    TimedCheck tc = time_check(m, programs, ref, bm, opt.run, std::max(3, opt.bench_repetitions));
    if (!tc.why.empty() || tc.submission_s <= 0) {
      r.output += "benchmark " + bm.name + ": no figure: " + (tc.why.empty() ? "no timing" : tc.why) + "\n";
      continue;
    }
    const double value = tc.reference_s / tc.submission_s;
    // The leaderboard's name says what the figure compares with: "add_vs_memcpy" (the Google
    // Benchmark figure of `mls-grader bench`) becomes "add_vs_reference".
    const std::string figure = bm.name.substr(0, bm.name.rfind("_vs_")) + "_vs_reference";
    char line[400];
    std::snprintf(line, sizeof line,
                  "benchmark %s: %.3fx the reference solution's speed (check '%s': %.3f s vs the reference's %.3f s, "
                  "median of %d validated runs, grader clock)\n",
                  figure.c_str(), value, bm.check.c_str(), tc.submission_s, tc.reference_s, tc.runs);
    r.output += line;
    r.leaderboard.push_back({figure, value, "desc",
                             "the grader's clock: the whole run of the check test '" + bm.check +
                                 "' on fresh salted inputs, every timed run's results validated against the reference "
                                 "build; the reference solution's time over the submission's (median of " +
                                 std::to_string(tc.runs) + " runs each, interleaved; above 1 is faster than the "
                                 "reference)"});
  }
}

/// Runs a built submission's tests and scores them (differentially unless the options say not).
LabResult run_submission(const TestPrograms& programs, const Manifest& m, const Reference& ref, const GradeOptions& opt) {
  LabResult r = opt.differential ? run_differential(programs, m, ref, opt.run) : run_lab_tests(programs, m, opt.run);
  r.built = true;
  if (opt.bench) add_benchmarks(m, programs, ref, opt, r);
  return r;
}

}  // namespace

LabResult grade_submission(const Manifest& m, const fs::path& submission, const GradeOptions& opt) {
  auto t0 = Clock::now();
  fs::path abs_sub = fs::absolute(submission).lexically_normal();
  std::string raw_name = abs_sub.filename().string();
  if (raw_name.empty()) raw_name = abs_sub.parent_path().filename().string();
  fs::path temp;
  auto finish = [&](LabResult r) {
    r.submission = display_name(raw_name, 120);
    r.execution_time_s = since(t0);
    r.isolation = isolation_line();
    if (!temp.empty() && !opt.keep_temp && !opt.batch_tree) remove_tree(temp);
    return redact_result(std::move(r), opt, abs_sub, temp);
  };
  IntakeReport in = take_in(m, submission);
  std::string notes;
  for (const auto& n : in.notes) notes += "intake: " + n + "\n";
  if (!in.ok()) {
    std::string why = "the submission was rejected:\n";
    for (const auto& e : in.errors) why += "  " + e + "\n";
    return finish(zero_result(m, notes + why, since(t0)));
  }
  try {
    std::shared_ptr<const Reference> ref = reference_of(m, opt);
    temp = grading_copy(m, opt, in);
    auto tb = Clock::now();
    BuildOptions bo = submission_build_options(opt, abs_sub);
    bo.benchmarks = opt.bench;
    BuildResult b = build_submission(m, temp / "src", temp / "build", ref->build.recipe, bo);
    if (!b.ok) return finish(zero_result(m, notes + "the submission did not build:\n" + summarize_build_log(b.log), since(t0)));
    double build_s = since(tb);
    LabResult r;
    try {
      r = run_submission(b.programs, m, *ref, opt);
    } catch (const std::exception& e) {
      r = zero_result(m, e.what(), since(t0));
    }
    char timing[200];
    std::snprintf(timing, sizeof timing, "grading: build %.1f s (student files only), tests %.1f s; grader peak memory %.0f MB\n",
                  build_s, since(tb) - build_s, grader_peak_mb());
    r.output = notes + r.output + timing;
    return finish(r);
  } catch (const std::exception& e) {
    return finish(zero_result(m, notes + "grader error: " + e.what(), since(t0)));
  }
}

std::vector<LabResult> grade_batch(const Manifest& m, const std::vector<fs::path>& submissions, const GradeOptions& opt,
                                   int parallel, const std::function<void(std::size_t, const LabResult&)>& on_done) {
  std::vector<LabResult> results(submissions.size());
  if (submissions.empty()) return results;
  GradeOptions shared = opt;
  shared.reference = reference_of(m, opt);  // one reference (and one salt) for the whole batch
  const int lanes = std::clamp(parallel, 1, static_cast<int>(submissions.size()));
  // Each lane: its own grading copy, build uid and share of the jobs.
  std::vector<GradeOptions> lane(lanes, shared);
  for (auto& l : lane) {
    l.batch_tree = std::make_shared<BatchTree>();
    l.batch_tree->dir = make_temp_dir("mls-grader-batch");
    l.build.build_uid = reserve_sandbox_uid();
    l.build.jobs = std::max(1, opt.build.jobs / lanes);
    l.run.jobs = std::max(1, opt.run.jobs / lanes);
  }
  struct RemoveLanes {
    const std::vector<GradeOptions>& lane;
    bool keep;
    ~RemoveLanes() {
      if (!keep)
        for (const auto& l : lane) remove_tree(l.batch_tree->dir);
    }
  } remove_lanes{lane, opt.keep_temp};
  // One thread per lane; each submission takes a free lane for its grading and gives it back.
  std::mutex mutex;
  std::vector<const GradeOptions*> free_lanes;
  for (const auto& l : lane) free_lanes.push_back(&l);
  for_each_parallel(submissions.size(), lanes, [&](std::size_t i) {
    const GradeOptions* lo;
    {
      std::lock_guard<std::mutex> lock(mutex);
      lo = free_lanes.back();
      free_lanes.pop_back();
    }
    LabResult r;
    try {
      r = grade_submission(m, submissions[i], *lo);
    } catch (const std::exception& e) {  // grade_submission does not throw for a submission
      r = zero_result(m, std::string("grader error: ") + e.what(), 0);
    }
    std::lock_guard<std::mutex> lock(mutex);
    results[i] = std::move(r);
    if (on_done) on_done(i, results[i]);
    free_lanes.push_back(lo);
  });
  return results;
}

TimedCheck time_check(const Manifest& m, const TestPrograms& student, const Reference& ref, const Benchmark& bm,
                      const RunOptions& opt, int runs) {
  TimedCheck t;
  if (bm.check.empty()) {
    t.why = "the benchmark names no check test (a figure is the grader's timing of a check it validates)";
    return t;
  }
  auto job = std::find_if(ref.plan.jobs.begin(), ref.plan.jobs.end(), [&](const TestJob& j) { return j.name == bm.check; });
  if (job == ref.plan.jobs.end()) {
    t.why = "grader problem: the check '" + bm.check + "' is no test case of the reference";
    return t;
  }
  // The expected results come from the reference's own test program (its tolerances are the
  // oracles'); the reference is timed as the submission runs: its oracle-free twin where the lab
  // has them, so neither side's time includes the tests' oracles.
  ReachablePrograms theirs(ref.build.programs, opt, "bench-ref-"), mine(student, opt, "bench-");
  ReachablePrograms theirs_timed(graded_programs(m, ref.build.programs), opt, "bench-reft-");
  if (!mine.built.count(job->program)) {
    t.why = "the test program " + job->program + " was not built";
    return t;
  }
  const std::uint64_t salt = fresh_salt();
  CaseRun a, b;
  std::optional<ReferenceMerger> merger;
  theirs.record_twice(*job, m, salt, a, b, merger);
  std::string problem;
  std::optional<ReferenceStream> expected;
  if (a.result.outcome == Outcome::Pass && b.result.outcome == Outcome::Pass) expected = merger->result(problem);
  if (!expected) {
    t.why = "grader problem: the reference does not give one result for the check '" + bm.check + "' " + problem;
    return t;
  }
  const std::size_t limit = student_channel_limit(std::max(a.channel_bytes, b.channel_bytes));
  if (!theirs_timed.built.count(job->program)) {
    t.why = "grader problem: the reference build has no graded program for " + job->program;
    return t;
  }
  std::vector<double> theirs_s, mine_s;
  // The reference's runs interleaved with the submission's: each one timed by the grader's clock
  // (the whole process, start to exit) and each one's results compared with the expected ones, so
  // the figure is the time of invocations whose results are known to be right.
  for (int i = 0; i < std::max(1, runs); ++i) {
    StreamComparator again(*expected);
    CaseRun r = theirs_timed.run(*job, m, salt, &again, limit);
    if (r.result.outcome == Outcome::Pass && again.verdict().empty()) theirs_s.push_back(r.result.wall_s);
    StreamComparator cmp(*expected);
    CaseRun got = mine.run(*job, m, salt, &cmp, limit);
    if (got.result.outcome != Outcome::Pass) {
      t.why = "the check '" + bm.check + "' does not pass on fresh inputs (" + to_string(got.result.outcome) + ")";
      return t;
    }
    if (std::string diff = cmp.verdict(); !diff.empty()) {
      t.why = "the benchmarked code's result differs from the reference build's (check '" + bm.check +
              "', fresh inputs, timed run " + std::to_string(i + 1) + "): " + diff;
      return t;
    }
    mine_s.push_back(got.result.wall_s);
  }
  if (theirs_s.empty()) {
    t.why = "grader problem: no timed run of the reference passed the check '" + bm.check + "'";
    return t;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  };
  t.reference_s = median(theirs_s);
  t.submission_s = median(mine_s);
  t.runs = static_cast<int>(mine_s.size());
  return t;
}

std::string check_benchmark(const Manifest& m, const TestPrograms& student, const Reference& ref, const Benchmark& bm,
                            const RunOptions& opt) {
  if (bm.check.empty()) return "";
  return time_check(m, student, ref, bm, opt, 1).why;
}

namespace {
std::string cut(const std::string& s, std::size_t n) { return s.size() > n ? s.substr(0, n) + " ..." : s; }
std::string gpu_note(int n, const char* where) {
  return std::to_string(n) + " GPU test(s) SKIPPED in the " + where +
         " (no GPU on this machine, or no mpirun for an MPI group): check-handouts cannot prove them here; run "
         "it on a machine that has them";
}
}  // namespace

HandoutJudgement judge_reference(const Manifest& m, const LabResult& ref, const std::vector<std::string>& notes) {
  HandoutJudgement j;
  for (const auto& n : notes) j.problems.push_back("manifest: " + n);
  if (ref.tests.empty()) j.problems.push_back("the reference has no test");
  std::string bad;
  int skipped = 0;
  for (const auto& t : ref.tests) {
    const Group* g = m.group(t.group);
    if (t.outcome == Outcome::Pass) continue;
    if (t.outcome == Outcome::Skipped && g && g->needs_machine()) {
      ++skipped;
      continue;
    }
    bad += std::string(to_string(t.outcome)) + "  " + t.group + ": " + t.name + "\n";
    if (!t.message.empty())
      for (const auto& l : split(cut(t.message, 300), '\n')) bad += "    " + l + "\n";
  }
  if (!bad.empty()) j.problems.push_back("the reference does not pass every test:\n" + bad);
  if (skipped) j.notes.push_back(gpu_note(skipped, "reference"));
  return j;
}

HandoutJudgement judge_handout(const Manifest& m, const LabResult& h) {
  HandoutJudgement j;
  int skipped = 0, given_pass = 0;
  for (const auto& t : h.tests) {
    if (t.outcome == Outcome::NotImplemented) continue;
    const Group* g = m.group(t.group);
    if (g && g->given && t.outcome == Outcome::Pass) {
      ++given_pass;
      continue;
    }
    if (g && g->needs_machine() && t.outcome == Outcome::Skipped) {
      ++skipped;
      continue;
    }
    // A hidden group has no tests in the handout: its placeholder entry is expected.
    if (g && g->visibility != Visibility::Visible && t.outcome == Outcome::NoResult &&
        t.name == g->name + " (no test case)")
      continue;
    j.problems.push_back("handout test '" + t.group + ": " + t.name + "' is " + to_string(t.outcome) + " (expected " +
                         (g && g->given ? "PASS or NOT_IMPLEMENTED: a given group" : "NOT_IMPLEMENTED") +
                         "): " + cut(t.message, 300));
  }
  if (given_pass) j.notes.push_back(std::to_string(given_pass) + " test(s) of given code pass (groups marked \"given\")");
  if (skipped) j.notes.push_back(gpu_note(skipped, "handout"));
  return j;
}

std::string test_name_problem(const std::string& name, const std::string& binary) {
  const std::string head = "test case '" + name + "' of " + binary;
  if (name.find(';') != std::string::npos)
    return head + " has a ';' in its name: CTest splits discovered names there, so it cannot run it (use ',')";
  // Catch2 v2 takes these apart after removing escapes, so no escaping of the name helps.
  if (!name.empty() && (name.front() == '*' || name.back() == '*'))
    return head + " starts or ends with '*': Catch2 reads that as a wildcard, so the grader cannot run it alone";
  if (name.rfind("exclude:", 0) == 0)
    return head + " starts with 'exclude:': Catch2 reads that as an exclusion, so the grader cannot run it alone";
  if (trim(name) != name)
    return head + " starts or ends with a space: Catch2 trims the name it is asked for, so it may run another test";
  return "";
}

std::string normalised_test_name(std::string_view name) {
  std::string out(trim(name));
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace mls::grader