// Lab 4: the pure parts of mls-cuda-fused-bench (see mls/kernels/fused_bench.hpp).
#include "mls/kernels/fused_bench.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <limits>

#include <nlohmann/json.hpp>

#include "mls/common/error.hpp"

namespace mls::kernels {

namespace {

constexpr const char* kProgram = "mls-cuda-fused-bench";

/// A decimal integer in [lo, hi] that is all of `text`; false otherwise.
bool parse_int_in(std::string_view text, long lo, long hi, long& value) {
  if (text.empty() || text.front() == '+' || text.front() == '-') return false;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), value);
  return r.ec == std::errc() && r.ptr == text.data() + text.size() && value >= lo && value <= hi;
}

std::string kernel_list() {
  std::string s;
  for (const auto& k : fused_bench_kernels()) s += (s.empty() ? "" : ", ") + k;
  return s;
}

/// The value after option `args[i]`, advancing i; an mls::Error when it is missing.
const std::string& option_value(const std::vector<std::string>& args, std::size_t& i,
                                const char* expected) {
  if (i + 1 >= args.size()) fail(kProgram, ": ", args[i], " needs ", expected, " after it");
  return args[++i];
}

int positive_int(const std::string& option, const std::string& text) {
  long v = 0;
  if (!parse_int_in(text, 1, std::numeric_limits<int>::max(), v))
    fail(kProgram, ": ", option, " needs a positive integer, got '", text, "'");
  return static_cast<int>(v);
}

}  // namespace

RowsCols parse_rows_cols(std::string_view text) {
  const auto x = text.find('x');
  long rows = 0, cols = 0;
  const long hi = std::numeric_limits<int>::max();
  if (x == std::string_view::npos || !parse_int_in(text.substr(0, x), 1, hi, rows) ||
      !parse_int_in(text.substr(x + 1), 1, hi, cols)) {
    fail("parse_rows_cols: '", text, "' is not ROWSxCOLS (e.g. 4096x1024; rows and cols in [1, ",
         hi, "])");
  }
  return {static_cast<int>(rows), static_cast<int>(cols)};
}

std::string to_string(RowsCols shape) {
  return std::to_string(shape.rows) + "x" + std::to_string(shape.cols);
}

std::vector<std::string> fused_bench_kernels() { return {"softmax", "layernorm", "bias_gelu"}; }

std::int64_t fused_kernel_bytes(std::string_view kernel, RowsCols shape) {
  MLS_CHECK(shape.rows >= 1 && shape.cols >= 1, "fused_kernel_bytes: shape ", to_string(shape),
            " must have rows >= 1 and cols >= 1");
  const std::int64_t r = shape.rows, c = shape.cols, f = sizeof(float);
  if (kernel == "softmax") return f * 2 * r * c;
  if (kernel == "layernorm") return f * (2 * r * c + 2 * c + 2 * r);
  if (kernel == "bias_gelu") return f * (2 * r * c + c);
  fail("fused_kernel_bytes: unknown kernel '", kernel, "'; expected one of ", kernel_list());
}

std::int64_t copy_floats_for(std::int64_t bytes) {
  MLS_CHECK(bytes >= 0, "copy_floats_for: bytes must be >= 0, got ", bytes);
  const std::int64_t per_float = 2 * static_cast<std::int64_t>(sizeof(float));  // read + write
  return (bytes + per_float - 1) / per_float;
}

double median(std::vector<double> samples) {
  MLS_CHECK(!samples.empty(), "median: no samples (expected at least one)");
  std::sort(samples.begin(), samples.end());
  const std::size_t m = samples.size() / 2;
  return samples.size() % 2 ? samples[m] : 0.5 * (samples[m - 1] + samples[m]);
}

double gb_per_s(double bytes, double ms) {
  MLS_CHECK(ms > 0, "gb_per_s: milliseconds must be > 0, got ", ms, " (for ", bytes, " bytes)");
  return bytes / (ms * 1e-3) * 1e-9;
}

