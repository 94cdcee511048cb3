// Lab 4 part 2: run-time compilation of generated C++ kernels (see mls/kernels/jit.hpp).
#include "mls/kernels/jit.hpp"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <unordered_map>

#include "jit_process.hpp"
#include "mls/common/error.hpp"
#include "mls/common/file.hpp"
#include "mls/common/rng.hpp"
#include "mls/kernels/roofline.hpp"

namespace fs = std::filesystem;

namespace mls::kernels::jit {

// ---- the CPU ------------------------------------------------------------------------------------

std::string CpuInfo::isa() const {
  const std::pair<bool, const char*> flags[] = {
      {avx2, "avx2"},         {fma, "fma"},         {avx512f, "avx512f"},   {avx512bw, "avx512bw"},
      {avx512vl, "avx512vl"}, {amx_tile, "amx-tile"}, {amx_bf16, "amx-bf16"}, {amx_int8, "amx-int8"}};
  std::string s;
  for (const auto& [on, name] : flags) {
    if (!on) continue;
    if (!s.empty()) s += ' ';
    s += name;
  }
  return s;
}

namespace {

#if defined(__x86_64__) || defined(__i386__)
/// Vendor, family/model and AMX (cpuid bits, and the OS saving tile state: XCR0 bits 17 and 18).
void read_cpuid(CpuInfo& c) {
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &cx, &d)) return;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &cx, 4);
  c.vendor = vendor;
  const unsigned max_leaf = a;
  if (!__get_cpuid(1, &a, &b, &cx, &d)) return;
  const int base_family = static_cast<int>((a >> 8) & 0xf), base_model = static_cast<int>((a >> 4) & 0xf);
  c.family = base_family == 0xf ? base_family + static_cast<int>((a >> 20) & 0xff) : base_family;
  c.model_id = base_family == 0x6 || base_family == 0xf ? (static_cast<int>((a >> 16) & 0xf) << 4) + base_model
                                                        : base_model;
  const bool osxsave = (cx >> 27) & 1;
  if (max_leaf < 7 || !osxsave) return;
  unsigned xlo = 0, xhi = 0;
  __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
  const bool tiles_saved = ((xlo >> 17) & 3) == 3;
  __cpuid_count(7, 0, a, b, cx, d);
  c.amx_bf16 = tiles_saved && ((d >> 22) & 1);
  c.amx_tile = tiles_saved && ((d >> 24) & 1);
  c.amx_int8 = tiles_saved && ((d >> 25) & 1);
}
#endif

CpuInfo read_cpu_info() {
  CpuInfo c;
  c.model = cpu_model_name();
  c.vendor = "unknown";
#if defined(__x86_64__) || defined(__i386__)
  read_cpuid(c);
  // GCC's checks include the OS's support (XCR0) for the AVX and AVX-512 state.
  c.avx2 = __builtin_cpu_supports("avx2");
  c.fma = __builtin_cpu_supports("fma");
  c.avx512f = __builtin_cpu_supports("avx512f");
  c.avx512bw = __builtin_cpu_supports("avx512bw");
  c.avx512vl = __builtin_cpu_supports("avx512vl");
#endif
  c.cores = std::max(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
  return c;
}

}  // namespace

const CpuInfo& cpu_info() {
  static const CpuInfo info = read_cpu_info();
  return info;
}

std::string cpu_key_of(const CpuInfo& cpu) {
  std::string vendor;
  if (cpu.vendor == "GenuineIntel")
    vendor = "intel";
  else if (cpu.vendor == "AuthenticAMD")
    vendor = "amd";
  else
    for (char ch : cpu.vendor)
      if (std::isalnum(static_cast<unsigned char>(ch)) && vendor.size() < 12)
        vendor += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (vendor.empty()) vendor = "unknown";
  const char* level = cpu.amx_tile ? "amx" : cpu.avx512f ? "avx512" : cpu.avx2 && cpu.fma ? "avx2" : "base";
  const auto h = static_cast<unsigned>(mls::fnv1a64(cpu.model + "\n" + cpu.isa()) & 0xffffffffu);
  char buf[128];
  std::snprintf(buf, sizeof buf, "%s-%d.%d-%s-%08x", vendor.c_str(), cpu.family, cpu.model_id, level, h);
  return buf;
}

