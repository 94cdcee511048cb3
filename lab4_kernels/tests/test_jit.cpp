// Lab 4 part 2: run-time compilation (mls/kernels/jit.hpp). Each test compiles into a cache folder
// of its own (mls::testing::TempDir), never the user's.
#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "jit_test_util.hpp"
#include "mls/common/file.hpp"
#include "mls/common/rng.hpp"
#include "mls/kernels/jit.hpp"
#include "mls/kernels/roofline.hpp"
#include "mls/testing.hpp"

namespace fs = std::filesystem;
namespace jit = mls::kernels::jit;
using kernels_test::EnvGuard;
using kernels_test::run_in_processes;

namespace {

constexpr const char* kAxpy = R"(// y = a x + y
extern "C" void axpy(long n, float a, const float* x, float* y) {
  for (long i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}
)";
using AxpyFn = void(long, float, const float*, float*);

jit::CompileOptions options_in(const mls::testing::TempDir& dir) {
  jit::CompileOptions o;
  o.cache_dir = dir.path / "cache";
  return o;
}

/// Runs a compiled axpy on seeded random inputs of length n and compares with a C++ loop: equal
/// within the rounding of one multiply-add (the compiler may fuse it into an FMA).
bool axpy_matches(AxpyFn* axpy, long n, std::uint64_t seed) {
  mls::Rng rng(seed, "axpy");
  std::vector<float> x(static_cast<std::size_t>(n)), y(x.size());
  for (auto& v : x) v = static_cast<float>(rng.uniform(-2, 2));
  for (auto& v : y) v = static_cast<float>(rng.uniform(-2, 2));
  const float a = static_cast<float>(rng.uniform(-3, 3));
  std::vector<float> want = y;
  for (std::size_t i = 0; i < x.size(); ++i) want[i] = a * x[i] + want[i];
  axpy(n, a, x.data(), y.data());
  const float eps = std::numeric_limits<float>::epsilon();
  for (std::size_t i = 0; i < x.size(); ++i)
    if (std::fabs(y[i] - want[i]) > 2 * eps * (std::fabs(a * x[i]) + std::fabs(want[i]))) return false;
  return true;
}

/// The names in `dir` (none when it does not exist).
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

int count_suffix(const std::vector<std::string>& names, const std::string& suffix) {
  int n = 0;
  for (const auto& s : names)
    if (s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0) ++n;
  return n;
}

bool any_temporary(const std::vector<std::string>& names) {
  for (const auto& s : names)
    if (s.find(".tmp") != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("jit: a compiled axpy kernel matches a C++ loop on random inputs", "[lab4][jit]") {
  mls::testing::TempDir dir("jit_axpy");
  const jit::LoadedModule m = jit::compile_shared(kAxpy, options_in(dir));
  REQUIRE(m);
  CHECK(m.path().parent_path() == dir.path / "cache");
  CHECK(m.path().filename() == m.key() + ".so");
  CHECK(fs::exists(dir.path / "cache" / (m.key() + ".cpp")));  // the source, kept beside it
  AxpyFn* axpy = m.symbol<AxpyFn>("axpy");
  for (long n : {1L, 2L, 7L, 97L, 1031L}) {
    INFO("n = " << n);
    CHECK(axpy_matches(axpy, n, 100 + static_cast<std::uint64_t>(n)));
  }
  // A pointer type works as well as a function type.
  CHECK(m.symbol<AxpyFn*>("axpy") == axpy);
}

TEST_CASE("jit: a second compile is a memo hit, and a fresh memo loads the disk cache", "[lab4][jit]") {
  mls::testing::TempDir dir("jit_cache");
  const auto o = options_in(dir);
  jit::reset_jit_stats();
  const jit::LoadedModule first = jit::compile_shared(kAxpy, o);
  CHECK(jit::jit_stats().compiles == 1);
  CHECK(jit::jit_stats().disk_hits == 0);
  const jit::LoadedModule again = jit::compile_shared(kAxpy, o);
  CHECK(jit::jit_stats().memo_hits == 1);
  CHECK(jit::jit_stats().compiles == 1);
  CHECK(again.path() == first.path());
  // As a new process: the memo forgotten, the library is read from the cache, not compiled.
  jit::clear_jit_memo();
  const jit::LoadedModule fresh = jit::compile_shared(kAxpy, o);
  CHECK(jit::jit_stats().disk_hits == 1);
  CHECK(jit::jit_stats().compiles == 1);
  CHECK(fresh.key() == first.key());
  CHECK(axpy_matches(fresh.symbol<AxpyFn>("axpy"), 33, 7));
  // Another flag is another key: compiled.
  auto o2 = o;
  o2.extra_flags = {"-DMLS_TEST_FLAG=1"};
  const jit::LoadedModule other = jit::compile_shared(kAxpy, o2);
  CHECK(other.key() != first.key());
  CHECK(jit::jit_stats().compiles == 2);
  const auto names = names_in(dir.path / "cache");
  CHECK(count_suffix(names, ".so") == 2);
  CHECK_FALSE(any_temporary(names));
  CHECK(jit::jit_stats().fallbacks == 0);
}

TEST_CASE("jit: a damaged cached library is compiled again", "[lab4][jit]") {
  mls::testing::TempDir dir("jit_damaged");
  const auto o = options_in(dir);
  fs::path file;
  {
    const jit::LoadedModule m = jit::compile_shared(kAxpy, o);
    file = m.path();
  }
  jit::clear_jit_memo();  // the last holder of the library: it is closed
  mls::write_file_atomic(file, "this is not an ELF file");
  jit::reset_jit_stats();
  const jit::LoadedModule m = jit::compile_shared(kAxpy, o);
  CHECK(jit::jit_stats().recompiled_damaged == 1);
  CHECK(jit::jit_stats().compiles == 1);
  CHECK(m.path() == file);
  CHECK(axpy_matches(m.symbol<AxpyFn>("axpy"), 97, 3));
}

TEST_CASE("jit: threads asking for one kernel at once compile it once", "[lab4][jit]") {
  mls::testing::TempDir dir("jit_threads");
  const auto o = options_in(dir);
  jit::reset_jit_stats();
  std::vector<jit::LoadedModule> got(4);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&, t] { got[t] = jit::compile_shared(kAxpy, o); });
  for (auto& t : threads) t.join();
  CHECK(jit::jit_stats().compiles == 1);
  CHECK(jit::jit_stats().memo_hits == 3);
  for (const auto& m : got) CHECK(m.path() == got[0].path());
}

TEST_CASE("jit: processes compiling one kernel into an empty cache all succeed and share one file", "[lab4][jit]") {
  mls::testing::TempDir dir("jit_processes");
  const auto o = options_in(dir);
  const std::vector<int> codes = run_in_processes(3, [&](int i) {
    const jit::LoadedModule m = jit::compile_shared(kAxpy, o);
    return axpy_matches(m.symbol<AxpyFn>("axpy"), 61 + i, static_cast<std::uint64_t>(i));
  });
  CHECK(codes == std::vector<int>{0, 0, 0});
  const auto names = names_in(dir.path / "cache");
  CHECK(count_suffix(names, ".so") == 1);
  CHECK(count_suffix(names, ".cpp") == 1);
  CHECK_FALSE(any_temporary(names));
  // And this process finds their library.
  jit::reset_jit_stats();
  jit::clear_jit_memo();
  const jit::LoadedModule m = jit::compile_shared(kAxpy, o);
  CHECK(jit::jit_stats().disk_hits == 1);
  CHECK(axpy_matches(m.symbol<AxpyFn>("axpy"), 5, 9));
}

TEST_CASE("jit: a compile error shows the command, the compiler's error and the numbered source", "[lab4][jit]") {
  mls::testing::TempDir dir("jit_error");
  const auto o = options_in(dir);
  const std::string bad = "// a kernel with a mistake on line 3\nextern \"C\" int f(int x) {\n  return x + undefined_name;\n}\n";
  mls::testing::require_error([&] { jit::compile_shared(bad, o); }, "jit: the compiler failed (exit status 1)");
  try {
    jit::compile_shared(bad, o);
    FAIL("no error");
  } catch (const mls::Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK_THAT(msg, Catch::Contains("  command: ") && Catch::Contains(" -o ") && Catch::Contains("-std=c++20"));
    CHECK_THAT(msg, Catch::Contains("error:") && Catch::Contains("undefined_name"));  // the compiler's words
    CHECK_THAT(msg, Catch::Contains(".cpp:3:"));                                     // ... and its line
    CHECK_THAT(msg, Catch::Contains("3 |   return x + undefined_name;"));           // the numbered source
    CHECK_THAT(msg, Catch::Contains("1 | // a kernel with a mistake on line 3"));
  }
  CHECK(count_suffix(names_in(dir.path / "cache"), ".so") == 0);
  CHECK_FALSE(any_temporary(names_in(dir.path / "cache")));
  // Warnings are errors unless told otherwise.
  const std::string warns = "extern \"C\" int g(int x) {\n  int unused = 1;\n  return x;\n}\n";
  mls::testing::require_error([&] { jit::compile_shared(warns, o); }, "unused");
  auto lenient = o;
  lenient.warnings_as_errors = false;
  CHECK(jit::compile_shared(warns, lenient).symbol<int(int)>("g")(41) == 41);
  // A long source is shown up to its 200th line.
  std::string longer = "#error stop here\n";
  for (int i = 0; i < 300; ++i) longer += "// filler\n";
  mls::testing::require_error([&] { jit::compile_shared(longer, o); }, "... (101 more lines)");
}

TEST_CASE("jit: a missing compiler is a clear error naming what was tried", "[lab4][jit]") {
  mls::testing::TempDir dir("jit_nocxx");
  auto o = options_in(dir);
  {
    EnvGuard cxx("MLS_JIT_CXX", "/nonexistent");
    mls::testing::require_error([&] { jit::compile_shared(kAxpy, o); },
                                "jit: no C++ compiler found: tried $MLS_JIT_CXX='/nonexistent' (no such file)");
  }
  {
    EnvGuard chosen("MLS_JIT_CXX", std::nullopt);
    EnvGuard cxx("CXX", "/nonexistent/cxx");
    EnvGuard path("PATH", "/nonexistent-dir");
    mls::testing::require_error(
        [] { jit::find_compiler(); },
        "jit: no C++ compiler found: tried $CXX='/nonexistent/cxx' (no such file), c++ (not on PATH), "
        "g++ (not on PATH), clang++ (not on PATH) with PATH=/nonexistent-dir");
  }
  o.compiler = "no-such-compiler-here";
  mls::testing::require_error([&] { jit::compile_shared(kAxpy, o); },
                              "jit: no C++ compiler found: tried 'no-such-compiler-here' (not on PATH)");
  // A folder is not a compiler.
  o.compiler = dir.path.string();
  mls::testing::require_error([&] { jit::compile_shared(kAxpy, o); }, "(not a regular file)");
  // Where the system has one: an absolute path and its version line.
  EnvGuard chosen("MLS_JIT_CXX", std::nullopt);
  const jit::Compiler c = jit::find_compiler();
  CHECK(fs::path(c.path).is_absolute());
  CHECK_FALSE(c.version.empty());
}

TEST_CASE("jit: a compiler over its time limit is killed with a clear error", "[lab4][jit]") {
  mls::testing::TempDir dir("jit_timeout");
  // A stand-in compiler: answers --version, then hangs on any compile.
  const std::string slow = dir.file("slow-cxx");
  mls::write_file_atomic(slow, "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'slow-cxx 1.0'; exit 0; fi\nsleep 60\n");
  ::chmod(slow.c_str(), 0755);
  auto o = options_in(dir);
  o.compiler = slow;
  o.timeout_s = 0.5;
  mls::testing::require_error([&] { jit::compile_shared(kAxpy, o); },
                              "jit: the compiler timed out after 0.5 s and was killed (CompileOptions::timeout_s)");
  CHECK_FALSE(any_temporary(names_in(dir.path / "cache")));
  o.timeout_s = 0;
  mls::testing::require_error([&] { jit::compile_shared(kAxpy, o); },
                              "jit: compile_shared: timeout_s = 0, expected a positive number of seconds");
  // A compiler that fails without a word, and one killed by a signal.
  const std::string quiet = dir.file("false-cxx");
  mls::write_file_atomic(quiet, "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'false-cxx 1.0'; exit 0; fi\nkill -9 $$\n");
  ::chmod(quiet.c_str(), 0755);
  o.compiler = quiet;
  o.timeout_s = 30;
  mls::testing::require_error([&] { jit::compile_shared(kAxpy, o); }, "jit: the compiler failed (killed by signal 9");
}

TEST_CASE("jit: a missing symbol names the symbol and the library", "[lab4][jit]") {
  mls::testing::TempDir dir("jit_symbol");
  const jit::LoadedModule m = jit::compile_shared(kAxpy, options_in(dir));
  mls::testing::require_error([&] { m.symbol<AxpyFn>("axpyy"); },
                              "jit: symbol 'axpyy' not found in '" + m.path().string() + "'");
  mls::testing::require_error([&] { m.symbol<AxpyFn>("axpyy"); }, "extern \"C\"");
  const jit::LoadedModule empty;
  CHECK_FALSE(empty);
  mls::testing::require_error([&] { empty.raw_symbol("axpy"); }, "jit: symbol 'axpy': no library is loaded");
}

TEST_CASE("jit: an unwritable cache folder falls back to a private temporary folder", "[lab4][jit]") {
  mls::testing::TempDir dir("jit_unwritable");
  mls::write_file_atomic(dir.file("file"), "a file, not a folder");
  jit::CompileOptions o;
  o.cache_dir = dir.path / "file" / "cache";  // under a regular file: can never be made
  jit::reset_jit_stats();
  const jit::LoadedModule m = jit::compile_shared(kAxpy, o);
  CHECK(jit::jit_stats().fallbacks == 1);
  CHECK(m.path().parent_path() != o.cache_dir);
  CHECK_THAT(m.path().parent_path().filename().string(), Catch::StartsWith("mls-jit-"));
  CHECK(axpy_matches(m.symbol<AxpyFn>("axpy"), 13, 1));
  // No cache root at all ($MLS_JIT_CACHE, $XDG_CACHE_HOME and $HOME unset): the private folder too.
  EnvGuard a("MLS_JIT_CACHE", std::nullopt), b("XDG_CACHE_HOME", std::nullopt), c("HOME", std::nullopt);
  CHECK(jit::jit_cache_dir().empty());
  const jit::LoadedModule n = jit::compile_shared("extern \"C\" int one() { return 1; }\n");
  CHECK(n.symbol<int()>("one")() == 1);
  CHECK_THAT(n.path().parent_path().filename().string(), Catch::StartsWith("mls-jit-"));
}

TEST_CASE("jit: the cache is $MLS_JIT_CACHE, else $XDG_CACHE_HOME/mlsys-labs/jit, else ~/.cache/mlsys-labs/jit",
          "[lab4][jit]") {
  mls::testing::TempDir dir("jit_env");
  {
    EnvGuard a("MLS_JIT_CACHE", std::nullopt), b("XDG_CACHE_HOME", "/x/cache"), c("HOME", "/h");
    CHECK(jit::jit_cache_dir() == "/x/cache/mlsys-labs/jit");
    EnvGuard d("XDG_CACHE_HOME", std::nullopt);
    CHECK(jit::jit_cache_dir() == "/h/.cache/mlsys-labs/jit");
  }
  EnvGuard e("MLS_JIT_CACHE", dir.file("env-cache"));
  CHECK(jit::jit_cache_dir() == dir.file("env-cache"));
  const jit::LoadedModule m = jit::compile_shared("extern \"C\" int two() { return 2; }\n");
  CHECK(m.path().parent_path() == dir.file("env-cache"));
  CHECK(m.symbol<int()>("two")() == 2);
}

TEST_CASE("jit: the CPU description and its key", "[lab4][jit]") {
  const jit::CpuInfo& cpu = jit::cpu_info();
  CHECK(cpu.model == mls::kernels::cpu_model_name());
  CHECK_FALSE(cpu.vendor.empty());
  CHECK(cpu.cores >= 1);
  CHECK(cpu.avx512f == (__builtin_cpu_supports("avx512f") != 0));
  CHECK(cpu.avx2 == (__builtin_cpu_supports("avx2") != 0));
  const std::string key = jit::cpu_key();
  CHECK(key == jit::cpu_key_of(cpu));
  CHECK(key.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") == std::string::npos);
  // A made-up CPU: every part of the key, the hash an FNV-1a of "model\nisa" computed elsewhere.
  jit::CpuInfo c;
  c.model = "Test CPU 9000";
  c.vendor = "GenuineIntel";
  c.family = 6;
  c.model_id = 143;
  c.avx2 = c.fma = c.avx512f = c.avx512bw = c.avx512vl = true;
  CHECK(c.isa() == "avx2 fma avx512f avx512bw avx512vl");
  CHECK(jit::cpu_key_of(c) == "intel-6.143-avx512-27b60835");
  CHECK(jit::isa_compile_flags(c) ==
        std::vector<std::string>{"-march=x86-64", "-mavx2", "-mfma", "-mavx512f", "-mavx512bw", "-mavx512vl"});
  c.amx_tile = true;
  CHECK_THAT(jit::cpu_key_of(c), Catch::StartsWith("intel-6.143-amx-"));
  jit::CpuInfo plain;
  plain.vendor = "Some Vendor!";
  CHECK_THAT(jit::cpu_key_of(plain), Catch::StartsWith("somevendor-0.0-base-"));
  CHECK(plain.isa().empty());
  CHECK(jit::isa_compile_flags(plain) == std::vector<std::string>{"-march=x86-64"});
  // Compiling for this CPU's flags, explicitly, works as -march=native does.
  mls::testing::TempDir dir("jit_isa");
  auto o = options_in(dir);
  o.isa_flags = jit::isa_compile_flags(cpu);
  CHECK(axpy_matches(jit::compile_shared(kAxpy, o).symbol<AxpyFn>("axpy"), 100, 5));
}

TEST_CASE("jit: the compile flags and the cache key", "[lab4][jit]") {
  jit::CompileOptions o;
  CHECK(jit::compile_flags(o) == std::vector<std::string>{"-O3", "-march=native", "-fPIC", "-shared", "-std=c++20",
                                                          "-Wall", "-Wextra", "-Werror", "-fdiagnostics-color=never"});
  o.opt_level = "-O2";
  o.isa_flags = {"-mavx2", "-mfma"};
  o.warnings_as_errors = false;
  o.std = "c++17";
  o.extra_flags = {"-DT=4"};
  CHECK(jit::compile_flags(o) == std::vector<std::string>{"-O2", "-mavx2", "-mfma", "-fPIC", "-shared", "-std=c++17",
                                                          "-Wall", "-Wextra", "-fdiagnostics-color=never", "-DT=4"});
  o.std.clear();
  mls::testing::require_error([&] { jit::compile_flags(o); }, "jit: CompileOptions::std is empty");
  // The key: FNV-1a of the length-prefixed parts, computed independently (Python) for this input.
  const jit::Compiler gxx{"/usr/bin/g++", "g++ (Debian 12.2.0-14+deb12u1) 12.2.0"};
  const std::vector<std::string> flags = {"-O3", "-fPIC"};
  const std::string cpu = "intel-6.143-avx512-00000000";
  const std::string key = jit::cache_key("int x;\n", gxx, flags, cpu);
  CHECK(key == "6be0927b5a56ccb12497d943d6bf6e8a");
  // Any part changed is another key.
  CHECK(jit::cache_key("int y;\n", gxx, flags, cpu) != key);
  CHECK(jit::cache_key("int x;\n", {"/usr/bin/clang++", gxx.version}, flags, cpu) != key);
  CHECK(jit::cache_key("int x;\n", {gxx.path, "g++ 13"}, flags, cpu) != key);
  CHECK(jit::cache_key("int x;\n", gxx, {"-O3"}, cpu) != key);
  CHECK(jit::cache_key("int x;\n", gxx, {"-O3 -fPIC"}, cpu) != key);
  CHECK(jit::cache_key("int x;\n", gxx, flags, "amd-25.1-avx2-00000000") != key);
}

TEST_CASE("jit: numbered source, first lines and shell quoting", "[lab4][jit]") {
  CHECK(jit::number_lines("a\nb\nc\n") == "1 | a\n2 | b\n3 | c\n");
  CHECK(jit::number_lines("a\nb") == "1 | a\n2 | b\n");
  CHECK(jit::number_lines("") == "");
  std::string twelve;
  for (int i = 1; i <= 12; ++i) twelve += "l" + std::to_string(i) + "\n";
  CHECK_THAT(jit::number_lines(twelve), Catch::StartsWith(" 1 | l1\n 2 | l2\n") && Catch::EndsWith("12 | l12\n"));
  CHECK(jit::number_lines(twelve, 3) == "1 | l1\n2 | l2\n3 | l3\n... (9 more lines)\n");
  CHECK(jit::number_lines("\n\nx\n", 5) == "1 | \n2 | \n3 | x\n");
  CHECK(jit::first_lines(twelve, 2) == "l1\nl2\n... (10 more lines)\n");
  CHECK(jit::first_lines("one", 2) == "one\n");
  CHECK(jit::shell_join({"/usr/bin/g++", "-O3", "-DX=1", "a b", "it's", ""}) ==
        "/usr/bin/g++ -O3 -DX=1 'a b' 'it'\\''s' ''");
}
