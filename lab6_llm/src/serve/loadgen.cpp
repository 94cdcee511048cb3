// Lab 6: `mls-gpt loadgen` — a load generator for `mls-gpt serve` (or any OpenAI completions
// server): Poisson arrivals at each offered rate, streaming requests from a bounded set of client
// connections, throughput and latency percentiles, an SVG of latency against load.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "mls/common/error.hpp"
#include "mls/common/file.hpp"
#include "mls/common/rng.hpp"
#include "mls/common/svg.hpp"
#include "mls/llm/serve.hpp"

namespace mls::llm {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(std::lround(p * static_cast<double>(v.size() - 1)));
  return v[std::min(i, v.size() - 1)];
}

struct RunStats {
  double rate = 0, seconds = 0;
  std::int64_t ok = 0, errors = 0, rejected = 0, tokens = 0;
  std::vector<double> ttft, itl, e2e;
  std::string first_error;  // why the first failed request failed (printed under the table)
};

/// One offered rate: `requests` arrivals, exponential gaps of mean 1/rate (rate 0: all at once),
/// sent by `clients` connections; latencies count from the scheduled arrival (a request that
/// waits for a free client waits in the measurement too).
RunStats run_rate(const LoadgenOptions& o, double rate, std::uint64_t seed) {
  Rng rng(seed, "loadgen");
  std::vector<double> arrive(static_cast<std::size_t>(o.requests));
  double t = 0;
  for (auto& a : arrive) {
    if (rate > 0) t += -std::log(1.0 - rng.uniform_double()) / rate;
    a = t;
  }
  std::vector<json> bodies;
  for (std::int64_t i = 0; i < o.requests; ++i) {
    json b = {{"prompt", o.prompts[static_cast<std::size_t>(rng.randint(0, static_cast<std::int64_t>(o.prompts.size())))]},
              {"max_tokens", rng.randint(o.min_tokens, o.max_tokens + 1)},
              {"temperature", 1.0},
              {"seed", seed + static_cast<std::uint64_t>(i)},
              {"stream", true}};
    bodies.push_back(b);
  }
  RunStats st;
  st.rate = rate;
  std::mutex mu;
  std::atomic<std::int64_t> next{0};
  const auto t0 = Clock::now();
  const auto secs = [&](Clock::time_point x) { return std::chrono::duration<double>(x - t0).count(); };
  const auto client = [&] {
    httplib::Client cli(o.url);
    cli.set_read_timeout(300, 0);
    for (;;) {
      const std::int64_t i = next++;
      if (i >= o.requests) return;
      const double at = arrive[static_cast<std::size_t>(i)];
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at)));
      std::vector<double> times;  // arrival of each event with text, seconds since t0
      std::int64_t tokens = 0;
      std::string buf;
      bool done = false;
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.headers = {{"Content-Type", "application/json"}};
      req.body = bodies[static_cast<std::size_t>(i)].dump();
      req.content_receiver = [&](const char* data, std::size_t len, std::uint64_t, std::uint64_t) {
        buf.append(data, len);
        for (std::size_t end; (end = buf.find("\n\n")) != std::string::npos;) {
          const std::string ev = buf.substr(0, end);
          buf.erase(0, end + 2);
          if (ev.rfind("data: ", 0) != 0) continue;
          if (ev == "data: [DONE]") {
            done = true;
            continue;
          }
          const json j = json::parse(ev.substr(6), nullptr, false);
          if (j.is_discarded() || !j.contains("choices")) continue;
          if (j.contains("usage") && j["usage"].is_object()) tokens = j["usage"].value("completion_tokens", tokens);
          if (!j["choices"][0]["text"].get<std::string>().empty()) times.push_back(secs(Clock::now()));
        }
        return true;
      };
      const auto res = cli.send(req);
      std::lock_guard<std::mutex> lk(mu);
      const auto fail = [&](std::string why) {
        if (st.errors++ == 0) st.first_error = "request " + std::to_string(i) + ": " + why;
      };
      if (!res) {
        fail("no response (" + httplib::to_string(res.error()) + ")");
        continue;
      }
      if (res->status == 503) {
        ++st.rejected;
        continue;
      }
      if (res->status != 200 || !done) {
        fail(res->status != 200 ? "HTTP " + std::to_string(res->status) + ": " + res->body.substr(0, 200)
                                : std::string("the stream ended without data: [DONE]"));
        continue;
      }
      ++st.ok;
      st.tokens += tokens;
      if (!times.empty()) {
        st.ttft.push_back(times.front() - at);
        for (std::size_t k = 1; k < times.size(); ++k) st.itl.push_back(times[k] - times[k - 1]);
        st.e2e.push_back(times.back() - at);
      }
    }
  };
  std::vector<std::thread> th;
  for (std::int64_t c = 0; c < o.clients; ++c) th.emplace_back(client);
  for (auto& x : th) x.join();
  st.seconds = secs(Clock::now());
  return st;
}

}  // namespace