std::string cpu_key() {
  static const std::string key = cpu_key_of(cpu_info());
  return key;
}

std::vector<std::string> isa_compile_flags(const CpuInfo& cpu) {
  std::vector<std::string> f = {"-march=x86-64"};
  const std::pair<bool, const char*> flags[] = {
      {cpu.avx2, "-mavx2"},         {cpu.fma, "-mfma"},           {cpu.avx512f, "-mavx512f"},
      {cpu.avx512bw, "-mavx512bw"}, {cpu.avx512vl, "-mavx512vl"}, {cpu.amx_tile, "-mamx-tile"},
      {cpu.amx_bf16, "-mamx-bf16"}, {cpu.amx_int8, "-mamx-int8"}};
  for (const auto& [on, flag] : flags)
    if (on) f.emplace_back(flag);
  return f;
}

// ---- small pure helpers -------------------------------------------------------------------------

namespace {
/// The lines of `text` (a final '\n' ends the last line; it does not start an empty one).
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t nl = text.find('\n', at);
    const std::size_t end = nl == std::string_view::npos ? text.size() : nl;
    lines.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return lines;
}

std::string more_lines(std::size_t n) { return "... (" + std::to_string(n) + " more lines)\n"; }
}  // namespace

std::string number_lines(std::string_view source, std::size_t max_lines) {
  const auto lines = split_lines(source);
  const std::size_t shown = std::min(max_lines, lines.size());
  const int width = static_cast<int>(std::to_string(std::max<std::size_t>(shown, 1)).size());
  std::string out;
  for (std::size_t i = 0; i < shown; ++i) {
    char num[32];
    std::snprintf(num, sizeof num, "%*zu | ", width, i + 1);
    out += num;
    out += lines[i];
    out += '\n';
  }
  if (lines.size() > shown) out += more_lines(lines.size() - shown);
  return out;
}

std::string first_lines(std::string_view text, std::size_t max_lines) {
  const auto lines = split_lines(text);
  std::string out;
  for (std::size_t i = 0; i < std::min(max_lines, lines.size()); ++i) {
    out += lines[i];
    out += '\n';
  }
  if (lines.size() > max_lines) out += more_lines(lines.size() - max_lines);
  return out;
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && a.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                         "0123456789_@%+=:,./-") == std::string::npos;
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char ch : a) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    out += '\'';
  }
  return out;
}

// ---- the compiler -------------------------------------------------------------------------------

namespace {

/// Whether `p` is a regular file this process may execute; else why not, in `why`.
bool is_executable(const fs::path& p, std::string& why) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) {
    why = errno == ENOENT ? "no such file" : mls::errno_text(errno);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    why = "not a regular file";
    return false;
  }
  if (::access(p.c_str(), X_OK) != 0) {
    why = "not executable";
    return false;
  }
  return true;
}

std::string path_variable() {
  const char* p = std::getenv("PATH");
  return p && *p ? p : "/usr/local/bin:/usr/bin:/bin";
}

/// The absolute path of `name` (a path, or a program name looked up on PATH), or "" with `why`.
std::string resolve_program(const std::string& name, std::string& why) {
  if (name.find('/') != std::string::npos) return is_executable(name, why) ? fs::absolute(name).string() : "";
  const std::string path = path_variable();
  for (std::size_t at = 0; at <= path.size();) {
    const std::size_t colon = std::min(path.find(':', at), path.size());
    const std::string dir = colon > at ? path.substr(at, colon - at) : ".";
    std::string ignored;
    if (is_executable(fs::path(dir) / name, ignored)) return fs::absolute(fs::path(dir) / name).string();
    at = colon + 1;
  }
  why = "not on PATH";
  return "";
}

