// Lab 4: the pure parts of mls-cuda-fused-bench (mls/kernels/fused_bench.hpp), without a GPU:
// shapes, the bytes each kernel moves (against a buffer-by-buffer count), the copy that moves as
// many, medians (against a counting definition), GB/s, the command line and the report.
// No timing: every measurement here is made up.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mls/common/error.hpp"
#include "mls/common/rng.hpp"
#include "mls/kernels/fused_bench.hpp"

namespace mk = mls::kernels;
using mk::RowsCols;

namespace {

/// Awkward and ordinary shapes: 1, primes, powers of two, and seeded random ones.
std::vector<RowsCols> some_shapes() {
  std::vector<RowsCols> shapes = {{1, 1}, {1, 7}, {13, 1}, {3, 5}, {97, 1031}, {4096, 1024},
                                  {16384, 1024}, {4096, 4096}, {2147483647, 1}, {1, 2147483647}};
  mls::Rng rng(7, "shapes");
  for (int i = 0; i < 20; ++i)
    shapes.push_back({static_cast<int>(rng.randint(1, 100000)), static_cast<int>(rng.randint(1, 100000))});
  return shapes;
}

/// The buffers a kernel reads and writes, as (name, floats), each counted once: the reference
/// of fused_kernel_bytes, written from the kernels' signatures in mls/kernels/cuda.hpp.
std::map<std::string, std::int64_t> buffers(const std::string& kernel, RowsCols s) {
  const std::int64_t r = s.rows, c = s.cols;
  if (kernel == "softmax") return {{"inp", r * c}, {"out", r * c}};
  if (kernel == "layernorm")
    return {{"inp", r * c}, {"weight", c}, {"bias", c}, {"out", r * c}, {"mean", r}, {"rstd", r}};
  if (kernel == "bias_gelu") return {{"inp", r * c}, {"bias", c}, {"out", r * c}};
  return {};
}

/// The median by its definition: the value with as many samples at or below it as at or above
/// it (odd count), or the mean of the two middle order statistics found by counting (even).
double counted_median(const std::vector<double>& v) {
  auto kth = [&](std::size_t k) {  // the k-th smallest (0-based), by counting
    for (double x : v) {
      const auto below = std::count_if(v.begin(), v.end(), [&](double y) { return y < x; });
      const auto at = std::count(v.begin(), v.end(), x);
      if (static_cast<std::size_t>(below) <= k && k < static_cast<std::size_t>(below + at)) return x;
    }
    return 0.0;
  };
  const std::size_t n = v.size();
  return n % 2 ? kth(n / 2) : 0.5 * (kth(n / 2 - 1) + kth(n / 2));
}

mk::FusedBenchOptions parse(std::vector<std::string> args) { return mk::parse_fused_bench_args(args); }

mk::FusedBenchResult made_up(const std::string& kernel, RowsCols s, double ms, double copy_ms) {
  mk::FusedBenchResult r;
  r.kernel = kernel;
  r.shape = s;
  r.bytes = mk::fused_kernel_bytes(kernel, s);
  r.ms = ms;
  r.copy_bytes = 8 * mk::copy_floats_for(r.bytes);
  r.copy_ms = copy_ms;
  return r;
}

}  // namespace

TEST_CASE("fused_bench: parse_rows_cols reads ROWSxCOLS and to_string writes it back", "[lab4][fused_bench]") {
  for (const auto& s : some_shapes()) {
    const std::string text = std::to_string(s.rows) + "x" + std::to_string(s.cols);
    CHECK(mk::parse_rows_cols(text) == s);
    CHECK(mk::to_string(s) == text);
  }
}

TEST_CASE("fused_bench: parse_rows_cols refuses what is not ROWSxCOLS", "[lab4][fused_bench]") {
  for (const char* bad : {"", "x", "4096", "4096x", "x1024", "0x5", "5x0", "-1x5", "+4x4", " 4x4",
                          "4x4 ", "4x4x4", "4X4", "2147483648x1", "1x99999999999999999999", "4.0x4"}) {
    INFO("'" << bad << "'");
    REQUIRE_THROWS_AS(mk::parse_rows_cols(bad), mls::Error);
    REQUIRE_THROWS_WITH(mk::parse_rows_cols(bad),
                        Catch::Contains("parse_rows_cols: '" + std::string(bad) + "' is not ROWSxCOLS"));
  }
}

