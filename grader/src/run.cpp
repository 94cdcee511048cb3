// Running a lab's tests isolated: listing and planning (the jobs of a run, from the programs'
// listings), one sandboxed process per test case (`ReachablePrograms`), the student process's own
// verdicts (`test`, `check-handouts`) and what check-handouts concludes from them.
#include "mls/grader/run.hpp"

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
#include "mls/grader/differential.hpp"
#include "mls/grader/feedback.hpp"
#include "mls/grader/util.hpp"

namespace mls::grader {

namespace detail {

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
  const Machine here = grading_machine(opt, p);
  gpu_here = here.gpu;
  mpi_here = here.mpi;
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

std::string Machine::why_not(const Group& g) const {
  if (!g.needs_machine()) return "";
  if (not_configured.count(g.binary))
    return "the build configuration has no test program " + g.binary + " (" + (g.gpu ? "no CUDA" : "no MPI") + ")";
  if (g.gpu && !gpu) return "this machine has no GPU";
  if (g.mpi && !mpi) return "this machine has no mpirun";
  return "";
}

Machine grading_machine(const RunOptions& opt, const TestPrograms& programs) {
  Machine here;
  here.gpu = opt.gpu_present ? *opt.gpu_present : machine_has_gpu();
  here.mpi = machine_has_mpirun();
  for (const auto& [program, why] : programs.not_configured) here.not_configured.insert(program);
  return here;
}

void count_points(LabResult& r, const Manifest& m, const Machine& here) {
  for (auto& t : r.tests) {
    const Group* g = m.group(t.group);
    const std::string why = g ? here.why_not(*g) : "";
    t.counted = why.empty();
    if (t.counted) continue;
    t.score = 0;
    const std::string note = "not counted: " + why + "; the group's points are left out of this run's maximum";
    if (t.outcome != Outcome::Skipped && t.message.find(note) == std::string::npos)
      t.message += (t.message.empty() ? "" : "\n") + note;
  }
}

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
      const std::vector<double> shares = split_points(g->points, names.size());
      for (std::size_t k = 0; k < names.size(); ++k)
        if (opt.filter.empty() || filtered.count(names[k])) plan.jobs.push_back({names[k], g->name, shares[k], bin_name});
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
    add_feedback(t, rerun_command(m, j.group, j.program, j.name, opt.preset));
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
  count_points(res, m, grading_machine(opt, programs));
  return res;
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