std::string getenv_string(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

Compiler compiler_at(const std::string& path_or_name) {
  std::string why;
  const std::string path = resolve_program(path_or_name, why);
  MLS_CHECK(!path.empty(), "jit: no C++ compiler found: tried '", path_or_name, "' (", why, ")");
  static std::mutex mu;
  static std::map<std::string, std::string> versions;
  {
    std::lock_guard lock(mu);
    if (auto it = versions.find(path); it != versions.end()) return {path, it->second};
  }
  const std::vector<std::string> argv = {path, "--version"};
  const auto r = detail::run_process(argv, 30);
  MLS_CHECK(r.ok(), "jit: the compiler does not answer '", shell_join(argv), "' (", r.describe(30), "):\n",
            first_lines(r.output, 10));
  std::string version = split_lines(r.output).empty() ? "" : std::string(split_lines(r.output)[0]);
  std::lock_guard lock(mu);
  versions[path] = version;
  return {path, version};
}

Compiler find_compiler() {
  if (const std::string chosen = getenv_string("MLS_JIT_CXX"); !chosen.empty()) {
    std::string why;
    MLS_CHECK(!resolve_program(chosen, why).empty(), "jit: no C++ compiler found: tried $MLS_JIT_CXX='", chosen,
              "' (", why, "); when set, it is the only compiler tried");
    return compiler_at(chosen);
  }
  std::vector<std::pair<std::string, std::string>> candidates;  // (name, how it is shown)
  if (const std::string cxx = getenv_string("CXX"); !cxx.empty()) candidates.emplace_back(cxx, "$CXX='" + cxx + "'");
  for (const char* name : {"c++", "g++", "clang++"}) candidates.emplace_back(name, name);
  std::string tried;
  for (const auto& [name, shown] : candidates) {
    std::string why;
    if (!resolve_program(name, why).empty()) return compiler_at(name);
    tried += (tried.empty() ? "" : ", ") + shown + " (" + why + ")";
  }
  mls::fail("jit: no C++ compiler found: tried ", tried, " with PATH=", path_variable(),
            "; install g++ or set $MLS_JIT_CXX to a compiler's path");
}

std::vector<std::string> compile_flags(const CompileOptions& o) {
  MLS_CHECK(!o.std.empty(), "jit: CompileOptions::std is empty, expected a standard such as \"c++20\"");
  std::vector<std::string> f;
  if (!o.opt_level.empty()) f.push_back(o.opt_level);
  if (o.isa_flags.empty())
    f.emplace_back("-march=native");
  else
    f.insert(f.end(), o.isa_flags.begin(), o.isa_flags.end());
  for (const char* x : {"-fPIC", "-shared"}) f.emplace_back(x);
  f.push_back("-std=" + o.std);
  f.emplace_back("-Wall");
  f.emplace_back("-Wextra");
  if (o.warnings_as_errors) f.emplace_back("-Werror");
  f.emplace_back("-fdiagnostics-color=never");
  f.insert(f.end(), o.extra_flags.begin(), o.extra_flags.end());
  return f;
}

std::string cache_key(std::string_view source, const Compiler& compiler, const std::vector<std::string>& flags,
                      std::string_view cpu_key) {
  // Every part is length-prefixed, so no two different keys spell the same text.
  std::string text = "mls-jit 1";
  auto add = [&](std::string_view part) {
    text += '\n';
    text += std::to_string(part.size());
    text += ':';
    text += part;
  };
  add(compiler.path);
  add(compiler.version);
  add(cpu_key);
  for (const auto& f : flags) add(f);
  add(source);
  // Two 64-bit FNV-1a hashes with different first bytes: 128 bits, collisions out of reach.
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(mls::fnv1a64("a" + text)),
                static_cast<unsigned long long>(mls::fnv1a64("b" + text)));
  return buf;
}

fs::path jit_cache_dir() {
  if (const std::string dir = getenv_string("MLS_JIT_CACHE"); !dir.empty()) return dir;
  const fs::path root = default_peak_cache_dir();
  return root.empty() ? fs::path() : root / "jit";
}

// ---- loaded modules, the cache and the memo ------------------------------------------------------

struct ModuleAccess {
  static LoadedModule make(void* handle, fs::path path, std::string key) {
    LoadedModule m;
    m.handle_ = std::shared_ptr<void>(handle, [](void* h) { ::dlclose(h); });
    m.path_ = std::move(path);
    m.key_ = std::move(key);
    return m;
  }
};

void* LoadedModule::raw_symbol(const std::string& name) const {
  MLS_CHECK(handle_ != nullptr, "jit: symbol '", name, "': no library is loaded (an empty LoadedModule)");
  ::dlerror();
  void* p = ::dlsym(handle_.get(), name.c_str());
  if (p == nullptr) {
    const char* err = ::dlerror();
    mls::fail("jit: symbol '", name, "' not found in '", path_.string(), "' (", err ? err : "null address",
              "); export it from the source with extern \"C\" and check its spelling");
  }
  return p;
}

