#include "mls/grader/grade.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <signal.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "mls/common/error.hpp"
#include "mls/common/grader_protocol.hpp"
#include "mls/grader/intake.hpp"
#include "mls/grader/sandbox.hpp"
#include "mls/grader/strip.hpp"
#include "mls/grader/util.hpp"

namespace mls::grader {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// How a build step runs: the grading copy's steps sandboxed (the tree read-only, the build
/// folder writable, hidden test sources masked unless `show_hidden`), the user's own in-tree
/// build trusted.
struct StepEnv {
  bool sandbox = false;
  std::shared_ptr<SandboxUid> uid;
  fs::path tree, build_dir;
  std::vector<fs::path> hidden;  ///< hidden test sources in `tree`
  std::vector<fs::path> hide;    ///< never visible (the instructor's checkout, the submission)
  double memory_mb = 4096, cpu_s = 900;
  int jobs = 1;
  std::vector<std::string> extra_env;  ///< trusted builds: ccache's settings
};

SandboxResult run_tool(const std::vector<std::string>& argv, const fs::path& cwd, double wall_s, const StepEnv& env,
                       bool show_hidden = false) {
  SandboxSpec s;
  s.argv = argv;
  s.cwd = cwd;
  fs::path scratch = env.sandbox ? env.build_dir : cwd;
  s.env = minimal_env(scratch);
  s.env.insert(s.env.end(), env.extra_env.begin(), env.extra_env.end());
  s.limits.wall_s = wall_s;
  s.limits.cpu_s = env.sandbox ? env.cpu_s : wall_s * 4 + 10;
  // The build is held to the same kind of limits as the tests: memory per process, CPU time,
  // processes, output and wall clock (a trusted in-tree build only to time and output).
  s.limits.address_space_mb = env.sandbox ? static_cast<std::size_t>(env.memory_mb) : 0;
  s.limits.file_size_mb = 2048;
  s.limits.open_files = 4096;
  s.limits.processes = env.sandbox ? 64 + 8 * static_cast<std::size_t>(std::max(1, env.jobs)) : 1024;
  s.limits.output_cap = 16u << 20;
  s.limits.keep_head = 48u << 10;
  s.limits.keep_tail = 16u << 10;
  s.drop_privileges = env.sandbox;
  s.uid = env.uid;
  s.tmpfs_mb = 2048;
  if (env.sandbox) {
    s.expose_ro = {env.tree};
    s.expose_rw = {env.build_dir};
    s.hide = env.hide;
    if (!show_hidden) s.mask = env.hidden;
    // The uid level cannot mask: the hidden sources are readable by the grader only.
    for (const auto& h : env.hidden) {
      std::error_code ec;
      fs::permissions(h, show_hidden ? fs::perms(0644) : fs::perms(0600), ec);
    }
  }
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
  if (r.output_limit) b.log += "\n[the build step printed more than the output limit and was stopped]\n";
  if (r.signal == SIGXCPU) b.log += "\n[the build step ran past its CPU time limit and was stopped]\n";
  if (r.signal) b.log += "\n[the build step was killed by " + signal_name(r.signal) + "]\n";
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
                  line.find("out of memory") != std::string::npos || line.find("memory exhausted") != std::string::npos ||
                  line.find("Killed signal") != std::string::npos || starts_with(line, "[the build step") ||
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
    copy_tree(root / "common" / "include", dest / "common" / "include");
    copy_tree(root / "common" / "tests" / "include", dest / "common" / "tests" / "include");  // mls/observe.hpp
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

namespace {

/// The object files CMake compiles the hidden test sources into (compile_commands.json of a
/// configured build folder), as Ninja targets relative to the build folder.
std::vector<std::string> hidden_objects(const fs::path& build_dir, const std::vector<fs::path>& hidden) {
  std::vector<std::string> out;
  nlohmann::json cc;
  try {
    cc = nlohmann::json::parse(read_file(build_dir / "compile_commands.json"));
  } catch (const std::exception&) {
    return out;
  }
  if (!cc.is_array()) return out;
  for (const auto& e : cc) {
    if (!e.is_object() || !e.contains("file") || !e.contains("output") || !e["file"].is_string() || !e["output"].is_string())
      continue;
    fs::path f = fs::path(e["file"].get<std::string>()).lexically_normal();
    for (const auto& h : hidden)
      if (f == h.lexically_normal()) out.push_back(e["output"].get<std::string>());
  }
  return out;
}

std::string cmake_list(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ";") + x;
  return s;
}

}  // namespace

BuildResult build_lab(const Manifest& m, const fs::path& tree, const fs::path& build_dir, const BuildOptions& opt) {
  BuildResult b;
  auto t0 = Clock::now();
  fs::create_directories(build_dir);
  bool in_tree = fs::equivalent(tree, opt.root);
  double budget = std::min(opt.time_limit_s, m.build_time_limit_s);
  auto left = [&] { return std::max(5.0, budget - since(t0)); };
  StepEnv env;
  env.sandbox = !in_tree && !opt.trusted;
  env.tree = fs::absolute(tree).lexically_normal();
  env.build_dir = fs::absolute(build_dir).lexically_normal();
  env.memory_mb = m.build_memory_limit_mb;
  env.cpu_s = budget;
  env.jobs = opt.jobs;
  env.hide = opt.hide;
  env.hide.push_back(opt.root);
  if (env.sandbox) {
    // One reserved uid for every step, so the files of one step belong to the next.
    try {
      env.uid = opt.build_uid ? opt.build_uid : reserve_sandbox_uid();
    } catch (const std::exception& e) {
      b.log += std::string("[") + e.what() + "]\n";
      return b;
    }
    if (env.uid && ::chown(build_dir.c_str(), env.uid->uid, env.uid->uid) != 0) {
      b.log += "[cannot hand the build folder to the sandbox uid]\n";
      return b;
    }
    for (const auto& h : m.hidden_files)
      if (fs::exists(tree / h)) env.hidden.push_back(env.tree / h);
  }
  // At the uid level, nothing the build's uid left in the shared temporary folders survives it.
  struct Sweep {
    const StepEnv& env;
    ~Sweep() {
      if (env.uid && isolation().level == Isolation::Uid) sweep_uid(env.uid->uid);
    }
  } sweep{env};
  auto fail = [&] {
    b.wall_s = since(t0);
    return b;
  };
  std::string cxx = which("c++");
  if (m.build) {
    // Direct build, run in the tree with relative paths (compiler messages name files as the
    // student knows them, and the object cache is shared between gradings).
    fs::path cwd = in_tree ? opt.root : tree;
    std::vector<std::string> flags = {"-std=c++20", "-O1", "-g0", "-Wall", "-Wextra", "-Wno-unused-parameter"};
    if (opt.werror) flags.push_back("-Werror");
    for (const auto& f : m.build->flags) flags.push_back(f);
    for (const auto& inc : m.build->include_dirs) flags.push_back("-I" + (fs::path(m.dir) / inc).generic_string());
    flags.push_back("-Icommon/include");
    flags.push_back("-Icommon/tests/include");
    std::set<std::string> student(m.student_files.begin(), m.student_files.end());
    std::vector<std::string> objects;
    // Tests first (hidden ones visible to this step only: no student code is compiled in it),
    // then the student's sources, with the hidden sources masked.
    std::vector<std::string> order;
    for (const auto& src : m.build->sources)
      if (!student.count((fs::path(m.dir) / src).generic_string())) order.push_back(src);
    for (const auto& src : m.build->sources)
      if (student.count((fs::path(m.dir) / src).generic_string())) order.push_back(src);
    for (const auto& src : order) {
      std::string rel = (fs::path(m.dir) / src).generic_string();
      fs::path obj = env.build_dir / (fs::path(src).filename().string() + ".o");
      std::string key;
      bool is_student = student.count(rel) > 0;
      bool cacheable = !is_student && !opt.cache_dir.empty();
      if (cacheable) {
        std::string text;
        try {
          text = read_file(cwd / rel);
        } catch (const std::exception&) {
        }
        std::string all = rel + "\n" + text;
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
      argv.insert(argv.end(), {"-c", rel, "-o", obj.string()});
      if (!step(b, run_tool(argv, cwd, left(), env, !is_student), "c++ -c " + rel)) return fail();
      if (cacheable) {
        std::error_code ec;
        fs::create_directories(opt.cache_dir, ec);
        fs::path tmp = opt.cache_dir / (key + ".o.tmp" + std::to_string(::getpid()));
        fs::copy_file(obj, tmp, fs::copy_options::overwrite_existing, ec);
        if (!ec) fs::rename(tmp, opt.cache_dir / (key + ".o"), ec);
      }
      objects.push_back(obj.string());
    }
    // The harness and common archives come from the grader's build; the sandbox links copies.
    std::vector<std::string> libs = {opt.harness_lib.string(), opt.common_lib.string()};
    if (env.sandbox) {
      fs::path libdir = env.build_dir / "grader-libs";
      fs::create_directories(libdir);
      for (auto& l : libs) {
        fs::path dst = libdir / fs::path(l).filename();
        fs::copy_file(l, dst, fs::copy_options::overwrite_existing);
        l = dst.string();
      }
    }
    fs::path bin = env.build_dir / m.test_binary;
    std::vector<std::string> argv = {cxx};
    argv.insert(argv.end(), objects.begin(), objects.end());
    argv.insert(argv.end(), libs.begin(), libs.end());
    argv.insert(argv.end(), {"-pthread", "-o", bin.string()});
    if (!step(b, run_tool(argv, cwd, left(), env), "c++ -o " + m.test_binary)) return fail();
    b.ok = true;
    b.binary = bin;
    b.programs.built[m.test_binary] = bin;
    b.wall_s = since(t0);
    return b;
  }
  // Real labs: the project's own CMake, only the lab's test targets.
  std::string cmake = which("cmake");
  int jobs = std::max(1, opt.jobs);
  if (in_tree) {
    if (!fs::exists(build_dir / "CMakeCache.txt")) {
      if (!step(b, run_tool({cmake, "--preset", opt.preset}, tree, left(), env), "cmake --preset " + opt.preset))
        return fail();
    }
  } else {
    std::vector<std::string> parts;
    for (const auto& e : fs::directory_iterator(tree)) {
      int n = lab_number_of_dir(e.path().filename().string());
      if (n >= 0 && n <= m.lab && fs::exists(e.path() / "CMakeLists.txt")) parts.push_back(e.path().filename().string());
    }
    std::sort(parts.begin(), parts.end());
    std::vector<std::string> argv = {cmake, "-S", env.tree.string(), "-B", env.build_dir.string(), "-G", "Ninja",
                                     "-DCMAKE_BUILD_TYPE=Release", std::string("-DMLS_WERROR=") + (opt.werror ? "ON" : "OFF"),
                                     "-DMLS_BENCH=OFF", "-DMLS_HANDOUT_TESTS=OFF", "-DMLS_GRADER_BUILD=ON",
                                     "-DMLS_LABS=" + cmake_list(parts)};
    // The trusted reference build may use the user's ccache (a student build never does).
    if (opt.trusted && fs::exists(which("ccache")) && which("ccache") != "ccache") {
      argv.push_back("-DCMAKE_CXX_COMPILER_LAUNCHER=" + which("ccache"));
      argv.push_back("-DCMAKE_C_COMPILER_LAUNCHER=" + which("ccache"));
      const char* home = std::getenv("HOME");
      const char* dir = std::getenv("CCACHE_DIR");
      if (dir && *dir) env.extra_env.push_back(std::string("CCACHE_DIR=") + dir);
      else if (home && *home) env.extra_env.push_back(std::string("CCACHE_DIR=") + home + "/.cache/ccache");
      env.extra_env.push_back("CCACHE_BASEDIR=" + env.tree.string());
    }
    if (!step(b, run_tool(argv, build_dir, left(), env), "cmake (configure)")) return fail();
    // Hidden tests are compiled in a step of their own, where no student source is compiled;
    // every later step sees them masked (or unreadable) and links the objects.
    if (!env.hidden.empty()) {
      auto objs = hidden_objects(env.build_dir, env.hidden);
      if (!objs.empty()) {
        std::vector<std::string> a = {cmake, "--build", env.build_dir.string(), "-j", std::to_string(jobs), "--target"};
        a.insert(a.end(), objs.begin(), objs.end());
        if (!step(b, run_tool(a, build_dir, left(), env, true), "cmake --build (hidden tests)")) return fail();
      }
    }
  }
  std::vector<std::string> argv = {cmake, "--build", build_dir.string(), "--target", m.test_binary, "-j", std::to_string(jobs)};
  if (!step(b, run_tool(argv, build_dir, left(), env), "cmake --build --target " + m.test_binary)) return fail();
  b.binary = build_dir / m.dir / m.test_binary;
  b.ok = fs::exists(b.binary);
  if (!b.ok) {
    b.log += "\n[the build succeeded but " + b.binary.string() + " does not exist]\n";
    return fail();
  }
  b.programs.built[m.test_binary] = b.binary;
  // The other test programs of the groups (e.g. the CUDA tests): each on its own, so one the
  // configuration does not define (no CUDA) or one that fails leaves the lab's main program.
  auto bins = m.test_binaries();
  for (std::size_t i = 1; i < bins.size(); ++i) {
    const std::string& target = bins[i];
    BuildResult extra;
    std::vector<std::string> a = {cmake, "--build", build_dir.string(), "--target", target, "-j", std::to_string(jobs)};
    bool ok = step(extra, run_tool(a, build_dir, left(), env), "cmake --build --target " + target);
    fs::path bin = build_dir / m.dir / target;
    if (ok && fs::exists(bin)) {
      b.programs.built[target] = bin;
    } else if (extra.log.find("unknown target") != std::string::npos ||
               extra.log.find("No rule to make target") != std::string::npos) {
      b.programs.not_configured[target] = "the build configuration defines no target " + target +
                                          " (e.g. CUDA was not found at configure time)";
    } else {
      b.programs.failed[target] = "the test program " + target + " did not build:\n" + summarize_build_log(extra.log, 3000);
      b.log += extra.log;
    }
  }
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

namespace {

/// One isolated run of one test case with the given salt: its outcome (the student process's
/// own view, `classify`) and what it wrote on the channel.
struct CaseRun {
  TestResult result;
  ChannelReport channel;
};
/// At the uid level the test programs must be reachable by the sandbox uid wherever the
/// checkout lives (e.g. under a mode-700 home): they run from copies in a temporary folder,
/// removed with this object. The namespace levels expose each program, read-only, at its path.
struct ReachablePrograms {
  std::map<std::string, fs::path> built;
  fs::path copies;
  explicit ReachablePrograms(const TestPrograms& p, const RunOptions& opt, const std::string& tag = "") : built(p.built) {
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
  ReachablePrograms(const ReachablePrograms&) = delete;
  /// Runs `job` from its program (see run_case) on this machine.
  CaseRun run(const TestJob& job, const Manifest& m, std::uint64_t salt) const;
  bool gpu_here = false, mpi_here = false;
  std::map<std::string, bool> sanitized;  ///< per program: links a sanitizer runtime
  ReachablePrograms& operator=(const ReachablePrograms&) = delete;
  ~ReachablePrograms() {
    if (!copies.empty()) remove_tree(copies);
  }
};

/// Runs `n` tasks on up to `threads` threads.
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

CaseRun run_case(const fs::path& binary, const TestJob& job, const Group& g, const Manifest& m, std::uint64_t salt,
                 bool sanitized, bool machine_here) {
  fs::path scratch = make_temp_dir("mls-grader-run");
  SandboxSpec s = test_spec(fs::absolute(binary), m, scratch, sanitized);
  s.argv.insert(s.argv.end(), {escape_test_name(job.name), "-r", "xml", "--rng-seed", "1234", "-w", "NoTests"});
  s.limits.channel_cap = 64u << 20;  // observation streams (tensors) are larger than verdict lines
  std::string nonce = random_hex(16);
  s.channel_input = grader_protocol::channel_input(nonce, salt);
  SandboxResult r = run_sandboxed(s);
  remove_tree(scratch);
  SkipPolicy skip = !g.needs_machine() ? SkipPolicy::Ignore : machine_here ? SkipPolicy::Refuse : SkipPolicy::Allow;
  CaseRun out;
  out.result = classify(r, job.name, nonce, skip);
  out.channel = parse_channel(r.channel, nonce);
  out.result.group = g.name;
  out.result.visibility = g.visibility;
  out.result.max_score = job.points;
  return out;
}

CaseRun ReachablePrograms::run(const TestJob& job, const Manifest& m, std::uint64_t salt) const {
  const Group& g = *m.group(job.group);
  return run_case(built.at(job.program), job, g, m, salt, sanitized.at(job.program), g.gpu ? gpu_here : mpi_here);
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

}  // namespace

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
    for (const auto& n : list_tests(binary, "", m)) {
      if (std::string problem = test_name_problem(n, bin_name); !problem.empty()) plan.notes.push_back(problem);
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

// ---- the reference side of differential grading ------------------------------------------------

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
  if (m.build)
    for (const auto& lib : {opt.harness_lib, opt.common_lib})
      if (!lib.empty() && fs::exists(lib)) libs += fnv1a_hex(read_file(lib));
  const std::string key = "lab" + std::to_string(m.lab) + "-" + fnv1a_hex(tree_hash(staging) + libs) + (opt.werror ? "-werror" : "");
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
    remove_tree(staging);
    try {
      b.programs = programs_from_json(nlohmann::json::parse(read_file(stamp)));
      b.ok = b.programs.built.count(m.test_binary) > 0;
      for (const auto& [k, v] : b.programs.built) b.ok = b.ok && fs::exists(v);
      if (b.ok) {
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
  b = build_lab(m, dir / "src", dir / "build", bo);
  if (b.ok) write_file_atomic(stamp, programs_to_json(b.programs).dump(2));
  b.wall_s = since(t0);
  return b;
}

std::shared_ptr<Reference> prepare_reference(const Manifest& m, const GradeOptions& opt) {
  auto t0 = Clock::now();
  auto ref = std::make_shared<Reference>();
  ref->build = build_reference(m, opt.build);
  if (!ref->build.ok)
    mls::fail("the reference build of lab ", m.lab, " failed (a grader or course problem, not the submission's):\n",
              summarize_build_log(ref->build.log));
  ref->salt = opt.salt ? opt.salt : fresh_salt();
  RunOptions ro = opt.run;
  ro.filter.clear();
  ref->plan = plan_tests(ref->build.programs, m, ro);
  ReachablePrograms local(ref->build.programs, opt.run, "ref-");
  const std::size_t n = ref->plan.jobs.size();
  ref->cases.resize(n);
  // Two runs per test with the grading's salt; a test the reference fails under a salt (e.g. a
  // worked example tied to seed 0) is run unsalted, in both builds.
  auto runs_with = [&](std::size_t i, std::uint64_t salt, CaseRun& a, CaseRun& b) {
    a = local.run(ref->plan.jobs[i], m, salt);
    b = local.run(ref->plan.jobs[i], m, salt);
  };
  for_each_parallel(n, opt.run.jobs, [&](std::size_t i) {
    ReferenceCase& c = ref->cases[i];
    CaseRun a, b;
    c.salt = ref->salt;
    runs_with(i, c.salt, a, b);
    if (a.result.outcome != Outcome::Pass && a.result.outcome != Outcome::Skipped) {
      c.salt = 0;
      runs_with(i, 0, a, b);
    }
    c.outcome = a.result.outcome;
    if (a.result.outcome == Outcome::Skipped) return;
    if (a.result.outcome != Outcome::Pass || b.result.outcome != Outcome::Pass) {
      c.problem = "the reference build does not pass this test (" + std::string(to_string(a.result.outcome)) + ", " +
                  to_string(b.result.outcome) + "): " + a.result.message + b.result.message;
      return;
    }
    std::string problem;
    auto merged = merge_reference_runs(a.channel.observations, b.channel.observations, problem);
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
      CaseRun run = local.run(j, m, rc.salt);
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
        } else if (std::string diff = compare_streams(rc.stream, ch.observations); !diff.empty()) {
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

/// The grading copy of the sources: the student's handout of lab `m` (earlier labs as
/// reference, lab `m`'s student files as stubs, later labs and hidden tests left out), then the
/// hidden test files (readable by the grader only; masked in the sandbox), then the student's
/// files. A lab with a direct build: its folder and common/include.
void make_grading_tree(const Manifest& m, const fs::path& root, const fs::path& tree, const IntakeReport& in) {
  if (m.build) {
    copy_reference_tree(root, m, tree);
    for (const auto& rel : m.student_files) {
      fs::path p = tree / rel;
      if (!fs::exists(p)) continue;
      StripResult s = strip_solutions(read_file(p), rel, "lab" + std::to_string(m.lab));
      write_file_atomic(p, s.text);
    }
  } else {
    make_handout(root, discover_labs(root), m.lab, tree, {});
  }
  for (const auto& h : m.hidden_files) {
    if (!fs::exists(root / h)) continue;
    fs::create_directories((tree / h).parent_path());
    fs::copy_file(root / h, tree / h, fs::copy_options::overwrite_existing);
    fs::permissions(tree / h, fs::perms(0600));
  }
  for (const auto& f : in.accepted) {
    fs::create_directories((tree / f.rel).parent_path());
    write_file_atomic(tree / f.rel, f.text);
  }
}

}  // namespace

LabResult grade_submission(const Manifest& m, const fs::path& submission, const GradeOptions& opt) {
  auto t0 = Clock::now();
  fs::path abs_sub = fs::absolute(submission).lexically_normal();
  std::string raw_name = abs_sub.filename().string();
  if (raw_name.empty()) raw_name = abs_sub.parent_path().filename().string();
  std::string name = display_name(raw_name, 120);
  fs::path temp;
  // Nothing the student sees names the instructor's folders: the grading copy's paths become
  // relative, the checkout's and the submission's are replaced by placeholders.
  auto finish = [&](LabResult r) {
    r.submission = name;
    r.execution_time_s = since(t0);
    r.isolation = isolation_line();
    std::vector<std::pair<std::string, std::string>> pairs = {
        {opt.build.root.string() + "/", ""}, {opt.build.root.string(), "<course>"}, {abs_sub.string(), "<submission>"}};
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
  };
  IntakeReport in;
  try {
    in = intake_submission(submission, m);
  } catch (const std::exception& e) {
    in.errors.push_back(std::string("intake failed: ") + e.what());
  }
  std::string notes;
  for (const auto& n : in.notes) notes += "intake: " + n + "\n";
  if (!in.ok()) {
    std::string why = "the submission was rejected:\n";
    for (const auto& e : in.errors) why += "  " + e + "\n";
    return finish(zero_result(m, notes + why, since(t0)));
  }
  try {
    // A batch reuses one grading copy and build folder: only the student files change between
    // submissions (a file whose text is unchanged keeps its object), so the build compiles
    // each submission's own files and relinks.
    const bool reuse = opt.batch_tree != nullptr;
    temp = reuse ? opt.batch_tree->dir : make_temp_dir("mls-grader");
    const bool keep = opt.keep_temp || reuse;
    fs::path tree = temp / "src";
    if (reuse) {
      BatchTree& bt = *opt.batch_tree;
      if (!bt.made) {
        make_grading_tree(m, opt.build.root, tree, IntakeReport{});
        for (const auto& rel : m.student_files)
          if (fs::exists(tree / rel)) bt.stubs[rel] = read_file(tree / rel);
        bt.made = true;
      }
      std::map<std::string, std::string> want = bt.stubs;
      for (const auto& f : in.accepted) want[f.rel] = f.text;
      for (const auto& [rel, text] : want) {
        std::string now;
        try {
          now = read_file(tree / rel);
        } catch (const std::exception&) {
        }
        if (now == text && fs::exists(tree / rel)) continue;
        fs::create_directories((tree / rel).parent_path());
        write_file_atomic(tree / rel, text);
      }
    } else {
      make_grading_tree(m, opt.build.root, tree, in);
    }
    BuildOptions bo = opt.build;
    bo.hide.push_back(abs_sub);
    // The batch folder (the other submissions), unless it is a top-level folder of the system.
    if (abs_sub.parent_path().has_relative_path() && abs_sub.parent_path().parent_path() != "/")
      bo.hide.push_back(abs_sub.parent_path());
    BuildResult b = build_lab(m, tree, temp / "build", bo);
    if (!b.ok) {
      LabResult r = zero_result(m, notes + "the submission did not build:\n" + summarize_build_log(b.log), since(t0));
      if (!keep) remove_tree(temp);
      return finish(r);
    }
    LabResult r;
    try {
      if (opt.differential) {
        std::shared_ptr<const Reference> ref = opt.reference ? opt.reference : prepare_reference(m, opt);
        r = run_differential(b.programs, m, *ref, opt.run);
      } else {
        r = run_lab_tests(b.programs, m, opt.run);
      }
    } catch (const std::exception& e) {
      r = zero_result(m, notes + e.what(), since(t0));
    }
    r.built = true;
    r.output = notes + r.output;
    if (!keep) remove_tree(temp);
    return finish(r);
  } catch (const std::exception& e) {
    if (!temp.empty() && !opt.keep_temp && !opt.batch_tree) remove_tree(temp);
    return finish(zero_result(m, notes + "grader error: " + e.what(), since(t0)));
  }
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
  if (name.find(';') == std::string::npos) return "";
  return "test case '" + name + "' of " + binary +
         " has a ';' in its name: CTest splits discovered names there, so it cannot run it (use ',')";
}

}  // namespace mls::grader
