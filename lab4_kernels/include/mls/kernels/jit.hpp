#pragma once
/// Lab 4 part 2 (ML compilation): run-time compilation of generated C++ kernels.
///
/// A kernel generator (the tensor-expression IR, an autotuner) produces C++ source text; this
/// module turns it into a loaded shared library and a function pointer:
///
///     const jit::LoadedModule m = jit::compile_shared(R"(extern "C" void axpy(...) {...})");
///     auto axpy = m.symbol<void(long, float, const float*, float*)>("axpy");
///
/// - The compiler is the system's C++ compiler ($MLS_JIT_CXX, else $CXX, else c++, g++, clang++
///   on PATH; find_compiler), run with fork/exec (posix_spawn, an argument vector: no shell), its
///   output captured, killed after `timeout_s` (its whole process group).
/// - Compiled libraries are kept in a disk cache (jit_cache_dir()), one file per key: a hash of
///   the source, the compiler's path and version line, the flags and cpu_key(). A library is
///   compiled to a unique temporary name in the cache folder and renamed into place, so processes
///   compiling the same kernel at once all succeed and share one file. A cached file that does not
///   load (damaged) is compiled again. An unwritable cache folder is not fatal: one line on stderr,
///   and this process compiles into a private temporary folder (removed at exit).
/// - Within a process each key is loaded once (a memo); threads asking for a key being compiled
///   wait for that compilation.
/// Every failure is an mls::Error starting "jit: ": a compile error shows the command, the
/// compiler's first lines and the source with line numbers.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace mls::kernels::jit {

// ---- the CPU ------------------------------------------------------------------------------------

/// What a generated kernel may target on this CPU: identity (model, vendor, family/model) and the
/// instruction sets that matter to float kernels, each usable only where the OS enables it too.
struct CpuInfo {
  std::string model;    ///< "model name" of /proc/cpuinfo (cpu_model_name(), one source of truth)
  std::string vendor;   ///< cpuid's vendor string: "GenuineIntel", "AuthenticAMD", ... ("unknown")
  int family = 0;       ///< cpuid display family (base + extended)
  int model_id = 0;     ///< cpuid display model (with the extended model bits)
  bool avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512vl = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;  ///< cpuid bits and OS tile state (XCR0)
  int cores = 1;        ///< logical CPUs online
  /// The instruction sets present, in a fixed order: "avx2 fma avx512f avx512bw avx512vl amx-tile ...".
  std::string isa() const;
};

/// This machine's CPU (read once per process).
const CpuInfo& cpu_info();
/// A short, stable, file-name-safe key of a CPU: "<vendor>-<family>.<model>-<widest ISA>-<8 hex>",
/// e.g. "intel-6.143-avx512-5c1d09aa"; the hex is a hash of the model name and the ISA list. Two
/// machines with the same key run the same compiled code alike (the core count is not in it).
std::string cpu_key_of(const CpuInfo& cpu);
/// cpu_key_of(cpu_info()).
std::string cpu_key();
/// Explicit GCC/Clang flags for exactly the instruction sets of `cpu` ("-mavx2", "-mfma",
/// "-mavx512f", ...): what CompileOptions::isa_flags takes instead of -march=native.
std::vector<std::string> isa_compile_flags(const CpuInfo& cpu);

// ---- the compiler -------------------------------------------------------------------------------

/// A C++ compiler: its absolute path and the first line of `<path> --version`.
struct Compiler {
  std::string path;
  std::string version;
};

/// The compiler to use: $MLS_JIT_CXX when set (only it: an explicit choice is never replaced),
/// else the first of $CXX, c++, g++, clang++ found (names are looked up on $PATH, or
/// /usr/local/bin:/usr/bin:/bin without one). mls::Error "jit: no C++ compiler found: tried ..."
/// naming every candidate and why it was refused. The version is asked once per path and process.
Compiler find_compiler();
/// The compiler at `path_or_name` (looked up on PATH when it has no '/'), its version asked.
Compiler compiler_at(const std::string& path_or_name);

