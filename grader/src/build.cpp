// Building a lab: the instructor's builds (CMake, or a fixture lab's direct compiler calls) and a
// submission's build, which replays only the reference build's commands that its files change.
#include "mls/grader/build.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

#include <signal.h>
#include <unistd.h>

#include "build_internal.hpp"
#include "mls/common/error.hpp"
#include "mls/grader/link_audit.hpp"
#include "mls/grader/result.hpp"  // signal_name
#include "mls/grader/strip.hpp"
#include "mls/grader/util.hpp"

namespace mls::grader {

namespace detail {

SandboxResult run_tool(const std::vector<std::string>& argv, const fs::path& cwd, double wall_s, const StepEnv& env,
                       std::size_t capture) {
  SandboxSpec s;
  s.argv = argv;
  s.cwd = cwd;
  fs::path scratch = env.sandbox ? env.build_dir : cwd;
  s.env = minimal_env(scratch);
  s.env.insert(s.env.end(), env.extra_env.begin(), env.extra_env.end());
  s.limits.wall_s = wall_s;
  s.limits.cpu_s = env.sandbox ? env.cpu_s : wall_s * 4 + 10;
  // The build is held to the same kind of limits as the tests: memory per process, CPU time,
  // processes, output and wall clock (a trusted build only to time and output).
  s.limits.address_space_mb = env.sandbox ? static_cast<std::size_t>(env.memory_mb) : 0;
  s.limits.file_size_mb = 2048;
  s.limits.open_files = 4096;
  s.limits.processes = env.sandbox ? 64 + 8 * static_cast<std::size_t>(std::max(1, env.jobs)) : 1024;
  s.limits.output_cap = 16u << 20;
  s.limits.keep_head = 48u << 10;
  s.limits.keep_tail = 16u << 10;
  if (capture) {  // the whole output is wanted (nm's listing), up to `capture` bytes
    s.limits.output_cap = capture;
    s.limits.keep_head = capture;
    s.limits.keep_tail = 0;
  }
  s.drop_privileges = env.sandbox;
  s.uid = env.uid;
  s.tmpfs_mb = 2048;
  if (env.sandbox) {
    s.expose_ro = {env.tree};
    s.expose_rw = {env.build_dir};
    s.hide = env.hide;
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

}  // namespace detail

using namespace detail;

std::string first_build_errors(std::string_view log) {
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
  return errors;
}

std::string summarize_build_log(std::string_view log, std::size_t max_bytes) {
  const std::string errors = first_build_errors(log);
  std::string out;
  if (!errors.empty()) out = "First errors:\n" + errors + "\n";
  std::size_t room = max_bytes > out.size() ? max_bytes - out.size() : 0;
  if (room > 200) out += "End of the build log:\n" + std::string(log.substr(log.size() > room - 40 ? log.size() - (room - 40) : 0));
  return sanitize_text(out, max_bytes + 200);
}


std::vector<std::string> reference_tree_parts(const fs::path& root, const Manifest& m) {
  std::vector<std::string> parts;
  for (const auto& e : fs::directory_iterator(root)) {
    std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || name == "build") continue;
    auto st = e.symlink_status();
    int n = lab_number_of_dir(name);
    if (fs::is_regular_file(st) || (fs::is_directory(st) && (name == "common" || (n >= 0 && n <= m.lab))))
      parts.push_back(name);
  }
  std::sort(parts.begin(), parts.end());
  return parts;
}

void copy_reference_tree(const fs::path& root, const Manifest& m, const fs::path& dest) {
  fs::create_directories(dest);
  if (m.build) {
    copy_tree(root / m.dir, dest / m.dir, {"build", ".git"});
    copy_tree(root / "common" / "include", dest / "common" / "include");
    copy_tree(root / "common" / "tests" / "include", dest / "common" / "tests" / "include");  // mls/observe.hpp
    return;
  }
  for (const auto& name : reference_tree_parts(root, m)) {
    if (fs::is_regular_file(fs::symlink_status(root / name))) copy_file_readable(root / name, dest / name);
    else copy_tree(root / name, dest / name, {"build", ".git", "__pycache__"});
  }
}

// ---- build recipes: the commands of a build, as Ninja (or a direct build) runs them ------------

namespace {

std::vector<std::string> words(std::string_view line) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ') ++j;
    if (j > i) out.emplace_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (std::size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

bool is_relative_path(const std::string& w) {
  return !w.empty() && w[0] != '-' && w[0] != '/' && w != "&&" && w != ":" && w != "||";
}

}  // namespace

BuildStep parse_build_step(const std::string& line, const fs::path& src) {
  BuildStep s;
  s.line = line;
  auto w = words(line);
  auto at = [&](const std::string& flag) {
    auto it = std::find(w.begin(), w.end(), flag);
    return it != w.end() && it + 1 != w.end() ? *(it + 1) : std::string();
  };
  const std::string prefix = src.string() + "/";
  if (std::string source = at("-c"); !source.empty() && !at("-o").empty()) {
    s.kind = BuildStep::Kind::Compile;
    s.source = starts_with(source, prefix) ? source.substr(prefix.size()) : "";
    s.output = at("-o");
    return s;
  }
  if (auto qc = std::find(w.begin(), w.end(), "qc"); qc != w.end() && qc + 1 != w.end()) {
    s.kind = BuildStep::Kind::Archive;
    s.output = *(qc + 1);
    for (auto it = qc + 2; it != w.end() && *it != "&&"; ++it)
      if (is_relative_path(*it)) s.inputs.push_back(*it);
    return s;
  }
  if (std::string out = at("-o"); !out.empty()) {
    s.kind = BuildStep::Kind::Link;
    s.output = out;
    for (const auto& x : w)
      if (is_relative_path(x) && x != out) s.inputs.push_back(x);
  }
  return s;
}

BuildRecipe direct_recipe(const Manifest& m, const fs::path& tree) {
  MLS_CHECK(m.build, "direct_recipe: lab ", m.lab, " has no 'build' section in its lab.json");
  BuildRecipe r;
  r.src = fs::absolute(tree).lexically_normal();
  std::string cxx = which("c++");
  std::string flags = " -std=c++20 -O1 -g0 -Wall -Wextra -Wno-unused-parameter";
  for (const auto& f : m.build->flags) flags += " " + f;
  for (const auto& inc : m.build->include_dirs) flags += " -I" + (r.src / m.dir / inc).string();
  flags += " -I" + (r.src / "common/include").string() + " -I" + (r.src / "common/tests/include").string();
  std::string link = cxx, graded_link = cxx, student_objects;
  const std::set<std::string> student(m.student_files.begin(), m.student_files.end());
  for (const auto& src : m.build->sources) {
    std::string rel = (fs::path(m.dir) / src).generic_string();
    std::string obj = "obj/" + rel + ".o";
    r.steps.push_back(parse_build_step(cxx + flags + " -c " + (r.src / rel).string() + " -o " + obj, r.src));
    // The tests' objects first on the link line, as CMake links them: of two weak copies of an
    // inline function the linker keeps the first.
    if (student.count(rel)) {
      student_objects += " " + obj;
      continue;
    }
    link += " " + obj;
    if (m.oracle_free) {  // the graded twin's test objects: oracles compiled out (mls/testing.hpp)
      std::string graded = "obj-graded/" + rel + ".o";
      r.steps.push_back(parse_build_step(cxx + flags + " -DMLS_GRADED_BUILD=1 -Wno-unused-variable -Wno-unused-but-set-variable -c " +
                                             (r.src / rel).string() + " -o " + graded,
                                         r.src));
      graded_link += " " + graded;
    }
  }
  // The harness and common archives of the grader's build, copied into the build folder.
  const std::string libs = " grader-libs/harness.a grader-libs/common.a -pthread -o ";
  r.steps.push_back(parse_build_step(link + student_objects + libs + m.test_binary, r.src));
  r.programs[m.test_binary] = m.test_binary;
  if (m.oracle_free) {
    const std::string twin = m.graded_program(m.test_binary);
    r.steps.push_back(parse_build_step(graded_link + student_objects + libs + twin, r.src));
    r.programs[twin] = twin;
  }
  return r;
}

BuildRecipe ninja_recipe(const fs::path& src, const fs::path& build_dir, const TestPrograms& programs) {
  BuildRecipe r;
  r.src = fs::absolute(src).lexically_normal();
  r.build = fs::absolute(build_dir).lexically_normal();
  std::set<std::string> seen;
  for (const auto& [name, bin] : programs.built) {
    r.programs[name] = fs::relative(bin, r.build).generic_string();
    std::string cmd = which("ninja") + " -C '" + r.build.string() + "' -t commands '" + name + "'";
    FILE* p = ::popen(cmd.c_str(), "r");
    MLS_CHECK(p, "ninja_recipe: cannot run '", cmd, "'");
    std::string out;
    char buf[65536];
    for (std::size_t k; (k = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, k);
    int rc = ::pclose(p);
    MLS_CHECK(rc == 0, "ninja_recipe: '", cmd, "' failed (status ", rc, ")");
    for (const auto& l : split(out, '\n'))
      if (!l.empty() && seen.insert(l).second) r.steps.push_back(parse_build_step(l, r.src));
  }
  return r;
}

nlohmann::json recipe_to_json(const BuildRecipe& r) {
  nlohmann::json j;
  j["src"] = r.src.string();
  j["build"] = r.build.string();
  j["programs"] = r.programs;
  j["lines"] = nlohmann::json::array();
  for (const auto& s : r.steps) j["lines"].push_back(s.line);
  return j;
}

BuildRecipe recipe_from_json(const nlohmann::json& j) {
  BuildRecipe r;
  r.src = j.at("src").get<std::string>();
  r.build = j.at("build").get<std::string>();
  r.programs = j.at("programs").get<std::map<std::string, std::string>>();
  for (const auto& l : j.at("lines")) r.steps.push_back(parse_build_step(l.get<std::string>(), r.src));
  return r;
}

namespace {

/// Hands every entry of the build folder to the sandbox uid (files the grader copied there).
void hand_over(const fs::path& dir, const std::shared_ptr<SandboxUid>& uid) {
  if (!uid) return;
  [[maybe_unused]] int rc = ::lchown(dir.c_str(), uid->uid, uid->uid);
  for (const auto& e : fs::recursive_directory_iterator(dir)) rc = ::lchown(e.path().c_str(), uid->uid, uid->uid);
}

}  // namespace

std::string with_opt_level(const std::string& line, const std::string& level) {
  if (level.empty()) return line;
  std::vector<std::string> out;
  bool placed = false;
  std::size_t i = 0;
  while (i <= line.size()) {  // split at single spaces: the words of a Ninja command line
    std::size_t j = std::min(line.find(' ', i), line.size());
    std::string w = line.substr(i, j - i);
    if (w.size() >= 2 && w.compare(0, 2, "-O") == 0) {
      if (!placed) out.push_back(level);
      placed = true;
    } else {
      out.push_back(std::move(w));  // empty words too: a line's spacing is kept
    }
    i = j + 1;
  }
  if (!placed && !out.empty()) out.insert(out.begin() + 1, level);  // after the compiler
  std::string s;
  for (std::size_t k = 0; k < out.size(); ++k) s += (k ? " " : "") + out[k];
  return s;
}

namespace {

/// The line as this build runs it: the recipe's tree named as `tree`, no compiler launcher
/// (ccache: a submission's build never shares a cache), a compile step at `opt_level` when one
/// is given (see BuildOptions::student_opt).
std::string replay_line(const BuildStep& s, const BuildRecipe& r, const fs::path& tree, const std::string& opt_level) {
  std::string line = replace_all(s.line, r.src.string() + "/", tree.string() + "/");
  auto w = words(line);
  if (!w.empty() && fs::path(w[0]).filename() == "ccache") line = line.substr(line.find(w[0]) + w[0].size());
  if (s.kind == BuildStep::Kind::Compile) line = with_opt_level(line, opt_level);
  return line;
}

/// What a step is called in the build log.
std::string step_title(const BuildStep& s) {
  if (s.kind == BuildStep::Kind::Compile) return "c++ -c " + (s.source.empty() ? s.output : s.source);
  return std::string(s.kind == BuildStep::Kind::Archive ? "ar " : "c++ -o ") + s.output;
}

std::string ninja_escape(const std::string& v, bool path) {
  std::string out;
  for (char c : v) {
    if (c == '$' || (path && (c == ' ' || c == ':'))) out += '$';
    out += c;
  }
  return out;
}

/// The steps a build replays: the compile steps of `sources` (every one when null), then every
/// archive and link step that reads what they make or makes a test program, in order.
std::vector<const BuildStep*> replay_plan(const BuildRecipe& r, const std::set<std::string>* sources,
                                          const std::set<std::string>& wanted, std::set<std::string>& made) {
  std::vector<const BuildStep*> plan;
  for (const auto& s : r.steps)
    if (s.kind == BuildStep::Kind::Compile && (!sources || sources->count(s.source))) {
      plan.push_back(&s);
      made.insert(s.output);
    }
  std::set<std::string> programs, unwanted;
  for (const auto& [name, rel] : r.programs) (wanted.count(name) ? programs : unwanted).insert(rel);
  for (const auto& s : r.steps) {
    if (s.kind != BuildStep::Kind::Archive && s.kind != BuildStep::Kind::Link) continue;
    if (unwanted.count(s.output)) continue;
    bool reads_made = std::any_of(s.inputs.begin(), s.inputs.end(), [&](const std::string& x) { return made.count(x) > 0; });
    if (!reads_made && !programs.count(s.output)) continue;
    plan.push_back(&s);
    made.insert(s.output);
  }
  return plan;
}

/// The plan as a Ninja file: Ninja runs it in one sandboxed step (compiles in parallel, every
/// compile error reported, output folders made).
std::string replay_ninja(const BuildRecipe& r, const std::vector<const BuildStep*>& plan, const std::set<std::string>& made,
                         const fs::path& tree, const std::string& opt_level) {
  std::string n = "rule run\n  command = $cmd\n  description = $desc\n";
  for (const BuildStep* s : plan) {
    n += "build " + ninja_escape(s->output, true) + ": run";
    for (const auto& x : s->inputs)
      if (made.count(x)) n += " " + ninja_escape(x, true);
    n += "\n  cmd = " + ninja_escape(replay_line(*s, r, tree, opt_level), false) + "\n  desc = " + ninja_escape(step_title(*s), false) + "\n";
  }
  return n;
}

/// `nm -P -A` of trusted files (the reference build's), read whole.
std::string nm_trusted(const fs::path& dir, const std::vector<std::string>& files) {
  std::string out;
  for (std::size_t i = 0; i < files.size(); i += 64) {
    std::string cmd = "cd '" + dir.string() + "' && " + which("nm") + " -P -A";
    for (std::size_t k = i; k < std::min(files.size(), i + 64); ++k) cmd += " '" + files[k] + "'";
    cmd += " 2>/dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    MLS_CHECK(p, "link audit: cannot run '", cmd, "'");
    char buf[65536];
    for (std::size_t k; (k = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, k);
    ::pclose(p);
  }
  return out;
}

/// Whether a link input is the tests' or the harness's (not a library a student may use).
bool test_side(const std::string& input) {
  const std::string name = fs::path(input).filename().string();
  if (name.size() > 2 && name.compare(name.size() - 2, 2, ".o") == 0) return true;  // an object on the link line
  return name.find("catch_main") != std::string::npos || name.find("harness") != std::string::npos ||
         name.find("_test") != std::string::npos;
}

/// What a submission of this recipe is audited against: the symbols of the reference build's
/// objects, read once per reference build folder.
std::shared_ptr<const LinkAuditContext> audit_context(const BuildRecipe& r, const std::vector<const BuildStep*>& plan,
                                                      const std::set<std::string>& made) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const LinkAuditContext>> cache;
  std::set<std::string> student_objs, inputs, tests;
  for (const BuildStep* s : plan) {
    if (s->kind == BuildStep::Kind::Compile) student_objs.insert(s->output);
    for (const auto& x : s->inputs)
      if (!made.count(x)) {
        inputs.insert(x);
        if (s->kind == BuildStep::Kind::Link && test_side(x)) tests.insert(x);
      }
  }
  std::string key = r.build.string();
  for (const auto& x : student_objs) key += "|" + x;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  auto ctx = std::make_shared<LinkAuditContext>();
  std::vector<std::string> files(student_objs.begin(), student_objs.end());
  files.insert(files.end(), inputs.begin(), inputs.end());
  std::set<std::string> library_keys;
  std::map<std::string, std::set<std::string>> test_keys_of;  // key -> a symbol
  for (const auto& [file, symbols] : parse_nm(nm_trusted(r.build, files))) {
    // An archive member is keyed "archive[member]".
    const std::string path = file.substr(0, file.find('['));
    const bool student = student_objs.count(path) > 0, test = tests.count(path) > 0;
    for (const NmSymbol& sym : symbols) {
      const SymbolRole role = symbol_role(sym.type);
      if (role == SymbolRole::Local || role == SymbolRole::Undefined) continue;
      const std::string k = scope_key(symbol_scope(sym.name));
      if (student) {
        ctx->allowed.insert(sym.name);
        if (role == SymbolRole::Strong && !k.empty()) ctx->lab_keys.insert(k);
        continue;
      }
      ctx->others.insert(sym.name);
      if (test) {
        if (role == SymbolRole::Strong) ctx->test_defined.insert(sym.name);
        test_keys_of[k].insert(sym.name);
      } else {
        library_keys.insert(k);
      }
    }
  }
  // Scopes only the tests define anything in (a helper namespace such as lab 1's `ref`).
  for (const auto& [k, syms] : test_keys_of)
    if (!k.empty() && k != "?" && k.rfind("mls", 0) != 0 && k != "std" && k != "__gnu_cxx" && !library_keys.count(k) &&
        !ctx->lab_keys.count(k))
      ctx->test_keys.insert(k);
  cache[key] = ctx;
  return ctx;
}

/// The link audit of a submission's compiled objects (in the build folder): nm runs sandboxed on
/// them; a violation fails the build with one `error:` line per symbol. True when they may be
/// linked.
bool link_audit(const BuildRecipe& r, const std::vector<const BuildStep*>& plan, const std::set<std::string>& made,
                const StepEnv& env, double wall_s, BuildResult& b) {
  std::vector<std::string> argv = {which("nm"), "-P", "-A"};
  for (const BuildStep* s : plan)
    if (s->kind == BuildStep::Kind::Compile) argv.push_back(s->output);
  if (argv.size() == 3) return true;
  constexpr std::size_t kCapture = 32u << 20;
  SandboxResult nm = run_tool(argv, env.build_dir, wall_s, env, kCapture);
  if (!nm.started || !nm.exited || nm.exit_code != 0 || nm.output_limit) {
    b.log += "$ nm (the link audit)\nerror: link audit: nm failed on the student objects" +
             std::string(nm.output_limit ? " (more than 32 MiB of symbols)" : "") + "\n" + nm.err.substr(0, 2000) + "\n";
    return false;
  }
  auto ctx = audit_context(r, plan, made);
  std::vector<std::string> why;
  for (const auto& [file, symbols] : parse_nm(nm.out)) {
    // The object's name as the student knows it: its source file.
    std::string shown = file;
    for (const BuildStep* s : plan)
      if (s->kind == BuildStep::Kind::Compile && s->output == file && !s->source.empty()) shown = s->source;
    for (auto& w : audit_student_object(shown, symbols, *ctx)) why.push_back(std::move(w));
  }
  b.log += "$ nm (the link audit: what the student objects define and use)\n";
  if (why.empty()) return true;
  for (std::size_t i = 0; i < why.size() && i < 40; ++i) b.log += "error: link audit: " + why[i] + "\n";
  if (why.size() > 40) b.log += "error: link audit: ... and " + std::to_string(why.size() - 40) + " more\n";
  b.log += "[the link audit rejected the submission: a student file may define only the lab's functions (and helpers "
           "of its own in the lab's namespace or an unnamed namespace), and may use nothing of the tests or the "
           "grader's harness]\n";
  return false;
}

/// Builds the replay plan of `sources` (see replay_plan) in the environment's build folder: the
/// inputs it does not make are copied from the recipe's build folder, then one sandboxed Ninja
/// run does the rest. A submission's build (`sources` given) compiles first, then its objects
/// pass the link audit (link_audit.hpp) before anything is linked. Returns the test programs.
TestPrograms replay(const BuildRecipe& r, const std::set<std::string>* sources, const std::set<std::string>& wanted,
                    const StepEnv& env, double wall_s, BuildResult& b, const std::string& opt_level = "") {
  std::set<std::string> made;
  auto plan = replay_plan(r, sources, wanted, made);
  std::error_code ec;
  const bool same_folder = fs::equivalent(r.build, env.build_dir, ec);
  for (const BuildStep* s : plan)
    for (const auto& x : s->inputs) {
      if (made.count(x) || same_folder) continue;
      fs::create_directories((env.build_dir / x).parent_path());
      fs::copy_file(r.build / x, env.build_dir / x, fs::copy_options::overwrite_existing);
    }
  write_file_atomic(env.build_dir / "replay.ninja", replay_ninja(r, plan, made, env.tree, opt_level));
  hand_over(env.build_dir, env.uid);
  const std::vector<std::string> ninja = {which("ninja"), "-k", "0", "-j", std::to_string(env.jobs), "-f", "replay.ninja"};
  bool audited = true;
  if (sources) {
    std::vector<std::string> compile = ninja;
    for (const BuildStep* s : plan)
      if (s->kind == BuildStep::Kind::Compile) compile.push_back(s->output);
    const auto t0 = Clock::now();
    audited = step(b, run_tool(compile, env.build_dir, wall_s, env), "ninja (the student files)") &&
              link_audit(r, plan, made, env, std::max(5.0, wall_s - since(t0)), b);
  }
  if (audited)
    step(b, run_tool(ninja, env.build_dir, wall_s, env), sources ? "ninja (archive and link)" : "ninja (the replayed steps)");
  TestPrograms out;
  for (const auto& [name, rel] : r.programs) {
    if (!wanted.count(name)) continue;
    if (fs::exists(env.build_dir / rel)) out.built[name] = env.build_dir / rel;
    else out.failed[name] = "the test program " + name + " did not build:\n" + summarize_build_log(b.log, 3000);
  }
  return out;
}

/// The instructor's own (trusted) builds, the reference's first build on a slow machine
/// included, are stopped only after this long; a submission's build has the manifest's limit.
constexpr double kTrustedBuildLimit_s = 4 * 3600;

/// A build's time: its limit (the options' and the manifest's for a submission, a generous one
/// for a trusted build) and what is left of it.
struct Budget {
  Clock::time_point t0 = Clock::now();
  double total;
  Budget(const Manifest& m, const BuildOptions& opt)
      : total(opt.trusted ? std::max(kTrustedBuildLimit_s, opt.time_limit_s) : std::min(opt.time_limit_s, m.build_time_limit_s)) {}
  double left() const { return std::max(5.0, total - since(t0)); }
};

/// The environment of a build's steps: sandboxed for a grading copy (one reserved uid owning the
/// build folder), trusted for the instructor's own trees.
std::optional<StepEnv> step_env(const Manifest& m, const fs::path& tree, const fs::path& build_dir, const BuildOptions& opt,
                                double budget, BuildResult& b) {
  fs::create_directories(build_dir);
  StepEnv env;
  env.sandbox = !fs::equivalent(tree, opt.root) && !opt.trusted && !opt.generated_from_reference;
  env.tree = fs::absolute(tree).lexically_normal();
  env.build_dir = fs::absolute(build_dir).lexically_normal();
  env.memory_mb = m.build_memory_limit_mb;
  env.cpu_s = budget;
  env.jobs = std::max(1, opt.jobs);
  env.hide = opt.hide;
  env.hide.push_back(opt.root);
  if (!env.sandbox) return env;
  try {
    env.uid = opt.build_uid ? opt.build_uid : reserve_sandbox_uid();
  } catch (const std::exception& e) {
    b.log += std::string("[") + e.what() + "]\n";
    return std::nullopt;
  }
  if (env.uid && ::chown(build_dir.c_str(), env.uid->uid, env.uid->uid) != 0) {
    b.log += "[cannot hand the build folder to the sandbox uid]\n";
    return std::nullopt;
  }
  return env;
}

/// At the uid level, nothing the build's uid left in the shared temporary folders survives it.
struct Sweep {
  const StepEnv& env;
  ~Sweep() {
    if (env.uid && isolation().level == Isolation::Uid) sweep_uid(env.uid->uid);
  }
};

std::string cmake_list(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ";") + x;
  return s;
}

/// Configures a CMake build of `tree` (labs up to m.lab) or, in the checkout, of its preset.
bool configure(const Manifest& m, const fs::path& tree, const fs::path& build_dir, const BuildOptions& opt, StepEnv& env,
               double wall_s, BuildResult& b) {
  std::string cmake = which("cmake");
  if (fs::equivalent(tree, opt.root)) {
    if (fs::exists(build_dir / "CMakeCache.txt")) return true;
    return step(b, run_tool({cmake, "--preset", opt.preset}, tree, wall_s, env), "cmake --preset " + opt.preset);
  }
  std::vector<std::string> parts;
  for (const auto& e : fs::directory_iterator(tree)) {
    int n = lab_number_of_dir(e.path().filename().string());
    if (n >= 0 && n <= m.lab && fs::exists(e.path() / "CMakeLists.txt")) parts.push_back(e.path().filename().string());
  }
  std::sort(parts.begin(), parts.end());
  std::vector<std::string> argv = {cmake, "-S", env.tree.string(), "-B", env.build_dir.string(), "-G", "Ninja",
                                   "-DCMAKE_BUILD_TYPE=Release", std::string("-DMLS_WERROR=") + (opt.werror ? "ON" : "OFF"),
                                   std::string("-DMLS_BENCH=") + (opt.benchmarks ? "ON" : "OFF"), "-DMLS_HANDOUT_TESTS=OFF", "-DMLS_GRADER_BUILD=ON",
                                   "-DMLS_LABS=" + cmake_list(parts)};
  if (!opt.release_opt.empty()) argv.push_back("-DMLS_RELEASE_OPT=" + opt.release_opt);
  // The trusted reference build and a handout generated from it may use the user's ccache (a
  // student build never does).
  if ((opt.trusted || opt.generated_from_reference) && which("ccache") != "ccache") {
    argv.push_back("-DCMAKE_CXX_COMPILER_LAUNCHER=" + which("ccache"));
    argv.push_back("-DCMAKE_C_COMPILER_LAUNCHER=" + which("ccache"));
    const char* home = std::getenv("HOME");
    const char* dir = std::getenv("CCACHE_DIR");
    if (dir && *dir) env.extra_env.push_back(std::string("CCACHE_DIR=") + dir);
    else if (home && *home) env.extra_env.push_back(std::string("CCACHE_DIR=") + home + "/.cache/ccache");
    env.extra_env.push_back("CCACHE_BASEDIR=" + env.tree.string());
  }
  return step(b, run_tool(argv, build_dir, wall_s, env), "cmake (configure)");
}

/// Builds the manifest's test programs with CMake: `test_binary` first, then each other one on
/// its own (one the configuration does not define, or one that fails, leaves the others). A
/// trusted (reference) build of an oracle-free lab also builds each program's graded twin, which
/// a submission's build replays.
void build_cmake_targets(const Manifest& m, const fs::path& build_dir, const StepEnv& env, bool benchmarks, bool twins,
                         const std::function<double()>& left, BuildResult& b) {
  std::string cmake = which("cmake");
  std::vector<std::string> targets = m.test_binaries();
  if (twins && m.oracle_free)
    for (const auto& t : m.test_binaries()) targets.push_back(m.graded_program(t));
  if (benchmarks)
    for (const auto& bm : m.benchmarks)
      if (std::find(targets.begin(), targets.end(), bm.binary) == targets.end()) targets.push_back(bm.binary);
  for (const auto& target : targets) {
    BuildResult one;
    std::vector<std::string> a = {cmake, "--build", build_dir.string(), "--target", target, "-j", std::to_string(env.jobs)};
    bool ok = step(one, run_tool(a, build_dir, left(), env), "cmake --build --target " + target);
    fs::path bin = build_dir / m.dir / target;
    if (ok && fs::exists(bin)) {
      b.programs.built[target] = bin;
    } else if (target != m.test_binary && (one.log.find("unknown target") != std::string::npos ||
                                           one.log.find("No rule to make target") != std::string::npos)) {
      b.programs.not_configured[target] = "the build configuration defines no target " + target +
                                          " (e.g. CUDA was not found at configure time)";
    } else {
      b.programs.failed[target] = "the test program " + target + " did not build:\n" + summarize_build_log(one.log, 3000);
    }
    b.log += one.log;
    if (target == m.test_binary && !b.programs.built.count(target)) return;
  }
}

}  // namespace

TestPrograms graded_programs(const Manifest& m, const TestPrograms& p) {
  if (!m.oracle_free) return p;
  TestPrograms out;
  for (const auto& t : m.test_binaries()) {
    const std::string g = m.graded_program(t);
    if (auto it = p.built.find(g); it != p.built.end()) out.built[t] = it->second;
    if (auto it = p.not_configured.find(g); it != p.not_configured.end()) out.not_configured[t] = it->second;
    if (auto it = p.failed.find(g); it != p.failed.end()) out.failed[t] = it->second;
  }
  return out;
}


BuildResult build_lab(const Manifest& m, const fs::path& tree, const fs::path& build_dir, const BuildOptions& opt) {
  BuildResult b;
  Budget budget(m, opt);
  auto left = [&] { return budget.left(); };
  auto env = step_env(m, tree, build_dir, opt, budget.total, b);
  if (!env) return b;
  Sweep sweep{*env};
  if (m.build) {
    // A fixture lab's direct build: its recipe, every step; the grader's harness and common
    // archives are copied in (the sandbox cannot see the grader's build).
    b.recipe = direct_recipe(m, tree);
    b.recipe.build = env->build_dir;
    fs::create_directories(env->build_dir / "grader-libs");
    fs::copy_file(opt.harness_lib, env->build_dir / "grader-libs/harness.a", fs::copy_options::overwrite_existing);
    fs::copy_file(opt.common_lib, env->build_dir / "grader-libs/common.a", fs::copy_options::overwrite_existing);
    hand_over(env->build_dir, env->uid);
    std::set<std::string> wanted = {m.test_binary};
    if (opt.trusted) wanted.insert(m.graded_program(m.test_binary));
    b.programs = replay(b.recipe, nullptr, wanted, *env, left(), b);
  } else if (configure(m, tree, build_dir, opt, *env, left(), b)) {
    build_cmake_targets(m, build_dir, *env, opt.benchmarks, opt.trusted, left, b);
  }
  b.ok = b.programs.built.count(m.test_binary) > 0;
  // A reference build without the twins a submission is linked as cannot grade anything.
  if (opt.trusted && m.oracle_free)
    for (const auto& t : m.test_binaries())
      if (b.programs.built.count(t) && !b.programs.built.count(m.graded_program(t))) b.ok = false;
  if (b.ok) b.binary = b.programs.built.at(m.test_binary);
  b.wall_s = since(budget.t0);
  return b;
}

BuildResult build_submission(const Manifest& m, const fs::path& tree, const fs::path& build_dir, const BuildRecipe& recipe,
                             const BuildOptions& opt) {
  BuildResult b;
  Budget budget(m, opt);
  auto env = step_env(m, tree, build_dir, opt, budget.total, b);
  if (!env) return b;
  Sweep sweep{*env};
  std::set<std::string> student(m.student_files.begin(), m.student_files.end());
  std::set<std::string> wanted;
  // The test programs only: a leaderboard figure is the grader's timing of a check test
  // (time_check), never a benchmark program's report. In an oracle-free lab, their graded
  // twins: the submission's process never holds the tests' expected values.
  for (const auto& t : m.test_binaries()) wanted.insert(m.graded_program(t));
  const bool reference_flags = opt.benchmarks || m.student_opt == "reference";
  b.programs = replay(recipe, &student, wanted, *env, budget.left(), b, reference_flags ? "" : opt.student_opt);
  for (const auto& t : wanted)
    if (!recipe.programs.count(t)) b.programs.not_configured[t] = "the reference build has no program " + t;
  b.programs = graded_programs(m, b.programs);
  b.ok = b.programs.built.count(m.test_binary) > 0;
  if (b.ok) b.binary = b.programs.built.at(m.test_binary);
  b.wall_s = since(budget.t0);
  return b;
}

}  // namespace mls::grader
