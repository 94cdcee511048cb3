#include "mls/grader/grade.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "mls/common/error.hpp"
#include "mls/grader/intake.hpp"
#include "mls/grader/sandbox.hpp"
#include "mls/grader/strip.hpp"
#include "mls/grader/util.hpp"

namespace mls::grader {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

SandboxResult run_tool(const std::vector<std::string>& argv, const fs::path& cwd, double wall_s, bool sandbox,
                       const std::vector<fs::path>& chown) {
  SandboxSpec s;
  s.argv = argv;
  s.cwd = cwd;
  s.env = minimal_env(cwd);
  for (auto& e : s.env)
    if (starts_with(e, "HOME=") || starts_with(e, "TMPDIR=")) e = e.substr(0, e.find('=') + 1) + cwd.string();
  s.limits.wall_s = wall_s;
  s.limits.cpu_s = wall_s * 4 + 10;
  s.limits.address_space_mb = 0;
  s.limits.file_size_mb = 2048;
  s.limits.open_files = 4096;
  s.limits.processes = 1024;
  s.limits.output_cap = 64u << 20;
  s.limits.keep_head = 48u << 10;
  s.limits.keep_tail = 16u << 10;
  s.drop_privileges = sandbox;
  s.chown_paths = chown;
  return run_sandboxed(s);
}

std::string which(const std::string& prog) {
  for (const char* dir : {"/usr/local/bin", "/usr/bin", "/bin"}) {
    fs::path p = fs::path(dir) / prog;
    if (fs::exists(p)) return p.string();
  }
  return prog;
}

bool step(BuildResult& b, const SandboxResult& r, const std::string& what) {
  b.log += "$ " + what + "\n" + r.out + r.err;
  if (r.timed_out) b.log += "\n[the build step ran past its time limit and was stopped]\n";
  if (!r.started) b.log += "\n[" + r.error + "]\n";
  return r.started && r.exited && r.exit_code == 0 && !r.timed_out;
}

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

}  // namespace

std::string summarize_build_log(std::string_view log, std::size_t max_bytes) {
  std::string errors;
  int n = 0;
  for (const auto& line : split(log, '\n')) {
    bool is_err = line.find("error:") != std::string::npos || line.find("error :") != std::string::npos ||
                  line.find("undefined reference") != std::string::npos || line.find("CMake Error") != std::string::npos ||
                  line.find("multiple definition") != std::string::npos || starts_with(line, "FAILED:");
    if (is_err && n < 25) {
      errors += line + "\n";
      ++n;
    }
  }
  std::string out;
  if (!errors.empty()) out = "First errors:\n" + errors + "\n";
  std::size_t room = max_bytes > out.size() ? max_bytes - out.size() : 0;
  if (room > 200) out += "End of the build log:\n" + std::string(log.substr(log.size() > room - 40 ? log.size() - (room - 40) : 0));
  return sanitize_text(out, max_bytes + 200);
}

void copy_reference_tree(const fs::path& root, const Manifest& m, const fs::path& dest) {
  fs::create_directories(dest);
  if (m.build) {
    copy_tree(root / m.dir, dest / m.dir, {"build", ".git"});
    return;
  }
  for (const auto& e : fs::directory_iterator(root)) {
    std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || name == "build") continue;
    auto st = e.symlink_status();
    if (fs::is_regular_file(st)) {
      fs::copy_file(e.path(), dest / name, fs::copy_options::overwrite_existing);
    } else if (fs::is_directory(st)) {
      int n = lab_number_of_dir(name);
      if (name == "common" || (n >= 0 && n <= m.lab)) copy_tree(e.path(), dest / name, {"build", ".git", "__pycache__"});
    }
  }
}