/// How to compile a kernel. The command is
///   <compiler> <opt_level> <isa_flags or -march=native> -fPIC -shared -std=<std>
///              -Wall -Wextra [-Werror] -fdiagnostics-color=never <extra_flags> -o <out> <source>
struct CompileOptions {
  std::string opt_level = "-O3";
  std::vector<std::string> isa_flags{};    ///< empty: {"-march=native"} (see isa_compile_flags)
  std::vector<std::string> extra_flags{};  ///< e.g. "-DTILE=8", "-ffast-math"; last on the line
  bool warnings_as_errors = true;          ///< -Werror
  std::string std = "c++20";
  double timeout_s = 120;                  ///< the compiler is killed after this (> 0)
  std::filesystem::path cache_dir{};       ///< empty: jit_cache_dir()
  std::string compiler{};                  ///< empty: find_compiler(); else a path or a name on PATH
};

/// The flags of `options`, in command-line order (everything but the compiler, -o and the files).
std::vector<std::string> compile_flags(const CompileOptions& options);

/// The cache key (32 hex digits) of a kernel: a hash of the source, the compiler's path and
/// version line, the flags and the CPU key. Any change to one of them is another key.
std::string cache_key(std::string_view source, const Compiler& compiler,
                      const std::vector<std::string>& flags, std::string_view cpu_key);

/// $MLS_JIT_CACHE, else <the lab's cache root>/jit (the root: $XDG_CACHE_HOME/mlsys-labs, else
/// ~/.cache/mlsys-labs, as roofline.hpp's default_peak_cache_dir()), else empty (no cache root:
/// the private temporary folder is used).
std::filesystem::path jit_cache_dir();

// ---- loaded modules -----------------------------------------------------------------------------

/// A compiled kernel library, loaded (dlopen, RTLD_NOW | RTLD_LOCAL). Copies share the library,
/// which stays loaded while a copy or the process's memo holds it: keep one as long as you call
/// functions taken from it.
class LoadedModule {
 public:
  LoadedModule() = default;
  /// The library's file (in the cache folder).
  const std::filesystem::path& path() const { return path_; }
  /// Its cache key (cache_key).
  const std::string& key() const { return key_; }
  /// Whether a library is held (a default-constructed module holds none).
  explicit operator bool() const { return handle_ != nullptr; }
  /// The address of the exported symbol `name` (declare it extern "C" in the source). mls::Error
  /// "jit: symbol '<name>' not found in '<path>'" when it is missing, or no library is held.
  void* raw_symbol(const std::string& name) const;
  /// symbol<void(float*, long)>("name"): the function (or object) `name`, as a pointer of type F*
  /// (F a function type) or F (F already a pointer type).
  template <class F>
  auto symbol(const std::string& name) const {
    using P = std::conditional_t<std::is_pointer_v<F>, F, std::add_pointer_t<F>>;
    return reinterpret_cast<P>(raw_symbol(name));
  }

 private:
  friend struct ModuleAccess;
  std::shared_ptr<void> handle_;
  std::filesystem::path path_;
  std::string key_;
};

/// Compiles `source` (C++ text) into a shared library and loads it: from the process's memo, else
/// from the disk cache, else by running the compiler (see the top of this file). mls::Error on a
/// compile error (the command, the compiler's first 40 lines, the source numbered, first 200
/// lines), a missing compiler, a compiler over its time limit, or a library that does not load.
LoadedModule compile_shared(std::string_view source, const CompileOptions& options = {});

/// Counts since the process started (or reset_jit_stats): for tests and reports.
struct JitStats {
  std::int64_t memo_hits = 0;     ///< found loaded in this process
  std::int64_t disk_hits = 0;     ///< loaded from the disk cache, no compiler run
  std::int64_t compiles = 0;      ///< compiler runs that succeeded (cache misses)
  std::int64_t recompiled_damaged = 0;  ///< of those, cached files that did not load
  std::int64_t fallbacks = 0;     ///< compiles into the private folder (cache folder unwritable)
};
JitStats jit_stats();
void reset_jit_stats();
/// Forgets the memo, as a new process would start (modules already handed out stay loaded).
void clear_jit_memo();

// ---- small pure helpers (each tested on its own) ------------------------------------------------

/// `source` with line numbers ("  12 | text"), at most `max_lines` lines, then
/// "... (N more lines)" when there are more.
std::string number_lines(std::string_view source, std::size_t max_lines = 200);
/// The arguments as one line a POSIX shell would read back the same (each quoted where needed).
std::string shell_join(const std::vector<std::string>& argv);
/// The first `max_lines` lines of `text`, then "... (N more lines)" when there are more.
std::string first_lines(std::string_view text, std::size_t max_lines);

}  // namespace mls::kernels::jit