namespace {

struct Counters {
  std::atomic<std::int64_t> memo_hits{0}, disk_hits{0}, compiles{0}, recompiled_damaged{0}, fallbacks{0};
};
Counters& counters() {
  static Counters c;
  return c;
}

/// One memo entry: the (possibly still running) compilation of a key.
struct MemoEntry {
  std::uint64_t id = 0;
  std::shared_future<LoadedModule> module;
};
/// The memo and the cache folders found writable, never destroyed: the libraries it holds stay
/// loaded until the process ends (static destructors may still call into them).
struct Memo {
  std::mutex mu;
  std::unordered_map<std::string, MemoEntry> entries;
  std::uint64_t next_id = 1;
  std::map<fs::path, fs::path> writable;  // cache folder -> where compiles go
};
Memo& memo() {
  static Memo* m = new Memo;
  return *m;
}

/// This process's private folder ($TMPDIR/mls-jit-XXXXXX), removed with its files at exit.
struct PrivateDir {
  fs::path path;
  std::string error;
  PrivateDir() {
    std::error_code ec;
    const fs::path tmp = fs::temp_directory_path(ec);
    std::string tmpl = ((ec ? fs::path("/tmp") : tmp) / "mls-jit-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) != nullptr)
      path = tmpl;
    else
      error = "cannot make '" + tmpl + "': " + mls::errno_text(errno);
  }
  ~PrivateDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};
const fs::path& private_dir() {
  static PrivateDir d;
  MLS_CHECK(!d.path.empty(), "jit: no cache folder and no private temporary folder: ", d.error);
  return d.path;
}

/// Why `dir` cannot take new files ("" when it can): made if missing, then a probe file created.
std::string unwritable_reason(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return "cannot create it: " + ec.message();
  std::string probe = (dir / ".probe.XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) return "cannot write in it: " + mls::errno_text(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

/// Where compiles for cache folder `dir` go: `dir` itself, or the private folder (said once).
fs::path compile_dir(const fs::path& dir) {
  Memo& m = memo();
  {
    std::lock_guard lock(m.mu);
    if (auto it = m.writable.find(dir); it != m.writable.end()) return it->second;
  }
  fs::path use = dir;
  if (dir.empty()) {
    use = private_dir();
  } else if (const std::string why = unwritable_reason(dir); !why.empty()) {
    use = private_dir();
    std::cerr << "mls jit: warning: cache folder '" << dir.string() << "' is not writable (" << why
              << "); this process compiles into '" << use.string() << "'\n";
  }
  std::lock_guard lock(m.mu);
  return m.writable.emplace(dir, use).first->second;
}

/// dlopen(path); an empty module with `why` set when it does not load.
LoadedModule try_load(const fs::path& path, const std::string& key, std::string& why) {
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* err = ::dlerror();
    why = err ? err : "dlopen failed";
    return {};
  }
  return ModuleAccess::make(h, path, key);
}

/// Runs the compiler on `source` in `dir` and renames the library into place as <key>.so.
LoadedModule compile_into(const fs::path& dir, std::string_view source, const Compiler& cxx,
                          const std::vector<std::string>& flags, const std::string& key, double timeout_s) {
  static std::atomic<std::uint64_t> serial{0};
  const fs::path src = dir / (key + ".cpp"), out = dir / (key + ".so");
  const fs::path tmp = dir / ("." + key + ".so.tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++));
  mls::write_file_atomic(src, source, "jit");
  std::vector<std::string> argv = {cxx.path};
  argv.insert(argv.end(), flags.begin(), flags.end());
  for (const std::string& a : {std::string("-o"), tmp.string(), src.string()}) argv.push_back(a);
  const detail::ProcessResult r = detail::run_process(argv, timeout_s);
  if (!r.ok()) {
    std::error_code ec;
    fs::remove(tmp, ec);
    MLS_CHECK(r.spawn_errno == 0, "jit: cannot run the compiler '", cxx.path, "': ", r.describe(timeout_s),
              "\n  command: ", shell_join(argv));
    MLS_CHECK(!r.timed_out, "jit: the compiler ", r.describe(timeout_s),
              " (CompileOptions::timeout_s)\n  command: ", shell_join(argv));
    mls::fail("jit: the compiler failed (", r.describe(timeout_s), ")\n  command: ", shell_join(argv),
              "\n  compiler output (first 40 lines):\n", first_lines(r.output, 40), "  source '", src.string(),
              "':\n", number_lines(source, 200));
  }
  if (::rename(tmp.c_str(), out.c_str()) != 0) {
    const int err = errno;
    std::error_code ec;
    fs::remove(tmp, ec);
    mls::fail("jit: cannot rename '", tmp.string(), "' to '", out.string(), "': ", mls::errno_text(err));
  }
  std::string why;
  LoadedModule m = try_load(out, key, why);
  MLS_CHECK(static_cast<bool>(m), "jit: cannot load the compiled library '", out.string(), "': ", why,
            " (a folder on a noexec mount? set $MLS_JIT_CACHE to another)");
  return m;
}

/// The module of `key`: from the disk cache in `dir`, else compiled (into `dir` or the private folder).
LoadedModule load_or_compile(const fs::path& dir, std::string_view source, const Compiler& cxx,
                             const std::vector<std::string>& flags, const std::string& key, double timeout_s) {
  Counters& c = counters();
  bool damaged = false;
  if (!dir.empty()) {
    const fs::path cached = dir / (key + ".so");
    std::error_code ec;
    if (fs::exists(cached, ec)) {
      std::string why;
      if (LoadedModule m = try_load(cached, key, why)) {
        ++c.disk_hits;
        return m;
      }
      damaged = true;  // compiled again below and renamed over it
    }
  }
  const fs::path target = compile_dir(dir);
  LoadedModule m = compile_into(target, source, cxx, flags, key, timeout_s);
  ++c.compiles;
  if (damaged) ++c.recompiled_damaged;
  if (target != dir) ++c.fallbacks;
  return m;
}

}  // namespace

LoadedModule compile_shared(std::string_view source, const CompileOptions& options) {
  MLS_CHECK(std::isfinite(options.timeout_s) && options.timeout_s > 0, "jit: compile_shared: timeout_s = ",
            options.timeout_s, ", expected a positive number of seconds");
  const Compiler cxx = options.compiler.empty() ? find_compiler() : compiler_at(options.compiler);
  const std::vector<std::string> flags = compile_flags(options);
  const std::string key = cache_key(source, cxx, flags, cpu_key());
  const fs::path dir = options.cache_dir.empty() ? jit_cache_dir() : options.cache_dir;
  const std::string memo_key = dir.string() + '\n' + key;
  Memo& m = memo();
  std::promise<LoadedModule> promise;
  std::uint64_t id = 0;
  {
    std::unique_lock lock(m.mu);
    if (auto it = m.entries.find(memo_key); it != m.entries.end()) {
      auto fut = it->second.module;
      lock.unlock();
      ++counters().memo_hits;
      return fut.get();  // waits while another thread compiles it
    }
    id = m.next_id++;
    m.entries.emplace(memo_key, MemoEntry{id, promise.get_future().share()});
  }
  try {
    LoadedModule mod = load_or_compile(dir, source, cxx, flags, key, options.timeout_s);
    promise.set_value(mod);
    return mod;
  } catch (...) {
    {
      std::lock_guard lock(m.mu);  // a failure is not remembered: the next call tries again
      if (auto it = m.entries.find(memo_key); it != m.entries.end() && it->second.id == id) m.entries.erase(it);
    }
    promise.set_exception(std::current_exception());
    throw;
  }
}

JitStats jit_stats() {
  const Counters& c = counters();
  return {c.memo_hits.load(), c.disk_hits.load(), c.compiles.load(), c.recompiled_damaged.load(),
          c.fallbacks.load()};
}

void reset_jit_stats() {
  Counters& c = counters();
  c.memo_hits = c.disk_hits = c.compiles = c.recompiled_damaged = c.fallbacks = 0;
}

void clear_jit_memo() {
  Memo& m = memo();
  std::lock_guard lock(m.mu);
  m.entries.clear();
  m.writable.clear();
}

}  // namespace mls::kernels::jit