int loadgen(const LoadgenOptions& o) {
  MLS_CHECK(o.requests >= 1, "loadgen: --requests = ", o.requests, ", expected >= 1");
  MLS_CHECK(o.clients >= 1 && o.clients <= 4096, "loadgen: --clients = ", o.clients, ", expected 1 .. 4096");
  MLS_CHECK(!o.rates.empty(), "loadgen: no --rate");
  for (double r : o.rates) MLS_CHECK(std::isfinite(r) && r >= 0, "loadgen: --rate ", r, ", expected >= 0 (0: all at once)");
  MLS_CHECK(o.min_tokens >= 1 && o.min_tokens <= o.max_tokens, "loadgen: --min-tokens ", o.min_tokens,
            " and --max-tokens ", o.max_tokens, ", expected 1 <= min <= max");
  MLS_CHECK(!o.prompts.empty(), "loadgen: no --prompt");
  {
    httplib::Client cli(o.url);
    const auto h = cli.Get("/health");
    MLS_CHECK(h && h->status == 200, "loadgen: ", o.url, "/health does not answer 200 (is `mls-gpt serve` running?)");
  }
  std::vector<RunStats> runs;
  std::printf("%-8s %6s %6s %6s %9s %8s | %-23s | %-23s\n", "rate/s", "ok", "503", "errors", "tokens/s", "req/s",
              "TTFT p50 / p90 / p99 s", "ITL p50 / p90 / p99 ms");
  for (std::size_t k = 0; k < o.rates.size(); ++k) {
    RunStats s = run_rate(o, o.rates[k], o.seed + 1000003 * k);
    std::printf("%-8.2f %6lld %6lld %6lld %9.1f %8.2f | %6.3f %6.3f %6.3f     | %6.2f %6.2f %6.2f\n", s.rate,
                (long long)s.ok, (long long)s.rejected, (long long)s.errors, static_cast<double>(s.tokens) / s.seconds,
                static_cast<double>(s.ok) / s.seconds, pct(s.ttft, 0.5), pct(s.ttft, 0.9), pct(s.ttft, 0.99),
                1e3 * pct(s.itl, 0.5), 1e3 * pct(s.itl, 0.9), 1e3 * pct(s.itl, 0.99));
    if (s.errors > 0) std::printf("  %lld error(s) at this rate; the first: %s\n", (long long)s.errors, s.first_error.c_str());
    std::fflush(stdout);
    runs.push_back(std::move(s));
  }
  if (!o.svg.empty()) {
    // latency against offered load: TTFT p50 / p99 and ITL p99 (x: the rates in order)
    const double xmax = static_cast<double>(runs.size() - 1) + 0.5;
    double ymax = 1e-3;
    for (const auto& r : runs) ymax = std::max({ymax, pct(r.ttft, 0.99), pct(r.itl, 0.99)});
    svg::Document d(640, 400);
    const svg::Scale x(-0.5, xmax, 70, 600), y(0, ymax * 1.1, 340, 40);
    svg::AxisStyle xa, ya;
    for (std::size_t k = 0; k < runs.size(); ++k) xa.ticks.push_back(static_cast<double>(k));
    xa.label = [&](double v) {
      char lab[32];
      const double r = runs[static_cast<std::size_t>(std::lround(v))].rate;
      if (r == 0) return std::string("burst");
      std::snprintf(lab, sizeof lab, "%g/s", r);
      return std::string(lab);
    };
    xa.title = "offered load (requests/s, Poisson arrivals; burst: all at once)";
    ya.title = "seconds";
    ya.grid = "#ddd";
    ya.grid_to = 600;
    d.x_axis(x, 340, xa).y_axis(y, 70, ya);
    const auto series = [&](const char* colour, auto get) {
      std::vector<svg::Point> pts;
      for (std::size_t k = 0; k < runs.size(); ++k) pts.push_back({x(static_cast<double>(k)), y(get(runs[k]))});
      svg::Style line;
      line.stroke = colour;
      line.stroke_width = 1.5;
      d.polyline(pts, line);
      svg::Style dot;
      dot.fill = colour;
      for (const auto& p : pts) d.circle(p.x, p.y, 3, dot);
    };
    series("#1f77b4", [](const RunStats& r) { return pct(r.ttft, 0.5); });
    series("#d62728", [](const RunStats& r) { return pct(r.ttft, 0.99); });
    series("#2ca02c", [](const RunStats& r) { return pct(r.itl, 0.99); });
    d.legend(430, 50, {{"TTFT p50", "#1f77b4"}, {"TTFT p99", "#d62728"}, {"ITL p99", "#2ca02c"}});
    write_file_atomic(o.svg, d.str());
    std::printf("wrote %s\n", o.svg.c_str());
  }
  return 0;
}

}  // namespace mls::llm
