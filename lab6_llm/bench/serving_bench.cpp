// mls-serving-bench: the engine's continuous batching against static batching and one request at
// a time, in one process, on the same requests (a random model; throughput does not depend on
// the weights). All requests arrive at once (an offline, closed workload: no Poisson arrivals).
//
//   one at a time   the engine with max_running = 1
//   static          groups of --batch requests; a group runs until its LONGEST output is done
//                   (every request of it generates the group's maximum; only its own count),
//                   and the next group starts after it
//   continuous      the engine with max_running = --batch: a finished sequence's slot is refilled
//                   at the next step
//
// Prints each policy's useful tokens/s and time to first token (p50, p99), then
//   ratio continuous_vs_static_throughput, ratio continuous_vs_one_at_a_time_throughput,
//   ratio continuous_vs_static_ttft_p99 (below 1: continuous is better),
//   ratio decode_token_time_batch<B>_vs_batch1 (time per decoded token in a batch of B decodes
//   over that of one: the price of a token once the weights are read once per step),
// and Amdahl's bound on continuous_vs_one_at_a_time: one at a time's time (its prefill and decode
// steps, each per row) over the time of all its rows at the batch-B price of a row.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>

#include "mls/common/parallel.hpp"
#include "mls/common/error.hpp"
#include "mls/kernels/sgemm.hpp"
#include "mls/llm/engine.hpp"

using namespace mls;
using namespace mls::llm;