std::string fused_bench_usage() {
  return std::string("usage: ") + kProgram +
         " [ROWSxCOLS ...] [--kernel NAME[,NAME...]] [--reps N] [--batch N] [--json PATH]\n"
         "  Times lab 4's fused CUDA kernels against a device-to-device copy of the same bytes\n"
         "  (CUDA events; the median of N batches of back-to-back calls) and prints GB/s and\n"
         "  'ratio cuda_<kernel>_<rows>x<cols>_vs_d2d <value>' lines (>= 1: as fast as a copy).\n"
         "  ROWSxCOLS   shapes (default: 4096x1024 16384x1024 4096x4096)\n"
         "  --kernel    " + kernel_list() + " (default: all; repeatable)\n"
         "  --reps N    timed batches (default 15)     --batch N   calls per batch (default 20)\n"
         "  --json PATH write the results as JSON\n"
         "  Without a usable GPU it prints 'SKIPPED: no GPU (...)' and exits 0.\n";
}

FusedBenchOptions parse_fused_bench_args(const std::vector<std::string>& args) {
  FusedBenchOptions o;
  const auto known = fused_bench_kernels();
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      o.help = true;
    } else if (a == "--json") {
      o.json_path = option_value(args, i, "a file path");
      MLS_CHECK(!o.json_path.empty(), kProgram, ": --json needs a file path, got ''");
    } else if (a == "--reps") {
      o.reps = positive_int(a, option_value(args, i, "a positive integer"));
    } else if (a == "--batch") {
      o.batch = positive_int(a, option_value(args, i, "a positive integer"));
    } else if (a == "--kernel") {
      std::string_view list = option_value(args, i, "a kernel name");
      while (true) {
        const auto comma = list.find(',');
        const std::string name(list.substr(0, comma));
        if (std::find(known.begin(), known.end(), name) == known.end())
          fail(kProgram, ": --kernel: unknown kernel '", name, "'; expected one of ", kernel_list());
        if (std::find(o.kernels.begin(), o.kernels.end(), name) == o.kernels.end())
          o.kernels.push_back(name);
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
      }
    } else if (a.starts_with("-")) {
      fail(kProgram, ": unknown option '", a, "'; expected --kernel, --reps, --batch, --json or --help");
    } else {
      try {
        o.shapes.push_back(parse_rows_cols(a));
      } catch (const Error& e) {
        fail(kProgram, ": ", e.what());
      }
    }
  }
  if (o.shapes.empty()) o.shapes = {{4096, 1024}, {16384, 1024}, {4096, 4096}};
  if (o.kernels.empty()) o.kernels = known;
  return o;
}

std::string ratio_name(const FusedBenchResult& r) {
  return "cuda_" + r.kernel + "_" + to_string(r.shape) + "_vs_d2d";
}

std::string ratio_line(const FusedBenchResult& r) {
  char value[32];
  std::snprintf(value, sizeof value, "%.4f", r.ratio());
  return "ratio " + ratio_name(r) + " " + value;
}

std::string result_line(const FusedBenchResult& r) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%-10s %-11s %9.4f ms %8.1f GB/s   d2d %9.4f ms %8.1f GB/s   vs_d2d %.3f",
                r.kernel.c_str(), to_string(r.shape).c_str(), r.ms, r.gbs(), r.copy_ms,
                r.copy_gbs(), r.ratio());
  return buf;
}

std::string fused_bench_json(const std::string& device, const std::vector<FusedBenchResult>& results) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : results) {
    rows.push_back({{"kernel", r.kernel}, {"rows", r.shape.rows}, {"cols", r.shape.cols},
                    {"bytes", r.bytes}, {"ms", r.ms}, {"gbs", r.gbs()},
                    {"peer_bytes", r.copy_bytes}, {"peer_ms", r.copy_ms},
                    {"peer_gbs", r.copy_gbs()}, {"ratio", r.ratio()}});
  }
  const nlohmann::json doc = {{"lab", 4}, {"device", device}, {"peer", "d2d"}, {"fused", rows}};
  return doc.dump() + "\n";
}

}  // namespace mls::kernels
