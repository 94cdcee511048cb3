#include "mls/grader/bench.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>

#include "mls/grader/sandbox.hpp"
#include "mls/grader/util.hpp"

namespace mls::grader {

using nlohmann::json;

double gbench_median(const json& report, const std::string& name_regex, const std::string& field) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (!report.contains("benchmarks") || !report["benchmarks"].is_array()) return nan;
  std::regex re;
  try {
    re = std::regex(name_regex);
  } catch (const std::regex_error&) {
    return nan;
  }
  std::vector<double> values;
  for (const auto& b : report["benchmarks"]) {
    std::string run = b.value("run_name", b.value("name", ""));
    if (!std::regex_search(run, re) || !b.contains(field) || !b[field].is_number()) continue;
    std::string agg = b.value("aggregate_name", "");
    if (agg == "median") return b[field].get<double>();
    if (agg.empty()) values.push_back(b[field].get<double>());
  }
  if (values.empty()) return nan;
  std::sort(values.begin(), values.end());
  std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

BenchResult evaluate_benchmark(const json& report, const Benchmark& b) {
  BenchResult r;
  r.name = b.name;
  if (b.metric == "ratio") {
    r.own = gbench_median(report, b.filter, "real_time");
    r.peer = gbench_median(report, b.peer, "real_time");
    if (std::isnan(r.own) || std::isnan(r.peer) || r.own <= 0) {
      r.message = "no timing for '" + b.filter + "' or its peer '" + b.peer + "' in the report";
      return r;
    }
    r.value = r.peer / r.own;
    r.ok = true;
    char buf[200];
    std::snprintf(buf, sizeof buf, "%s: %.4g ns vs peer %.4g ns: %.3fx the peer's speed", b.name.c_str(), r.own, r.peer, r.value);
    r.message = buf;
    return r;
  }
  r.own = gbench_median(report, b.filter, b.metric);
  r.peer = b.peer.empty() ? std::numeric_limits<double>::quiet_NaN() : gbench_median(report, b.peer, b.metric);
  if (std::isnan(r.own)) {
    r.message = "no counter '" + b.metric + "' for '" + b.filter + "' in the report";
    return r;
  }
  r.value = r.own;
  r.ok = true;
  char buf[256];
  if (std::isnan(r.peer))
    std::snprintf(buf, sizeof buf, "%s: %.4g %s", b.name.c_str(), r.own, b.metric.c_str());
  else
    std::snprintf(buf, sizeof buf, "%s: %.4g %s (peer %.4g, %.1f%% of the peer)", b.name.c_str(), r.own, b.metric.c_str(),
                  r.peer, 100.0 * r.own / r.peer);
  r.message = buf;
  return r;
}

BenchResult run_benchmark(const fs::path& binary, const Benchmark& b, double time_limit_s, int repetitions) {
  fs::path scratch = make_temp_dir("mls-grader-bench");
  SandboxSpec s;
  s.cwd = scratch;
  s.env = minimal_env(scratch);
  s.limits.wall_s = time_limit_s;
  s.limits.cpu_s = time_limit_s * 4 + 1;
  s.limits.address_space_mb = binary_uses_sanitizer(binary) ? 0 : 8192;
  s.limits.output_cap = 16u << 20;
  s.limits.keep_head = 8u << 20;
  s.limits.keep_tail = 0;
  std::string filter = b.peer.empty() ? b.filter : "(" + b.filter + ")|(" + b.peer + ")";
  s.argv = {fs::absolute(binary).string(), "--benchmark_filter=" + filter, "--benchmark_format=json",
            "--benchmark_repetitions=" + std::to_string(repetitions), "--benchmark_report_aggregates_only=true"};
  SandboxResult r = run_sandboxed(s);
  remove_tree(scratch);
  BenchResult br;
  br.name = b.name;
  if (!r.started || r.timed_out || r.signal || !r.exited || r.exit_code != 0) {
    br.message = "the benchmark program failed (" +
                 std::string(r.timed_out ? "time limit" : r.signal ? signal_name(r.signal) : "exit code " + std::to_string(r.exit_code)) +
                 ")" + (r.err.empty() ? "" : ": " + sanitize_text(head_tail(r.err, 800, 400), 1500));
    return br;
  }
  json j;
  try {
    j = json::parse(r.out);
  } catch (const std::exception& e) {
    br.message = std::string("the benchmark output is not JSON: ") + e.what();
    return br;
  }
  return evaluate_benchmark(j, b);
}

}  // namespace mls::grader