namespace {

struct Result {
  double seconds = 0;
  std::int64_t tokens = 0;  // useful tokens
  std::vector<double> ttft;
  // steps that gave some request its first token (the prompt's last chunk: prefill) and the rest
  // (decode, and earlier chunks of long prompts): seconds and rows run through the model
  double prefill_seconds = 0, decode_seconds = 0;
  std::int64_t prefill_rows = 0, decode_rows = 0, steps = 0;
};

/// Seconds since construction on the wall clock, or on the process's CPU clock (--clock cpu: on a
/// busy machine, time the process did not run is not counted; one thread only).
struct Clock {
  bool cpu = false;
  double t0 = 0;
  explicit Clock(bool use_cpu) : cpu(use_cpu), t0(now()) {}
  double now() const {
    timespec ts{};
    clock_gettime(cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  double seconds() const { return now() - t0; }
};

/// Multiply-adds per second one core does at best: 12 independent vector chains of acc = acc * m
/// + c (FMAs where the CPU has them; compiled for AVX-512, AVX2/FMA and x86-64 as the decode GEMM
/// is), the best of 3 runs of `iters` steps, timed with this thread's CPU clock whatever --clock
/// says (a busy machine's waits are not the core's speed). The yardstick of --profile's GFLOP/s.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
double fma_peak(std::int64_t iters) {
  struct ThreadClock {
    double seconds() const {
      timespec ts{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
    }
  } clock;
  using v16 = float __attribute__((vector_size(64)));
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    v16 a[12];
    for (int k = 0; k < 12; ++k) a[k] = v16{} + static_cast<float>(k);
    const v16 m = v16{} + 0.999999f, c = v16{} + 1e-6f;
    const double t0 = clock.seconds();
    for (std::int64_t i = 0; i < iters; ++i)
      for (int k = 0; k < 12; ++k) a[k] = a[k] * m + c;
    const double t = clock.seconds() - t0;
    float sink = 0;
    for (int k = 0; k < 12; ++k) sink += a[k][k];
    if (sink == 12345.f) std::printf(" ");  // keeps the chains
    best = std::max(best, 12.0 * 16.0 * static_cast<double>(iters) / t);
  }
  return best;
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

/// Runs `reqs` through one engine (max_running), all submitted at t0 + offset; returns the time
/// of each request's first token (from the engine's start) and its tokens.
void run_group(const GPTParams& p, const std::shared_ptr<const DecodeModel>& model, EngineOptions opt, const std::vector<EngineRequest>& reqs, const Clock& clock,
               Result& r, const std::vector<std::int64_t>& useful) {
  Engine e(p, opt, {}, model);
  std::map<std::int64_t, std::size_t> idx;
  for (std::size_t i = 0; i < reqs.size(); ++i) idx[e.add(reqs[i])] = i;
  std::vector<std::int64_t> got(reqs.size(), 0);
  while (!e.idle()) {
    const double t0 = clock.seconds();
    const std::int64_t rows0 = e.stats().computed_tokens;
    bool prefill = false;
    for (const auto& ev : e.step()) {
      const std::size_t i = idx.at(ev.id);
      if (ev.first) r.ttft.push_back(clock.seconds());
      prefill = prefill || ev.first;
      if (ev.token >= 0 && got[i] < useful[i]) {
        ++got[i];
        ++r.tokens;
      }
    }
    (prefill ? r.prefill_seconds : r.decode_seconds) += clock.seconds() - t0;
    (prefill ? r.prefill_rows : r.decode_rows) += e.stats().computed_tokens - rows0;
    ++r.steps;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mls-serving-bench: continuous batching vs static batching vs one request at a time (lab 6)"};
  ModelSpec spec;
  spec.config = "small";
  std::int64_t requests = 96, batch = 32, prompt_min = 4, prompt_max = 24, out_min = 4, out_max = 36;
  std::uint64_t seed = 0;
  int threads = 0;
  bool profile = false;
  std::string clock_name = "wall";
  app.add_option("--config", spec.config, "named config (nano, small)")->capture_default_str();
  app.add_option("--n-layer", spec.n_layer, "override the config's layers");
  app.add_option("--n-embd", spec.n_embd, "override the config's width");
  app.add_option("--n-head", spec.n_head, "override the config's heads");
  app.add_option("--block-size", spec.block_size, "override the context length");
  app.add_option("--requests", requests, "requests")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_option("--batch", batch, "sequences in a batch (static and continuous)")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--prompt-min", prompt_min, "shortest prompt")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--prompt-max", prompt_max, "longest prompt")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--out-min", out_min, "fewest new tokens")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--out-max", out_max, "most new tokens")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--seed", seed, "seed of the model and the requests")->capture_default_str();
  app.add_option("--threads", threads, "threads (default: MLS_NUM_THREADS or all cores)")->check(CLI::Range(1, 4096));
  app.add_flag("--profile", profile, "print where a decode step spends its time (per token, per stage) at batch 1 "
               "and at --batch");
  app.add_option("--clock", clock_name, "wall, or cpu: the process's CPU time (a busy machine; needs --threads 1)")
      ->check(CLI::IsMember({"wall", "cpu"}))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (threads > 0) set_num_threads(threads);
    const bool cpu = clock_name == "cpu";
    MLS_CHECK(!cpu || num_threads() == 1, "serving-bench: --clock cpu with ", num_threads(),
              " threads, expected --threads 1 (the CPU clock adds up every thread's time)");
    kernels::register_kernels();
    const GPTConfig cfg = spec.make(65);
    MLS_CHECK(prompt_min <= prompt_max && out_min <= out_max, "serving-bench: --prompt-min ", prompt_min,
              " > --prompt-max ", prompt_max, " or --out-min ", out_min, " > --out-max ", out_max);
    MLS_CHECK(prompt_max + out_max <= cfg.block_size, "serving-bench: --prompt-max + --out-max = ",
              prompt_max + out_max, ", expected <= the context length ", cfg.block_size);
    const GPTParams p = init_params(cfg, seed);
    // the weights packed once (loading a model), shared by every engine below: not timed
    const auto model = std::make_shared<const DecodeModel>(p);
    Rng rng(seed, "serving-bench");
    std::vector<EngineRequest> reqs;
    for (std::int64_t i = 0; i < requests; ++i) {
      EngineRequest r;
      const std::int64_t n = rng.randint(prompt_min, prompt_max + 1);
      for (std::int64_t j = 0; j < n; ++j) r.prompt.push_back(static_cast<std::int32_t>(rng.randint(0, cfg.vocab_size)));
      r.max_tokens = rng.randint(out_min, out_max + 1);
      r.sample.greedy = true;
      reqs.push_back(r);
    }
    std::vector<std::int64_t> useful;
    for (const auto& r : reqs) useful.push_back(r.max_tokens);
    EngineOptions opt;
    opt.block_tokens = 16;
    opt.num_blocks = batch * ((cfg.block_size + 15) / 16);  // every running sequence fits: no preemption
    opt.max_step_tokens = std::max<std::int64_t>(256, batch);
    opt.prefix_sharing = false;  // random prompts share nothing

    std::map<std::string, Result> res;
    {
      Result& r = res["one_at_a_time"];
      EngineOptions o = opt;
      o.max_running = 1;
      Clock t(cpu);
      run_group(p, model, o, reqs, t, r, useful);
      r.seconds = t.seconds();
    }
    {
      Result& r = res["static"];
      EngineOptions o = opt;
      o.max_running = batch;
      Clock t(cpu);
      for (std::int64_t g = 0; g < requests; g += batch) {
        const auto end = std::min(requests, g + batch);
        std::vector<EngineRequest> group(reqs.begin() + g, reqs.begin() + end);
        std::vector<std::int64_t> use(useful.begin() + g, useful.begin() + end);
        std::int64_t longest = 0;
        for (const auto& q : group) longest = std::max(longest, q.max_tokens);
        for (auto& q : group) q.max_tokens = longest;  // the group runs to its longest output
        run_group(p, model, o, group, t, r, use);
      }
      r.seconds = t.seconds();
    }
    {
      Result& r = res["continuous"];
      EngineOptions o = opt;
      o.max_running = batch;
      Clock t(cpu);
      run_group(p, model, o, reqs, t, r, useful);
      r.seconds = t.seconds();
    }
    std::printf("%s (%lld layers, %lld wide, context %lld), %lld requests, prompts %lld-%lld, outputs %lld-%lld tokens, "
                "batch %lld, %d thread(s), %s clock; all requests arrive at once\n",
                spec.config.c_str(), (long long)cfg.n_layer, (long long)cfg.n_embd, (long long)cfg.block_size,
                (long long)requests, (long long)prompt_min, (long long)prompt_max, (long long)out_min,
                (long long)out_max, (long long)batch, num_threads(), clock_name.c_str());
    for (const char* k : {"one_at_a_time", "static", "continuous"}) {
      const Result& r = res[k];
      std::printf("%-14s %8.0f tok/s  (%lld tokens in %.3f s)  TTFT p50 %.3f s  p99 %.3f s  %lld steps, %.1f rows "
                  "a step\n", k, static_cast<double>(r.tokens) / r.seconds, (long long)r.tokens, r.seconds,
                  pct(r.ttft, 0.5), pct(r.ttft, 0.99), (long long)r.steps,
                  static_cast<double>(r.prefill_rows + r.decode_rows) / static_cast<double>(std::max<std::int64_t>(1, r.steps)));
    }
    const auto tps = [&](const char* k) { return static_cast<double>(res[k].tokens) / res[k].seconds; };
    std::printf("ratio continuous_vs_static_throughput %.3f\n", tps("continuous") / tps("static"));
    std::printf("ratio continuous_vs_one_at_a_time_throughput %.3f\n", tps("continuous") / tps("one_at_a_time"));
    std::printf("ratio continuous_vs_static_ttft_p99 %.3f\n", pct(res["continuous"].ttft, 0.99) / pct(res["static"].ttft, 0.99));

    // decode step time per token: `batch` sequences decoding together vs one (the best of 3 runs
    // of 12 steps each); with --profile, the stages of those steps
    const auto decode_time = [&](std::int64_t b, DecodeProfile* prof) {
      double best = 1e300;
      for (int rep = 0; rep < 3; ++rep) {
        EngineOptions o = opt;
        o.max_running = b;
        Engine e(p, o, {}, model);
        for (std::int64_t i = 0; i < b; ++i) {
          EngineRequest r = reqs[static_cast<std::size_t>(i % requests)];
          r.prompt.resize(std::min<std::size_t>(r.prompt.size(), 8));
          r.max_tokens = 24;
          e.add(r);
        }
        while (e.stats().running < b || e.stats().waiting > 0) e.step();  // prompts done
        for (int i = 0; i < 2; ++i) e.step();
        DecodeProfile run;
        run.cpu_time = cpu;
        e.set_profile(prof ? &run : nullptr);
        Clock t(cpu);
        int steps = 0;
        for (; steps < 12 && e.stats().running == b; ++steps) e.step();
        const double per_token = t.seconds() / static_cast<double>(steps * b);
        if (per_token < best) {
          best = per_token;
          if (prof) *prof = run;
        }
      }
      return best;
    };
    DecodeProfile prof1, profb;
    const double t1 = decode_time(1, profile ? &prof1 : nullptr), tb = decode_time(batch, profile ? &profb : nullptr);
    std::printf("decode: %.1f us per token at batch 1, %.1f us per token at batch %lld\n", t1 * 1e6, tb * 1e6,
                (long long)batch);
    if (profile) {
      std::printf("decode step by stage, us per token (batch 1 | batch %lld); the GEMMs also in GFLOP/s "
                  "(2 x multiply-adds a row x rows / time):\n", (long long)batch);
      const double C = static_cast<double>(cfg.n_embd), V = static_cast<double>(cfg.vocab_size),
                   L = static_cast<double>(cfg.n_layer);
      struct Stage {
        const char* name;
        double DecodeProfile::*field;
        double macs;  // multiply-adds a row (0: not a GEMM); the LM head's per row with logits
      };
      const Stage stages[] = {
          {"embedding", &DecodeProfile::embed, 0},          {"layernorms", &DecodeProfile::layernorm, 0},
          {"qkv GEMM", &DecodeProfile::qkv, 3 * C * C * L}, {"k/v into the cache", &DecodeProfile::kv_write, 0},
          {"attention (paged)", &DecodeProfile::attention, 0},
          {"attn proj GEMM (+res)", &DecodeProfile::attproj, C * C * L},
          {"fc, fcproj GEMMs (+res)", &DecodeProfile::mlp, 8 * C * C * L},
          {"bias + GELU", &DecodeProfile::gelu, 0},         {"LM head GEMM", &DecodeProfile::head, V * C},
          {"scheduler", &DecodeProfile::schedule, 0},       {"sampling, finishing", &DecodeProfile::sample, 0},
          {"other bookkeeping", &DecodeProfile::other, 0}};
      const auto per = [](const DecodeProfile& d, double v) {
        return d.rows > 0 ? v * 1e6 / static_cast<double>(d.rows) : 0.0;
      };
      const auto gflops = [&](const DecodeProfile& d, const Stage& st) {
        const double rows = static_cast<double>(st.field == &DecodeProfile::head ? d.logit_rows : d.rows);
        return d.*st.field > 0 ? 2.0 * st.macs * rows / (d.*st.field) * 1e-9 : 0.0;
      };
      double gemm_macs[2] = {0, 0}, gemm_s[2] = {0, 0};
      for (const Stage& st : stages) {
        if (st.macs == 0) {
          std::printf("  %-24s %8.2f | %8.2f\n", st.name, per(prof1, prof1.*st.field), per(profb, profb.*st.field));
          continue;
        }
        std::printf("  %-24s %8.2f | %8.2f   %6.1f | %6.1f GFLOP/s\n", st.name, per(prof1, prof1.*st.field),
                    per(profb, profb.*st.field), gflops(prof1, st), gflops(profb, st));
        for (int i = 0; i < 2; ++i) {
          const DecodeProfile& d = i == 0 ? prof1 : profb;
          gemm_macs[i] += st.macs * static_cast<double>(st.field == &DecodeProfile::head ? d.logit_rows : d.rows);
          gemm_s[i] += d.*st.field;
        }
      }
      std::printf("  %-24s %8.2f | %8.2f\n", "total", per(prof1, prof1.total()), per(profb, profb.total()));
      const double peak = 2.0 * fma_peak(2000000) * 1e-9;
      const auto frac = [&](int i) { return gemm_s[i] > 0 ? 2.0 * gemm_macs[i] / gemm_s[i] * 1e-9 : 0.0; };
      std::printf("  all GEMMs: %.1f | %.1f GFLOP/s = %.0f%% | %.0f%% of one core's FMA peak, %.1f GFLOP/s (12 "
                  "independent vector FMA chains, measured here)%s\n", frac(0), frac(1), 100 * frac(0) / peak,
                  100 * frac(1) / peak, peak, profb.team_steps > 0 ? " (a team: all its threads)" : "");
      std::printf("  steps the threads shared as a team (threads > 1): %lld of %lld | %lld of %lld%s\n",
                  (long long)prof1.team_steps, (long long)prof1.steps, (long long)profb.team_steps,
                  (long long)profb.steps, profb.team_steps > 0 ? " (their stages: the first thread's wall time, "
                  "barrier waits included)" : "");
    }
    std::printf("ratio decode_token_time_batch%lld_vs_batch1 %.3f\n", (long long)batch, tb / t1);
    // Amdahl: one at a time runs each prompt as one prefill step (a GEMM of its rows) and each
    // later token alone; continuous batching can at best run every one of those rows at the
    // price of a row in a full batch (tb). The bound on the ratio, from these measurements:
    const Result& one = res["one_at_a_time"];
    const std::int64_t rows = one.prefill_rows + one.decode_rows;
    const double ideal = static_cast<double>(rows) * tb;
    std::printf("one at a time: prefill steps %.1f us per row (%lld rows), decode steps %.1f us per row (%lld rows)\n",
                one.prefill_seconds * 1e6 / static_cast<double>(std::max<std::int64_t>(1, one.prefill_rows)),
                (long long)one.prefill_rows,
                one.decode_seconds * 1e6 / static_cast<double>(std::max<std::int64_t>(1, one.decode_rows)),
                (long long)one.decode_rows);
    std::printf("amdahl: every row at %.1f us (batch %lld) -> continuous_vs_one_at_a_time at most %.2f; "
                "5x needs %.1f us per row\n",
                tb * 1e6, (long long)batch, one.seconds / ideal, one.seconds * 1e6 / (5.0 * static_cast<double>(rows)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mls-serving-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