TEST_CASE("fused_bench: fused_kernel_bytes counts every buffer once, 4 bytes a float", "[lab4][fused_bench]") {
  REQUIRE(mk::fused_bench_kernels() == std::vector<std::string>{"softmax", "layernorm", "bias_gelu"});
  for (const auto& k : mk::fused_bench_kernels()) {
    for (const auto& s : some_shapes()) {
      std::int64_t floats = 0;
      for (const auto& [name, n] : buffers(k, s)) floats += n;
      INFO(k << " " << mk::to_string(s));
      CHECK(mk::fused_kernel_bytes(k, s) == 4 * floats);
    }
  }
  CHECK(mk::fused_kernel_bytes("softmax", {4096, 1024}) == 32LL << 20);  // 16 MiB in, 16 MiB out
}

TEST_CASE("fused_bench: fused_kernel_bytes refuses an unknown kernel and an empty shape", "[lab4][fused_bench]") {
  REQUIRE_THROWS_WITH(mk::fused_kernel_bytes("gelu", {4, 4}),
                      Catch::Contains("fused_kernel_bytes: unknown kernel 'gelu'") &&
                          Catch::Contains("softmax, layernorm, bias_gelu"));
  REQUIRE_THROWS_WITH(mk::fused_kernel_bytes("softmax", {0, 4}),
                      Catch::Contains("fused_kernel_bytes: shape 0x4 must have rows >= 1"));
  REQUIRE_THROWS_WITH(mk::fused_kernel_bytes("softmax", {4, -1}),
                      Catch::Contains("fused_kernel_bytes: shape 4x-1"));
}

TEST_CASE("fused_bench: copy_floats_for is the smallest copy that moves as many bytes", "[lab4][fused_bench]") {
  mls::Rng rng(3, "bytes");
  std::vector<std::int64_t> all = {0, 1, 4, 7, 8, 9, 12, 16, 8LL << 40};
  for (int i = 0; i < 200; ++i) all.push_back(rng.randint(0, std::int64_t{1} << 40));
  for (const auto& k : mk::fused_bench_kernels())
    for (const auto& s : some_shapes()) all.push_back(mk::fused_kernel_bytes(k, s));
  for (std::int64_t b : all) {
    const std::int64_t n = mk::copy_floats_for(b);
    INFO("bytes " << b << " floats " << n);
    CHECK(8 * n >= b);                 // reads n floats and writes n floats: at least b bytes
    CHECK((n == 0 || 8 * (n - 1) < b));  // and no more floats than that needs
  }
  CHECK(mk::copy_floats_for(mk::fused_kernel_bytes("softmax", {4096, 1024})) == 4096 * 1024);
  REQUIRE_THROWS_WITH(mk::copy_floats_for(-8), Catch::Contains("copy_floats_for: bytes must be >= 0, got -8"));
}

TEST_CASE("fused_bench: median agrees with the counting definition", "[lab4][fused_bench]") {
  mls::Rng rng(5, "samples");
  for (int n : {1, 2, 3, 4, 5, 7, 10, 11, 15, 16}) {
    for (int trial = 0; trial < 5; ++trial) {
      std::vector<double> v(n);
      for (auto& x : v) x = static_cast<double>(rng.randint(0, 6)) * 0.25;  // ties on purpose
      INFO("n " << n << " trial " << trial);
      CHECK(mk::median(v) == counted_median(v));
    }
  }
  CHECK(mk::median({3.0}) == 3.0);
  CHECK(mk::median({4.0, 1.0}) == 2.5);
  REQUIRE_THROWS_WITH(mk::median({}), Catch::Contains("median: no samples"));
}

TEST_CASE("fused_bench: gb_per_s is bytes / seconds / 1e9", "[lab4][fused_bench]") {
  CHECK(mk::gb_per_s(1e9, 1000.0) == Approx(1.0));
  CHECK(mk::gb_per_s(32.0 * (1 << 20), 0.01) == Approx(32.0 * (1 << 20) / 1e-5 / 1e9));
  CHECK(mk::gb_per_s(0, 1) == 0.0);
  REQUIRE_THROWS_WITH(mk::gb_per_s(100, 0), Catch::Contains("gb_per_s: milliseconds must be > 0, got 0"));
  REQUIRE_THROWS_WITH(mk::gb_per_s(100, -2), Catch::Contains("got -2"));
}