BuildResult build_lab(const Manifest& m, const fs::path& tree, const fs::path& build_dir, const BuildOptions& opt) {
  BuildResult b;
  auto t0 = Clock::now();
  fs::create_directories(build_dir);
  bool in_tree = fs::equivalent(tree, opt.root);
  bool sandbox = !in_tree;
  double budget = opt.time_limit_s;
  auto left = [&] { return std::max(5.0, budget - since(t0)); };
  std::vector<fs::path> chown = sandbox ? std::vector<fs::path>{tree, build_dir} : std::vector<fs::path>{};
  std::string cxx = which("c++");
  if (m.build) {
    fs::path lab = tree / m.dir;
    std::vector<std::string> flags = {"-std=c++20", "-O1", "-g0", "-Wall", "-Wextra", "-Wno-unused-parameter"};
    if (opt.werror) flags.push_back("-Werror");
    for (const auto& f : m.build->flags) flags.push_back(f);
    for (const auto& inc : m.build->include_dirs) flags.push_back("-I" + (lab / inc).string());
    flags.push_back("-I" + (opt.root / "common" / "include").string());
    std::set<std::string> student(m.student_files.begin(), m.student_files.end());
    std::vector<std::string> objects;
    for (const auto& src : m.build->sources) {
      fs::path sp = lab / src;
      std::string rel = (fs::path(m.dir) / src).generic_string();
      fs::path obj = build_dir / (fs::path(src).filename().string() + ".o");
      std::string key;
      bool cacheable = !student.count(rel) && !opt.cache_dir.empty();
      if (cacheable) {
        std::string text;
        try {
          text = read_file(sp);
        } catch (const std::exception&) {
        }
        std::string all = text;
        for (const auto& f : flags) all += "\n" + f;
        key = fnv1a_hex(all);
        fs::path cached = opt.cache_dir / (key + ".o");
        std::error_code ec;
        if (fs::exists(cached)) {
          fs::copy_file(cached, obj, fs::copy_options::overwrite_existing, ec);
          if (!ec) {
            objects.push_back(obj.string());
            continue;
          }
        }
      }
      std::vector<std::string> argv = {cxx};
      argv.insert(argv.end(), flags.begin(), flags.end());
      argv.insert(argv.end(), {"-c", sp.string(), "-o", obj.string()});
      if (!step(b, run_tool(argv, build_dir, left(), sandbox, chown), "c++ -c " + rel)) {
        b.wall_s = since(t0);
        return b;
      }
      if (cacheable) {
        std::error_code ec;
        fs::create_directories(opt.cache_dir, ec);
        fs::path tmp = opt.cache_dir / (key + ".o.tmp" + std::to_string(::getpid()));
        fs::copy_file(obj, tmp, fs::copy_options::overwrite_existing, ec);
        if (!ec) fs::rename(tmp, opt.cache_dir / (key + ".o"), ec);
      }
      objects.push_back(obj.string());
    }
    fs::path bin = build_dir / m.test_binary;
    std::vector<std::string> argv = {cxx};
    argv.insert(argv.end(), objects.begin(), objects.end());
    argv.insert(argv.end(), {opt.harness_lib.string(), opt.common_lib.string(), "-pthread", "-o", bin.string()});
    if (!step(b, run_tool(argv, build_dir, left(), sandbox, chown), "c++ -o " + m.test_binary)) {
      b.wall_s = since(t0);
      return b;
    }
    b.ok = true;
    b.binary = bin;
    b.wall_s = since(t0);
    return b;
  }
  // Real labs: the project's own CMake, only the lab's test target.
  std::string cmake = which("cmake");
  if (in_tree) {
    if (!fs::exists(build_dir / "CMakeCache.txt")) {
      if (!step(b, run_tool({cmake, "--preset", opt.preset}, tree, left(), false, {}), "cmake --preset " + opt.preset)) {
        b.wall_s = since(t0);
        return b;
      }
    }
  } else {
    std::vector<std::string> argv = {cmake, "-S", tree.string(), "-B", build_dir.string(), "-G", "Ninja",
                                     "-DCMAKE_BUILD_TYPE=Release", std::string("-DMLS_WERROR=") + (opt.werror ? "ON" : "OFF"),
                                     "-DMLS_BENCH=OFF", "-DMLS_HANDOUT_TESTS=OFF"};
    if (!step(b, run_tool(argv, build_dir, left(), sandbox, chown), "cmake (configure)")) {
      b.wall_s = since(t0);
      return b;
    }
  }
  std::vector<std::string> argv = {cmake, "--build", build_dir.string(), "--target", m.test_binary, "-j",
                                   std::to_string(std::max(1, opt.jobs))};
  if (!step(b, run_tool(argv, build_dir, left(), sandbox, chown), "cmake --build --target " + m.test_binary)) {
    b.wall_s = since(t0);
    return b;
  }
  b.binary = build_dir / m.dir / m.test_binary;
  b.ok = fs::exists(b.binary);
  if (!b.ok) b.log += "\n[the build succeeded but " + b.binary.string() + " does not exist]\n";
  b.wall_s = since(t0);
  return b;
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
  auto t0 = Clock::now();
  LabResult res;
  res.lab = m.lab;
  res.title = m.title;
  res.built = true;
  struct Job {
    std::string name;
    const Group* group;
    double points;
  };
  std::vector<Job> jobs;
  std::map<std::string, std::vector<std::string>> owner;
  std::set<std::string> filtered;
  if (!opt.filter.empty())
    for (auto& n : list_tests(binary, opt.filter, m)) filtered.insert(n);
  std::vector<std::string> messages;
  for (const auto& g : m.groups) {
    std::vector<std::string> names = list_tests(binary, g.match, m);
    for (const auto& n : names) owner[n].push_back(g.name);
    if (names.empty()) messages.push_back("group '" + g.name + "' (" + g.match + ") matches no test case");
    for (const auto& n : names)
      if (opt.filter.empty() || filtered.count(n)) jobs.push_back({n, &g, g.points / static_cast<double>(names.size())});
  }
  for (const auto& n : list_tests(binary, "", m)) {
    auto it = owner.find(n);
    if (it == owner.end()) messages.push_back("test case '" + n + "' is in no group (it is not scored)");
  }
  for (const auto& [n, gs] : owner)
    if (gs.size() > 1) {
      std::string s = "test case '" + n + "' is in more than one group:";
      for (const auto& g : gs) s += " " + g;
      messages.push_back(s);
    }
  // A group that matches nothing still counts in the maximum.
  for (const auto& g : m.groups) {
    bool any = false;
    for (const auto& [n, gs] : owner) any = any || std::find(gs.begin(), gs.end(), g.name) != gs.end();
    if (!any && opt.filter.empty()) {
      TestResult tr;
      tr.name = g.name + " (no test case)";
      tr.group = g.name;
      tr.visibility = g.visibility;
      tr.max_score = g.points;
      tr.message = "the group's pattern " + g.match + " matches no test case";
      res.tests.push_back(tr);
    }
  }

  bool sanitized = binary_uses_sanitizer(binary);
  fs::path abs = fs::absolute(binary);
  std::vector<TestResult> results(jobs.size());
  std::atomic<std::size_t> next{0};
  std::mutex cb_mu;
  auto worker = [&] {
    while (true) {
      std::size_t i = next.fetch_add(1);
      if (i >= jobs.size()) return;
      const Job& j = jobs[i];
      fs::path scratch = make_temp_dir("mls-grader-run");
      SandboxSpec s = test_spec(abs, m, scratch, sanitized);
      s.argv.insert(s.argv.end(), {escape_test_name(j.name), "-r", "xml", "--rng-seed", "1234", "-w", "NoTests"});
      std::string nonce = random_hex(16);
      s.channel_input = nonce;
      SandboxResult r = run_sandboxed(s);
      remove_tree(scratch);
      TestResult t = classify(r, j.name, nonce);
      t.group = j.group->name;
      t.visibility = j.group->visibility;
      t.max_score = j.points;
      t.score = t.outcome == Outcome::Pass ? j.points : 0;
      results[i] = t;
      if (opt.on_result) {
        std::lock_guard<std::mutex> lk(cb_mu);
        opt.on_result(t);
      }
    }
  };
  std::vector<std::thread> pool;
  int nthreads = std::max(1, std::min<int>(opt.jobs, static_cast<int>(jobs.size())));
  for (int k = 0; k < nthreads; ++k) pool.emplace_back(worker);
  for (auto& th : pool) th.join();
  res.tests.insert(res.tests.end(), results.begin(), results.end());
  res.execution_time_s = since(t0);
  if (notes) notes->insert(notes->end(), messages.begin(), messages.end());
  for (const auto& msg : messages) res.output += msg + "\n";
  return res;
}