TEST_CASE("fused_bench: the command line's defaults and each option", "[lab4][fused_bench]") {
  const auto d = parse({});
  CHECK(d.shapes == std::vector<RowsCols>{{4096, 1024}, {16384, 1024}, {4096, 4096}});
  CHECK(d.kernels == mk::fused_bench_kernels());
  CHECK(d.reps == 15);
  CHECK(d.batch == 20);
  CHECK(d.json_path.empty());
  CHECK_FALSE(d.help);

  const auto o = parse({"97x1031", "--kernel", "bias_gelu,softmax", "1x1", "--kernel", "softmax",
                        "--reps", "3", "--batch", "1", "--json", "out.json"});
  CHECK(o.shapes == std::vector<RowsCols>{{97, 1031}, {1, 1}});
  CHECK(o.kernels == std::vector<std::string>{"bias_gelu", "softmax"});  // in order, once each
  CHECK(o.reps == 3);
  CHECK(o.batch == 1);
  CHECK(o.json_path == "out.json");
  CHECK(parse({"-h"}).help);
  CHECK(parse({"--help"}).help);
  CHECK(mk::fused_bench_usage().find("--kernel") != std::string::npos);
}

TEST_CASE("fused_bench: a bad command line is an error naming the argument", "[lab4][fused_bench]") {
  using V = std::vector<std::string>;
  const std::vector<std::pair<V, std::string>> cases = {
      {{"--reps"}, "mls-cuda-fused-bench: --reps needs a positive integer after it"},
      {{"--reps", "0"}, "--reps needs a positive integer, got '0'"},
      {{"--batch", "-3"}, "--batch needs a positive integer, got '-3'"},
      {{"--batch", "2.5"}, "--batch needs a positive integer, got '2.5'"},
      {{"--reps", "3000000000"}, "--reps needs a positive integer, got '3000000000'"},
      {{"--json"}, "--json needs a file path after it"},
      {{"--json", ""}, "--json needs a file path, got ''"},
      {{"--kernel"}, "--kernel needs a kernel name after it"},
      {{"--kernel", "gelu"}, "--kernel: unknown kernel 'gelu'; expected one of softmax, layernorm, bias_gelu"},
      {{"--kernel", "softmax,"}, "--kernel: unknown kernel ''"},
      {{"--fast"}, "unknown option '--fast'"},
      {{"4096x"}, "mls-cuda-fused-bench: parse_rows_cols: '4096x' is not ROWSxCOLS"},
  };
  for (const auto& [args, message] : cases) {
    INFO(message);
    REQUIRE_THROWS_AS(parse(args), mls::Error);
    REQUIRE_THROWS_WITH(parse(args), Catch::Contains(message));
  }
}

TEST_CASE("fused_bench: the ratio lines, the result line and the JSON report", "[lab4][fused_bench]") {
  // softmax moves exactly what its copy moves, so its ratio is copy time / kernel time.
  const auto r = made_up("softmax", {4096, 1024}, 0.02, 0.01);
  CHECK(r.copy_bytes == r.bytes);
  CHECK(r.ratio() == Approx(0.5));
  CHECK(mk::ratio_name(r) == "cuda_softmax_4096x1024_vs_d2d");
  CHECK(mk::ratio_line(r) == "ratio cuda_softmax_4096x1024_vs_d2d 0.5000");
  // bias_gelu over an odd column count: the copy moves 4 bytes more than the kernel.
  const auto g = made_up("bias_gelu", {3, 5}, 0.001, 0.001);
  CHECK(g.bytes == 4 * (2 * 15 + 5));
  CHECK(g.copy_bytes == g.bytes + 4);
  CHECK(g.ratio() == Approx(static_cast<double>(g.bytes) / static_cast<double>(g.copy_bytes)));
  CHECK(mk::ratio_line(g) == "ratio cuda_bias_gelu_3x5_vs_d2d 0.9722");

  const std::string line = mk::result_line(r);
  CHECK(line.find("softmax") == 0);
  CHECK(line.find("4096x1024") != std::string::npos);
  CHECK(line.find("vs_d2d 0.500") != std::string::npos);

  const auto doc = nlohmann::json::parse(mk::fused_bench_json("GPU \"X\" 80GB", {r, g}));
  CHECK(doc["lab"] == 4);
  CHECK(doc["device"] == "GPU \"X\" 80GB");
  CHECK(doc["peer"] == "d2d");
  REQUIRE(doc["fused"].size() == 2);
  const auto& j = doc["fused"][1];
  CHECK(j["kernel"] == "bias_gelu");
  CHECK(j["rows"] == 3);
  CHECK(j["cols"] == 5);
  CHECK(j["bytes"] == g.bytes);
  CHECK(j["peer_bytes"] == g.copy_bytes);
  CHECK(j["gbs"].get<double>() == Approx(g.gbs()));
  CHECK(j["peer_gbs"].get<double>() == Approx(g.copy_gbs()));
  CHECK(j["ratio"].get<double>() == Approx(g.ratio()));
}