LabResult grade_submission(const Manifest& m, const fs::path& submission, const GradeOptions& opt) {
  auto t0 = Clock::now();
  std::string name = fs::absolute(submission).lexically_normal().filename().string();
  if (name.empty()) name = fs::absolute(submission).lexically_normal().parent_path().filename().string();
  auto finish = [&](LabResult r) {
    r.submission = name;
    r.execution_time_s = since(t0);
    return r;
  };
  IntakeReport in = intake_submission(submission, m);
  std::string notes;
  for (const auto& n : in.notes) notes += "intake: " + n + "\n";
  if (!in.ok()) {
    std::string why = "the submission was rejected:\n";
    for (const auto& e : in.errors) why += "  " + e + "\n";
    return finish(zero_result(m, notes + why, since(t0)));
  }
  fs::path temp;
  try {
    temp = make_temp_dir("mls-grader");
    fs::path tree = temp / "tree";
    copy_reference_tree(opt.build.root, m, tree);
    // Student files start as the handout stubs, so a missing file scores 0, never the reference.
    for (const auto& rel : m.student_files) {
      fs::path p = tree / rel;
      if (!fs::exists(p)) continue;
      StripResult s = strip_solutions(read_file(p), rel, "lab" + std::to_string(m.lab));
      write_file_atomic(p, s.text);
    }
    for (const auto& f : in.accepted) {
      fs::create_directories((tree / f.rel).parent_path());
      fs::copy_file(f.source, tree / f.rel, fs::copy_options::overwrite_existing);
    }
    BuildResult b = build_lab(m, tree, temp / "build", opt.build);
    if (!b.ok) {
      LabResult r = zero_result(m, notes + "the submission did not build:\n" + summarize_build_log(b.log), since(t0));
      if (!opt.keep_temp) remove_tree(temp);
      return finish(r);
    }
    LabResult r;
    try {
      r = run_lab_tests(b.binary, m, opt.run);
    } catch (const std::exception& e) {
      r = zero_result(m, notes + e.what(), since(t0));
    }
    r.built = true;
    r.output = notes + r.output;
    if (!opt.keep_temp) remove_tree(temp);
    return finish(r);
  } catch (const std::exception& e) {
    if (!temp.empty() && !opt.keep_temp) remove_tree(temp);
    return finish(zero_result(m, notes + "grader error: " + e.what(), since(t0)));
  }
}

}  // namespace mls::grader
