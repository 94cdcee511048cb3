// mls-gpt: train, sample, evaluate, inspect and export a mini GPT (lab 6).
//
//   mls-gpt train  --task sort --steps 300 --out runs/sort           (or --data input.txt)
//   mls-gpt sample --ckpt runs/sort/ckpt.bin --prompt "315042=" --greedy
//   mls-gpt eval   --ckpt runs/tiny/ckpt.bin --data input.txt
//   mls-gpt info   --ckpt runs/sort/ckpt.bin
//   mls-gpt export --ckpt runs/sort/ckpt.bin --format llmc --out model.bin
//   mls-gpt bench  --config small                                     (one training step, timed)
//   mls-gpt train  --remat sqrt ...                 (recompute activations: none | sqrt | optimal)
//   mls-gpt plan   --mem-budget 512MiB --ranks 4   (ZeRO stage x remat x micro-batch that fits)
//   mls-gpt zero-table --params 7.5e9 --ranks 64 --k 12               (the ZeRO paper's table)
//   mls-gpt train --zero 2 --ranks 4 --backend sim --precision bf16    (ZeRO: memory and traffic)
//   mpirun -np 2 mls-gpt train --zero 3 --backend mpi                  (ZeRO on MPI processes)
//   mls-gpt train --zero 3 --ranks 2 --remat sqrt                       (ZeRO with recompute)
//   mls-gpt train --zero 2 --backend nccl                 (ZeRO on lab 5's NCCL backend, GPUs)
//   mls-gpt train --batch 32 --accum 4       (gradient accumulation: 4 micro-batches of 8 per step)
//   mls-gpt train --moe-experts 4 --moe-top-k 2 --moe-every 1 --capacity-factor 1.25  (MoE)
//   mls-gpt serve --ckpt runs/tiny/ckpt.bin --port 8000   (HTTP, OpenAI completions; needs cpp-httplib)
//   mls-gpt loadgen --url http://127.0.0.1:8000 --rate 5,10,20 --svg load.svg   (latency against load)
//   mls-gpt train --moe-experts 4 --ep 2 --backend sim     (expert parallelism x data parallelism)
//   mpirun -np 2 mls-gpt train --moe-experts 4 --ep 2 --backend mpi       (EP on MPI processes)
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "mls/common/error.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/file.hpp"
#include "mls/common/progress.hpp"
#include "mls/common/timer.hpp"
#include "mls/kernels/roofline.hpp"
#include "mls/kernels/sgemm.hpp"
#include "mls/llm/checkpoint.hpp"
#include "mls/llm/data.hpp"
#include "mls/llm/llmc.hpp"
#include "mls/llm/planner.hpp"
#include "mls/llm/remat.hpp"
#include "mls/llm/report.hpp"
#include "mls/llm/sample.hpp"
#ifdef MLS_HAVE_HTTPLIB
#include "mls/llm/serve.hpp"
#endif
#include "mls/llm/tokenizer.hpp"
#include "mls/llm/train.hpp"
#include "mls/llm/train_run.hpp"
#include "mls/llm/moe_ep.hpp"
#include "mls/llm/zero.hpp"
#ifdef MLS_HAVE_MPI
#include "mls/parallel/mpi.hpp"
#endif
#ifdef MLS_HAVE_NCCL
#include "mls/parallel/nccl.hpp"
#endif

using namespace mls;
using namespace mls::llm;
namespace fs = std::filesystem;

namespace {

struct ModelFlags : ModelSpec {
  void add(CLI::App* app) {
    app->add_option("--config", config,
                    "named config: nano (3 layers, 3 heads, 48 dims, block 32) or small "
                    "(4, 4, 128, block 64)")
        ->capture_default_str();
    app->add_option("--n-layer", n_layer, "override the config's layers");
    app->add_option("--n-head", n_head, "override the config's heads");
    app->add_option("--n-embd", n_embd, "override the config's width");
    app->add_option("--block-size", block_size, "override the config's context length");
    app->add_option("--moe-experts", moe_experts,
                    "mixture of experts: E experts in the MLP of every --moe-every-th block (0: dense)")
        ->capture_default_str();
    app->add_option("--moe-top-k", moe_top_k, "experts per token (1 Switch, 2 GShard), 1..E")
        ->capture_default_str();
    app->add_option("--moe-every", moe_every, "blocks l with (l + 1) % N == 0 are MoE blocks")
        ->capture_default_str();
    app->add_option("--capacity-factor", capacity_factor,
                    "expert capacity = ceil(F * K * tokens / E); overflow is dropped")
        ->capture_default_str();
    app->add_option("--moe-aux-coef", moe_aux_coef, "load-balancing loss coefficient (0: off)")
        ->capture_default_str();
    app->add_option("--moe-z-coef", moe_z_coef, "router z-loss coefficient (0: off)")
        ->capture_default_str();
  }
};

void print_counts(const GPTConfig& c, std::int64_t T) { std::printf("%s", describe_counts(c, T).c_str()); }

// ---- train --remat (lab 6, part 2: rematerialization) ------------------------------------------

struct RematFlags {
  std::string kind = "none";
  std::string budget;  // activation budget of "optimal" (default: the sqrt plan's bytes)
  void add(CLI::App* app) {
    app->add_option("--remat", kind,
                    "recompute activations in backward: none | sqrt (Chen et al.) | optimal (the "
                    "fewest recomputed blocks within --remat-budget)")
        ->capture_default_str();
    app->add_option("--remat-budget", budget,
                    "activation bytes for --remat optimal, e.g. 4MiB (default: what sqrt needs)");
  }
};

// ---- train ----------------------------------------------------------------------------------

struct TrainFlags : TrainRunOptions {
  CLI::Option* attention_opt = nullptr;
  ModelFlags model_flags;
  RematFlags remat_flags;
  void add(CLI::App* app) {
    model_flags.add(app);
    app->add_option("--data", data, "a UTF-8 text file (default: a generated task)");
    app->add_option("--task", task, "sort | add (without --data)")->capture_default_str();
    app->add_option("--digits", digits, "digits of the task")->capture_default_str();
    app->add_option("--tokenizer", tokenizer, "char | bpe (text)")->capture_default_str();
    app->add_option("--vocab", vocab, "BPE vocabulary size")->capture_default_str();
    app->add_option("--steps", steps, "total optimizer steps")->capture_default_str();
    app->add_option("--batch", batch,
                      "batch size B per step (per rank with --zero or --ep; default 12 small, 32 otherwise, 4 "
                      "with --zero or --ep)");
    app->add_option("--accum", accum,
                      "gradient accumulation: micro-batches per step (a divisor of --batch; the "
                      "activations are those of one micro-batch of batch/accum)")
        ->capture_default_str();
    app->add_option("--context", context,
                      "sequence length T (default: block size, or the task's length)");
    app->add_option("--lr", lr, "peak learning rate")->capture_default_str();
    app->add_option("--min-lr", min_lr, "final learning rate of the cosine (default lr/10)");
    app->add_option("--warmup", warmup, "linear warmup steps (default steps/20)");
    app->add_option("--weight-decay", weight_decay, "AdamW's decoupled weight decay")
        ->capture_default_str();
    app->add_option("--beta2", beta2, "AdamW's beta2")->capture_default_str();
    app->add_option("--grad-clip", grad_clip, "clip the global gradient norm (0: off)")
        ->capture_default_str();
    app->add_option("--seed", seed, "seed of the init and the data")->capture_default_str();
    app->add_option("--eval-every", eval_every, "validation every N steps (0: off)")
        ->capture_default_str();
    app->add_option("--eval-batches", eval_batches, "validation batches")->capture_default_str();
    app->add_option("--ckpt-every", ckpt_every,
                      "checkpoint every N steps (and always at the end)");
    app->add_option("--out", out, "folder for ckpt.bin, loss.csv, loss.svg")
        ->capture_default_str();
    app->add_option("--stop-after", stop_after,
                      "stop (and checkpoint) after this step; the schedule still "
                      "runs to --steps (for --resume)");
    attention_opt = app->add_option("--attention", attention,
                    "attention kernel of the fused path: flash (lab 4's tiled kernel, O(T) "
                    "activations) | naive (the (T, T) scores kept)")
        ->capture_default_str();
    app->add_flag("--autodiff", autodiff,
                    "gradients from lab 2's tape (path (a)) instead of the fused path");
    app->add_option("--resume", resume, "continue a run from its checkpoint (bit-identical)");
    app->add_option("--init-from", init_from,
                      "start from a checkpoint's or an llm.c .bin's weights (fine-tune)");
    app->add_option("--sample", sample_tokens, "tokens to sample after training a text model")
        ->capture_default_str();
    remat_flags.add(app);
  }
};

int cmd_train(TrainFlags& f) {
  MLS_CHECK(!(f.autodiff && f.attention_opt->count() > 0), "train: --autodiff and --attention ",
            f.attention, " together, expected one of them (the tape has its own attention)");
  f.model = f.model_flags;
  f.remat = f.remat_flags.kind;
  f.remat_budget = f.remat_flags.budget;
  run_training(f);
  return 0;
}

// ---- sample -------------------------------------------------------------------------------------

struct SampleFlags {
  std::string ckpt, prompt;
  std::int64_t max_new = 200, top_k = 0, bench_context = 256;
  double temperature = 1.0, top_p = 1.0;
  std::uint64_t seed = 0;
  bool greedy = false, no_cache = false, bench = false;
  ModelFlags model;
  void add(CLI::App* app) {
    app->add_option("--ckpt", ckpt, "checkpoint");
    app->add_option("--prompt", prompt, "prompt text");
    app->add_option("--max-new-tokens,-n", max_new,
                    "tokens to generate (past the model's context length the window slides; said up front)")
        ->check(CLI::Range(0, 1000000))
        ->capture_default_str();
    app->add_option("--temperature", temperature, "> 0")->capture_default_str();
    app->add_option("--top-k", top_k, "0: off")->capture_default_str();
    app->add_option("--top-p", top_p, "(0, 1]")->capture_default_str();
    app->add_option("--seed", seed, "sampling seed")->capture_default_str();
    app->add_flag("--greedy", greedy, "argmax decoding");
    app->add_flag("--no-kv-cache", no_cache, "recompute the whole context for every token");
    app->add_flag("--bench", bench,
                     "generation tokens/s with and without the KV cache (random model)");
    app->add_option("--bench-context", bench_context, "context of --bench")
        ->capture_default_str();
    model.add(app);
  }
};

int cmd_sample_bench(SampleFlags& f) {
  // Generation speed at a long context, with and without the KV cache, on a random model.
  f.model.block_size = std::max<std::int64_t>(f.model.block_size, f.bench_context);
  if (f.model.config == "nano") f.model.config = "small";
  const GPTConfig cfg = f.model.make(65);
  const GPTParams p = init_params(cfg, f.seed);
  SampleOptions so;
  so.temperature = f.temperature;
  const std::vector<std::int32_t> prompt = {0};
  const std::int64_t n = f.bench_context - 1;
  double rates[2];
  for (int cache = 1; cache >= 0; --cache) {
    Rng r(f.seed, "bench");
    Timer t;
    generate(p, prompt, n, so, cache == 1, r);
    rates[cache] = static_cast<double>(n) / t.seconds();
  }
  std::printf(
      "generate %lld tokens (context up to %lld), %s, %d thread(s): KV cache %.0f tok/s, recompute "
      "%.0f "
      "tok/s, speedup %.1fx\n",
      (long long)n, (long long)f.bench_context, f.model.config.c_str(), num_threads(), rates[1],
      rates[0], rates[1] / rates[0]);
  return 0;
}

int cmd_sample(SampleFlags& f) {
  if (f.bench) return cmd_sample_bench(f);
  MLS_CHECK(!f.ckpt.empty(), "sample: --ckpt is required (or --bench)");
  const Checkpoint ck = load_checkpoint(f.ckpt);
  GPTParams p(ck.config);
  p.vec() = get_params(ck, "");
  const auto tok = load_tokenizer(ck.tokenizer);
  SampleOptions so;
  so.temperature = f.temperature;
  so.top_k = f.top_k;
  so.top_p = f.top_p;
  so.greedy = f.greedy;
  if (!so.greedy) validate_sample_options(so, ck.config.vocab_size);
  const bool cache = !f.no_cache;
  // With the KV cache the prompt must fit in the block (encode_prompt checks); without it the
  // context slides, so any prompt goes.
  const std::string text = f.prompt.empty() ? tok->decode({0}) : f.prompt;
  std::vector<std::int32_t> prompt =
      cache ? encode_prompt(*tok, text, ck.config.block_size) : tok->encode(text);
  const std::int64_t n = f.max_new;
  // Said before any text: past the context length the window slides (generate does it).
  if (const std::string note = generation_note(ck.config, static_cast<std::int64_t>(prompt.size()), n, cache);
      !note.empty())
    std::fprintf(stderr, "sample: %s\n", note.c_str());
  Rng r(f.seed, "sample");
  std::cout << tok->decode(prompt) << std::flush;
  Timer t;
  const auto out = generate(p, prompt, n, so, cache, r,
                            [&](std::int32_t id) { std::cout << tok->decode({id}) << std::flush; });
  std::cout << std::endl;  // before the figures on stderr
  std::fprintf(stderr, "%zu tokens, %.0f tok/s (%s)\n", out.size(),
               static_cast<double>(out.size()) / t.seconds(), cache ? "KV cache" : "recompute");
  return 0;
}

// ---- serve ---------------------------------------------------------------------------------------

#ifdef MLS_HAVE_HTTPLIB
struct ServeFlags {
  std::string ckpt;
  ServeOptions opt;
  void add(CLI::App* app) {
    app->add_option("--ckpt", ckpt, "checkpoint")->required();
    app->add_option("--host", opt.host, "address to listen on")->capture_default_str();
    app->add_option("--port", opt.port, "port (0: any free port, printed)")
        ->check(CLI::Range(0, 65535))->capture_default_str();
    app->add_option("--port-file", opt.port_file, "write the bound port to this file");
    app->add_option("--kv-blocks", opt.engine.num_blocks, "KV cache blocks in the pool")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24))->capture_default_str();
    app->add_option("--block-tokens", opt.engine.block_tokens, "positions per KV block")
        ->check(CLI::Range(1, 4096))->capture_default_str();
    app->add_option("--max-step-tokens", opt.engine.max_step_tokens,
                    "token budget of one engine step (decode tokens + prefill chunks)")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))->capture_default_str();
    app->add_option("--max-running", opt.engine.max_running, "sequences in the running batch at most")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 16))->capture_default_str();
    app->add_option("--max-queue", opt.max_queue, "waiting requests beyond which the server answers 503")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))->capture_default_str();
    app->add_option("--max-body", opt.max_body, "request body bytes at most (more: 413)")
        ->check(CLI::Range(std::int64_t{64}, std::int64_t{1} << 30))->capture_default_str();
    app->add_option("--default-max-tokens", opt.default_max_tokens, "max_tokens of a request that gives none")
        ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))->capture_default_str();
    app->add_option("--step-delay-ms", opt.step_delay_ms,
                    "pause after each engine step (to watch a tiny model stream; tests); 0 in real use")
        ->check(CLI::Range(0.0, 10000.0))->capture_default_str();
    app->add_flag("--no-prefix-sharing", [this](std::int64_t) { opt.engine.prefix_sharing = false; },
                  "do not share the KV blocks of common prompt prefixes");
  }
};

struct LoadgenFlags {
  LoadgenOptions opt;
  std::vector<std::string> prompts;
  void add(CLI::App* app) {
    app->add_option("--url", opt.url, "the server")->capture_default_str();
    app->add_option("--clients", opt.clients, "concurrent connections")->check(CLI::Range(1, 4096))->capture_default_str();
    app->add_option("--requests", opt.requests, "requests per rate")->check(CLI::Range(1, 10000000))->capture_default_str();
    app->add_option("--rate", opt.rates, "offered load, requests/s (Poisson arrivals; 0: all at once); several: a sweep")
        ->check(CLI::Range(0.0, 1e6))->delimiter(',');
    app->add_option("--min-tokens", opt.min_tokens, "fewest max_tokens of a request")->check(CLI::Range(1, 1 << 20))->capture_default_str();
    app->add_option("--max-tokens", opt.max_tokens, "most max_tokens of a request")->check(CLI::Range(1, 1 << 20))->capture_default_str();
    app->add_option("--prompt", prompts, "prompts to draw from (repeat the flag)");
    app->add_option("--seed", opt.seed, "seed of the arrivals, lengths and sampling")->capture_default_str();
    app->add_option("--svg", opt.svg, "write latency against load here");
  }
};

int cmd_serve(const ServeFlags& f) {
  const Checkpoint ck = load_checkpoint(f.ckpt);
  GPTParams p(ck.config);
  p.vec() = get_params(ck, "");
  const auto tok = load_tokenizer(ck.tokenizer);
  return serve(p, *tok, f.opt);
}
#endif

// ---- eval, info, export, bench
// --------------------------------------------------------------------

int cmd_eval(const std::string& ckpt_path, const std::string& data, std::int64_t batch) {
  const Checkpoint ck = load_checkpoint(ckpt_path);
  GPTParams p(ck.config);
  p.vec() = get_params(ck, "");
  const auto tok = load_tokenizer(ck.tokenizer);
  const auto ids = tok->encode(read_text_file(data));
  const double loss = eval_stream_loss(p, ids, batch);
  std::printf("%s: %zu tokens, loss %.4f nats/token, perplexity %.3f\n", data.c_str(), ids.size(),
              loss, std::exp(loss));
  return 0;
}

int cmd_info(const std::string& path) {
  if (is_llmc_file(path)) {
    const LlmcModel m = read_llmc(path);
    std::printf("llm.c model file %s (padded vocab %lld)\n", path.c_str(),
                (long long)m.padded_vocab_size);
    print_counts(m.config, m.config.block_size);
    return 0;
  }
  const Checkpoint ck = load_checkpoint(path);
  std::printf("checkpoint %s: step %lld\n", path.c_str(), (long long)ck.step);
  print_counts(ck.config, ck.config.block_size);
  const auto tok = load_tokenizer(ck.tokenizer);
  std::printf("tokenizer: %s, %lld tokens\n", tok->kind().c_str(), (long long)tok->vocab_size());
  for (const auto& [k, v] : ck.counters)
    std::printf("counter %s = %llu\n", k.c_str(), (unsigned long long)v);
  for (const auto& [k, v] : ck.settings) std::printf("setting %s = %s\n", k.c_str(), v.c_str());
  std::printf("arrays: %zu (parameters%s)\n", ck.arrays.size(),
              ck.find("m/wte") ? " + AdamW moments" : "");
  return 0;
}

int cmd_export(const std::string& ckpt_path, const std::string& format, const std::string& out) {
  MLS_CHECK(format == "llmc", "export: format '", format, "', expected llmc");
  const Checkpoint ck = load_checkpoint(ckpt_path);
  export_llmc(out, ck.config, get_params(ck, ""), ck.tokenizer);
  std::printf("wrote %s (llm.c float32 model, padded vocab %lld) and %s\n", out.c_str(),
              (long long)llmc_padded_vocab(ck.config.vocab_size), llmc_tokenizer_path(out).c_str());
  return 0;
}

/// Times one training step of `config` (B x T from the flags) on a random batch, or on the model
/// and batch of an llm.c file and a token file (for compare_torch.py: the same init and batch as
/// PyTorch). Prints "loss0 ...", "best_ms ...", tokens/s and MFU.
int cmd_bench(ModelFlags& m, std::int64_t B, std::int64_t steps, const std::string& init,
              const std::string& tokens_file, std::uint64_t seed, const std::string& attention) {
  const Attention kind = parse_attention(attention, "bench: --attention");
  GPTConfig cfg;
  GPTParams p;
  if (!init.empty()) {
    InitFrom in = load_init_from(init);
    cfg = in.config;
    p = GPTParams(cfg);
    p.vec() = std::move(in.params);
  } else {
    cfg = m.make(65);
    p = init_params(cfg, seed);
  }
  const std::int64_t T = cfg.block_size;
  Batch b;
  b.B = B;
  b.T = T;
  if (!tokens_file.empty()) {
    const std::string bytes = read_file(tokens_file, "bench");
    MLS_CHECK(static_cast<std::int64_t>(bytes.size()) == B * (T + 1) * 4, "bench: ", tokens_file,
              " has ", bytes.size(), " bytes, expected B*(T+1) int32 = ", B * (T + 1) * 4);
    const auto* ids = reinterpret_cast<const std::int32_t*>(bytes.data());
    for (std::int64_t i = 0; i < B; ++i)
      for (std::int64_t t = 0; t < T; ++t) {
        b.inputs.push_back(ids[i * (T + 1) + t]);
        b.targets.push_back(ids[i * (T + 1) + t + 1]);
      }
  } else {
    Rng r(seed, "bench-batch");
    for (std::int64_t i = 0; i < B * T; ++i) {
      b.inputs.push_back(static_cast<std::int32_t>(r.randint(0, cfg.vocab_size)));
      b.targets.push_back(static_cast<std::int32_t>(r.randint(0, cfg.vocab_size)));
    }
  }
  b.mask.assign(static_cast<std::size_t>(B * T), 1.f);
  TrainOptions o;
  o.batch = B;
  o.context = T;
  o.steps = steps;
  o.warmup = 0;
  o.grad_clip = 0;  // as the torch side: plain AdamW
  o.adamw.weight_decay = 0.0;
  o.lr = o.min_lr = 1e-4;
  o.attention = kind;
  Trainer tr(std::move(p), o);
  double best = 1e30, loss0 = 0;
  for (std::int64_t s = 0; s < steps + 3; ++s) {
    Timer t;
    const double l = tr.step(b).loss;
    if (s == 0) loss0 = l;
    if (s >= 3) best = std::min(best, t.seconds());
  }
  const double tok_s = static_cast<double>(B * T) / best, flops = train_flops_per_token(cfg, T);
  const kernels::CachedPeak pk = kernels::peak_gflops_cached(num_threads());  // once per machine
  const double peak = pk.gflops;
  std::printf(
      "attention %s\nloss0 %.6f\nbest_ms %.4f\ntokens_per_s %.0f\nmfu %.4f (%.2f GFLOP/s of %.1f "
      "peak, %d thread(s))\npeak %s\n",
      to_string(kind), loss0, best * 1e3, tok_s, tok_s * flops / (peak * 1e9), tok_s * flops * 1e-9, peak,
      num_threads(), pk.source.c_str());
  return 0;
}

}  // namespace

// ---- plan (lab 6, part 2: the memory planner) -------------------------------------------------------

struct PlanFlags {
  ModelFlags model;
  std::string budget = "512MiB", precision = "fp32", cost_json;
  std::int64_t batch = 8, context = 0, vocab = 65, max_layers = 48;
  int ranks = 4;
  double gflops = 20;
  bool largest = false, no_remat = false;
  void add(CLI::App* app) {
    model.add(app);
    app->add_option("--mem-budget", budget, "bytes per rank, e.g. 512MiB, 2GiB")
        ->capture_default_str();
    app->add_option("--ranks", ranks, "data-parallel ranks")->capture_default_str();
    app->add_option("--batch", batch, "sequences per rank per step")->capture_default_str();
    app->add_option("--context", context, "sequence length T (default: block size)");
    app->add_option("--vocab", vocab, "vocabulary size")->capture_default_str();
    app->add_option("--precision", precision,
                    "fp32 (4 + 4 + 8 bytes per parameter) | bf16 (2 + 2 + 12, K = 12)")
        ->capture_default_str();
    app->add_option("--gflops", gflops, "sustained GFLOP/s of one rank")->capture_default_str();
    app->add_option("--cost", cost_json, "α-β-γ JSON from mls-collectives calibrate");
    app->add_flag("--largest", largest,
                  "the deepest model of the family (L layers, C = 64 L) that fits, per stage");
    app->add_flag("--no-remat", no_remat, "keep every activation (no recompute plans)");
    app->add_option("--max-layers", max_layers, "largest L tried by --largest")
        ->capture_default_str();
  }
};

int cmd_plan(const PlanFlags& f) {
  PlannerInput in;
  in.cfg = f.model.make(f.vocab);
  in.batch = f.batch;
  in.context = f.context ? f.context : in.cfg.block_size;
  in.ranks = f.ranks;
  in.budget_bytes = parse_bytes(f.budget);
  in.flops_per_s = f.gflops * 1e9;
  in.remat = !f.no_remat;
  if (!f.cost_json.empty()) in.comm = parallel::CostModel::load(f.cost_json);
  const PrecisionBytes pb = precision_bytes(parse_precision(f.precision));
  in.param_bytes = pb.param;
  in.grad_bytes = pb.grad;
  in.k = pb.k;
  if (!f.largest) {
    const PlannerResult r = plan_memory(in);
    std::printf("%s", explain(in, r).c_str());
    std::printf("run it (simulated ranks; under mpirun: --backend mpi without --ranks):\n  %s\n",
                train_command(in, r.best, f.model.args()).c_str());
    return 0;
  }
  std::printf("the largest model (L layers, L heads, C = 64 L, block %lld, vocab %lld) that trains "
              "in %s per rank, %d ranks, batch %lld, %s:\n",
              (long long)in.context, (long long)in.cfg.vocab_size,
              mem::human_bytes(in.budget_bytes).c_str(), in.ranks, (long long)in.batch,
              f.precision.c_str());
  for (int stage = 0; stage <= 3; ++stage) {
    const std::int64_t L = largest_fitting(in, stage, f.max_layers);
    if (L == 0) {
      std::printf("  stage %d: none fits\n", stage);
      continue;
    }
    PlannerInput q = in;
    q.cfg = family_config(L, in.context, in.cfg.vocab_size);
    PlanCandidate best;
    for (const auto& c : plan_memory(q).per_stage)
      if (c.stage == stage) best = c;
    PlannerInput nr = in;
    nr.remat = false;
    const std::int64_t L_none = largest_fitting(nr, stage, f.max_layers);
    std::printf("  stage %d: L = %lld (without remat: %lld), C = %lld, %.2fM parameters; "
                "micro-batch %lld, remat %s %s, %s (%s states + %s activations)\n",
                stage, (long long)L, (long long)L_none, (long long)(64 * L),
                static_cast<double>(num_params(q.cfg)) / 1e6, (long long)best.micro_batch,
                best.remat.name(), best.plan.to_string().c_str(),
                mem::human_bytes(best.total_bytes).c_str(), mem::human_bytes(best.state_bytes).c_str(),
                mem::human_bytes(best.act_bytes).c_str());
  }
  return 0;
}

// ---- ZeRO and mixed precision (lab 6, part 2): `train --zero`, `zero-table` ---------------------

struct ZeroFlags {
  int zero = -1;  // -1: not a ZeRO run
  int ranks = 0;  // used only where --ranks was given (ranks_opt)
  CLI::Option* ranks_opt = nullptr;
  CLI::Option* zero_opt = nullptr;
  std::string backend = "sim";
  std::string precision = "fp32";
  std::int64_t vocab = 64;
  std::string timeline;  // SVG of rank 0's memory over time
  bool overlap = false;
  int prefetch = 1;
  int ep = 0;            // --ep N: expert parallelism (ep_opt given)
  CLI::Option* ep_opt = nullptr;
  void add(CLI::App* train) {
    ep_opt = train->add_option("--ep", ep,
                               "expert parallelism x data parallelism on N ranks (an MoE config, "
                               "--moe-experts divisible by N; sim: N simulated ranks, mpi: the mpirun world)");
    zero_opt = train->add_option("--zero", zero,
                                 "ZeRO stage 0|1|2|3 (a data-parallel run on --ranks ranks)");
    ranks_opt = train->add_option("--ranks", ranks,
                                  "data-parallel ranks of a --zero run (sim: 1..64, default 2; "
                                  "mpi/nccl: the processes mpirun started)");
    train->add_option("--backend", backend,
                      "sim | mpi (run under mpirun) | nccl (one GPU per rank) for --zero")
        ->capture_default_str();
    train->add_option("--precision", precision, "fp32 | bf16 (bf16 params and grads, fp32 master)")
        ->capture_default_str();
    train->add_option("--zero-vocab", vocab, "vocabulary of the synthetic stream of a --zero run")
        ->capture_default_str();
    train->add_option("--mem-timeline", timeline, "write rank 0's memory timeline (SVG) here");
    train->add_flag("--overlap", overlap,
                    "--zero 0|1: allreduce (0) or reduce-scatter (1) each unit's gradients asynchronously as its backward "
                    "ends; --zero 2|3: reduce-scatter each unit's gradients asynchronously as its backward ends; "
                    "--zero 3: also prefetch the next units' all-gathers (lab 5's asynchronous collectives)");
    train->add_option("--prefetch", prefetch, "--zero 3 --overlap: units gathered ahead (0..8)")->capture_default_str();
  }
  bool active() const { return zero_opt->count() > 0 || precision != "fp32"; }
  std::optional<int> requested_ranks() const {
    return ranks_opt->count() > 0 ? std::optional<int>(ranks) : std::nullopt;
  }
};

/// Runs ZeRO training on the synthetic stream and prints the memory and communication tables.
int cmd_train_zero(ZeroFlags& z, const RematFlags& remat, const ModelFlags& m, std::int64_t batch,
                   std::int64_t accum, std::int64_t context, std::int64_t steps, double lr,
                   std::uint64_t seed) {
  ZeroRunOptions o;
  o.cfg = m.make(z.vocab);
  o.zero.stage = z.zero_opt->count() > 0 ? z.zero : 0;
  o.zero.precision = parse_precision(z.precision);
  o.zero.remat = remat.kind;
  o.zero.remat_budget = remat.budget.empty() ? 0 : static_cast<std::int64_t>(parse_bytes(remat.budget));
  o.zero.accum = accum;
  o.zero.overlap = z.overlap;
  o.zero.prefetch = z.prefetch;
  const ZeroBackend backend = parse_zero_backend(z.backend);
  o.batch = batch > 0 ? batch : 4;
  o.context = context > 0 ? std::min(context, o.cfg.block_size) : o.cfg.block_size;
  o.steps = steps;
  o.lr = lr;
  o.seed = seed;
  o.validate();  // every bad flag is named before any rank starts
  auto print = [&](const ZeroRunReport& r) {
    std::printf("ZeRO stage %d%s, %d ranks (%s), %s, config %s: psi = %lld parameters, %lld steps of "
                "B = %lld per rank (accum %lld: micro-batches of %lld), T = %lld\n",
                r.stage,
                !o.zero.overlap ? "" : r.stage == 3 ? (" (overlap, prefetch " + std::to_string(o.zero.prefetch) + ")").c_str()
                                                    : " (overlap)",
                r.ranks, z.backend.c_str(), to_string(r.precision), m.config.c_str(),
                static_cast<long long>(r.psi), static_cast<long long>(o.steps),
                static_cast<long long>(o.batch), static_cast<long long>(o.zero.accum),
                static_cast<long long>(o.batch / o.zero.accum), static_cast<long long>(o.context));
    for (std::size_t s = 0; s < r.losses.size(); ++s)
      if (s == 0 || s + 1 == r.losses.size() || (s + 1) % std::max<std::size_t>(1, r.losses.size() / 5) == 0)
        std::printf("step %5zu  loss %.4f\n", s + 1, r.losses[s]);
    std::printf("\n%s\n%s", memory_table(r).c_str(), comm_table(r).c_str());
    std::printf("wall %.3f s (%.2f ms per step)\n", r.wall_s, 1e3 * r.wall_s / std::max<std::int64_t>(1, o.steps));
    if (!z.timeline.empty()) {
      write_file_atomic(z.timeline,
                        mem::global().timeline_svg(0, "memory of rank 0: ZeRO stage " + std::to_string(r.stage)),
                        "train --mem-timeline");
      std::printf("wrote %s\n", z.timeline.c_str());
    }
  };
  if (backend == ZeroBackend::Sim) {
    print(run_zero_simulated(zero_run_ranks(backend, z.requested_ranks()), o));
    return 0;
  }
  if (backend == ZeroBackend::Mpi) {
#ifdef MLS_HAVE_MPI
    return parallel::mpi_run([&](parallel::Communicator& c) {
      zero_run_ranks(backend, z.requested_ranks(), c.size());
      mem::global().set_enabled(true);
      mem::global().reset();
      const ZeroRunReport r = run_zero(c, o);
      if (c.rank() == 0) print(r);
    });
#else
    fail("train --backend mpi: this mls-gpt was built without MPI (lab 5's mls_parallel_mpi)");
#endif
  }
#ifdef MLS_HAVE_NCCL
  // Lab 5's NCCL backend keeps lab 1 CPU tensors and stages each message through a device
  // buffer: ZeRO's collectives run on it unchanged (the compute stays on the CPU). Under mpirun,
  // rank and size come from OpenMPI's environment; one GPU per rank.
  parallel::Communicator c = parallel::nccl_world_from_env();
  zero_run_ranks(backend, z.requested_ranks(), c.size());
  mem::global().set_enabled(true);
  mem::global().reset();
  const ZeroRunReport r = run_zero(c, o);
  if (c.rank() == 0) print(r);
  return 0;
#else
  fail("train --backend nccl: this mls-gpt was built without NCCL (lab 5's mls_parallel_nccl needs "
       "CUDA and NCCL at configure time)");
#endif
}

/// `train --ep N`: the GPT with its MoE blocks' experts sharded over N ranks (EpDispatch; each
/// rank allocates its own experts only) and the dense part data parallel, on the synthetic stream
/// of --zero runs or a text (--data); then the single-rank run over the union batch (rank 0), to
/// compare. Writes the gathered checkpoint and the experts' utilisation (moe.csv, moe.svg) to --out.
int cmd_train_ep(const ZeroFlags& z, const TrainFlags& tf, const CLI::App& train) {
  const int P = z.ep;
  MLS_CHECK(z.zero_opt->count() == 0, "train --ep ", P, " with --zero ", z.zero,
            ": expert parallelism runs with plain data parallelism (no ZeRO partitioning: ZeroTrainer partitions "
            "the dense layout only); drop one of them");
  MLS_CHECK(!z.overlap, "train --ep ", P, " with --overlap: expected the blocking collectives (--overlap is --zero 2|3's)");
  MLS_CHECK(z.ranks_opt->count() == 0 || z.ranks == P, "train --ep ", P, " with --ranks ", z.ranks,
            ": the expert-parallel group is every rank; give --ep only");
  MLS_CHECK(!tf.autodiff, "train --ep ", P, " with --autodiff: lab 2's tape runs every expert on one rank; "
            "expected the fused path (drop --autodiff)");
  for (const char* flag : {"--stop-after", "--ckpt-every", "--eval-every", "--eval-batches", "--min-lr", "--warmup",
                           "--grad-clip", "--sample", "--task", "--digits"})
    MLS_CHECK(train.count(flag) == 0, "train --ep ", P, " with ", flag,
              ": not an option of expert-parallel runs (constant lr, no clipping, no validation, one checkpoint "
              "at the end); leave it out");
  MLS_CHECK(P >= 1 && P <= 64, "train --ep ", P, ": expected 1..64 ranks");
  const ZeroBackend backend = parse_zero_backend(z.backend);
  MLS_CHECK(backend != ZeroBackend::Nccl, "train --ep ", P, " --backend nccl: expected sim or mpi");
  EpRunOptions o;
  std::int64_t vocab = z.vocab;
  if (!tf.data.empty()) {  // a text: its tokenizer (the resumed run's, else trained on it) sets the vocabulary
    const std::string text = read_text_file(tf.data);
    std::unique_ptr<Tokenizer> tok;
    if (!tf.resume.empty()) tok = load_tokenizer(load_checkpoint(tf.resume).tokenizer);
    else tok = train_tokenizer(tf.tokenizer, text, tf.vocab);
    vocab = tok->vocab_size();
    o.tokenizer = tok->serialize();
    o.text = std::make_shared<const TextData>(text, *tok, tf.model_flags.make(vocab).block_size, tf.seed);
  }
  o.cfg = tf.model_flags.make(vocab);
  o.batch = tf.batch > 0 ? tf.batch : 4;
  o.accum = tf.accum;
  o.context = tf.context > 0 ? std::min(tf.context, o.cfg.block_size) : o.cfg.block_size;
  o.steps = tf.steps;
  o.lr = tf.lr;
  o.seed = tf.seed;
  o.adam.weight_decay = tf.weight_decay;
  o.adam.beta2 = tf.beta2;
  o.bf16 = parse_precision(z.precision) == Precision::BF16;
  o.remat = RecomputeKind(tf.remat_flags.kind);
  o.remat_budget = tf.remat_flags.budget.empty() ? 0 : static_cast<std::int64_t>(parse_bytes(tf.remat_flags.budget));
  o.resume = tf.resume;
  o.init_from = tf.init_from;
  const fs::path out(tf.out);
  o.save = (out / "ckpt.bin").string();
  o.validate(P);  // every bad flag is named before any rank starts
  fs::create_directories(out);
  EpRunOptions whole = o;  // one rank over the union batch: the same micro-batches
  whole.batch = P * o.batch;
  whole.save.clear();
  auto mean_after_first = [](const std::vector<double>& v) {
    double s = 0;
    for (std::size_t i = v.size() > 1 ? 1 : 0; i < v.size(); ++i) s += v[i];
    return s / static_cast<double>(v.size() > 1 ? v.size() - 1 : v.size());
  };
  auto print = [&](const EpRunReport& r, const EpRunReport& single) {
    std::printf("expert parallelism: %d ranks (%s), config %s: %lld experts (%lld per rank), top-%lld, "
                "capacity factor %g; %lld steps of B = %lld per rank (accum %lld), T = %lld, remat %s, %s, %s\n",
                P, z.backend.c_str(), tf.model_flags.config.c_str(), static_cast<long long>(o.cfg.moe_experts),
                static_cast<long long>(o.cfg.moe_experts / P), static_cast<long long>(o.cfg.moe_top_k),
                o.cfg.capacity_factor, static_cast<long long>(r.losses.size()), static_cast<long long>(o.batch),
                static_cast<long long>(o.accum), static_cast<long long>(o.context), o.remat.name(),
                o.bf16 ? "bf16 (fp32 master)" : "fp32", tf.data.empty() ? "synthetic stream" : tf.data.c_str());
    std::printf("parameters per rank: %lld (experts %lld; one rank holds %lld, experts %lld: 1/%d of the experts "
                "each)\n",
                static_cast<long long>(r.param_floats), static_cast<long long>(r.expert_floats),
                static_cast<long long>(single.param_floats), static_cast<long long>(single.expert_floats), P);
    std::printf("%s", ep_run_table(r).c_str());
    double md = 0, mw = 0;
    for (std::size_t i = 0; i < r.final_params.size(); ++i) {
      md = std::max(md, static_cast<double>(std::abs(r.final_params[i] - single.final_params[i])));
      mw = std::max(mw, static_cast<double>(std::abs(single.final_params[i])));
    }
    std::printf("single rank over the union batch (B = %lld): final loss %.6f (EP %.6f), dropped %lld (EP %lld); "
                "parameters: max |diff| %.3g, relative %.3g (%s rounding)\n",
                static_cast<long long>(whole.batch), single.losses.back(), r.losses.back(),
                static_cast<long long>(single.dropped.back()), static_cast<long long>(r.dropped.back()), md,
                mw > 0 ? md / mw : md, o.bf16 ? "bf16" : "float32");
    const double ep_ms = 1e3 * mean_after_first(r.step_s), one_ms = 1e3 * mean_after_first(single.step_s),
                 ex_ms = 1e3 * mean_after_first(r.exchange_s);
    std::printf("step %.3f ms (EP, rank 0) vs %.3f ms (single rank, %d x the tokens); exchanges %.3f ms, "
                "%lld bytes sent per step by rank 0\n",
                ep_ms, one_ms, P, ex_ms, static_cast<long long>(r.bytes_sent_per_step));
    std::printf("ratio ep_step_vs_single %.4f\n", one_ms > 0 ? ep_ms / one_ms : 0.0);
    std::printf("ratio ep_exchange_share %.4f\n", ep_ms > 0 ? ex_ms / ep_ms : 0.0);
    const std::string csv = (out / "moe.csv").string(), svg = (out / "moe.svg").string();
    char title[160];
    std::snprintf(title, sizeof title, "expert utilisation, EP %d: %lld experts, top-%lld, aux coef %g", P,
                  static_cast<long long>(o.cfg.moe_experts), static_cast<long long>(o.cfg.moe_top_k),
                  o.cfg.moe_aux_coef);
    write_moe_csv(csv, r.moe);
    write_moe_svg(svg, r.moe, title);
    const MoeRow& l = r.moe.back();
    std::string toks;
    for (auto t : l.tokens) toks += (toks.empty() ? "" : " ") + std::to_string(t);
    std::printf("moe: last step tokens per expert [%s], dropped %.1f%% of %lld choices; wrote %s, %s, %s\n",
                toks.c_str(), 100.0 * l.dropped_fraction(), static_cast<long long>(l.choices), o.save.c_str(),
                csv.c_str(), svg.c_str());
  };
  if (backend == ZeroBackend::Sim) {
    const EpRunReport r = run_ep_simulated(P, o);
    print(r, run_ep_simulated(1, whole));
    return 0;
  }
#ifdef MLS_HAVE_MPI
  return parallel::mpi_run([&](parallel::Communicator& c) {
    MLS_CHECK(c.size() == P, "train --ep ", P, " --backend mpi: mpirun started ", c.size(),
              " processes, expected ", P);
    const EpRunReport r = run_ep(c, o);
    parallel::Communicator self = c.split(c.rank(), 0);
    if (c.rank() == 0) print(r, run_ep(self, whole));
  });
#else
  fail("train --ep --backend mpi: this mls-gpt was built without MPI (lab 5's mls_parallel_mpi)");
#endif
}

struct ZeroTableFlags {
  double params = 7.5e9;
  int ranks = 64;
  double k = 12;
  bool measure = false;
  std::string precision = "bf16";
  std::int64_t steps = 2;
  void add(CLI::App* app) {
    app->add_option("--params", params, "parameters psi")->capture_default_str();
    app->add_option("--ranks", ranks, "data-parallel ranks N")->capture_default_str();
    app->add_option("--k", k, "optimizer bytes per parameter K")->capture_default_str();
    app->add_flag("--measure", measure,
                  "also train --config on --ranks simulated ranks (stages 0-3) and print the "
                  "measured tables");
    app->add_option("--precision", precision, "precision of the --measure runs")->capture_default_str();
  }
};

int cmd_zero_table(const ZeroTableFlags& f, const ModelFlags& m) {
  std::printf("%s", zero_table(f.params, f.ranks, f.k).c_str());
  std::printf("communication per rank per step: stages 0-2 %.4g elements (2*psi*(N-1)/N), stage 3 "
              "%.4g (3*psi*(N-1)/N)\n",
              zero_comm_elements(0, f.params, f.ranks), zero_comm_elements(3, f.params, f.ranks));
  if (!f.measure) return 0;
  MLS_CHECK(f.ranks >= 1 && f.ranks <= 64, "zero-table --measure: ranks = ", f.ranks,
            ", expected 1..64 simulated ranks");
  std::printf("\nmeasured: config %s on %d simulated ranks, %s\n", m.config.c_str(), f.ranks, f.precision.c_str());
  std::printf("%-6s %12s %12s %12s %14s %14s %8s\n", "stage", "params", "grads", "optimizer",
              "states(rank0)", "formula", "match");
  for (int s = 0; s <= 3; ++s) {
    ZeroRunOptions o;
    o.cfg = m.make(64);
    o.zero.stage = s;
    o.zero.precision = parse_precision(f.precision);
    o.batch = 2;
    o.context = std::min<std::int64_t>(16, o.cfg.block_size);
    o.steps = f.steps;
    const ZeroRunReport r = run_zero_simulated(f.ranks, o);
    const auto& p = r.peak[0];
    const ZeroBytes e = expected_bytes(r, 0);
    std::printf("%-6d %12lld %12lld %12lld %14lld %14.0f %8s\n", s, static_cast<long long>(p[0]),
                static_cast<long long>(p[1]), static_cast<long long>(p[2]),
                static_cast<long long>(p[0] + p[1] + p[2]), e.total,
                memory_table(r).find("NO") == std::string::npos ? "yes" : "NO");
  }
  return 0;
}

int main(int argc, char** argv) {
  kernels::register_kernels();
  CLI::App app{"mls-gpt: a mini GPT trained from scratch (lab 6)."};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads, "threads, >= 1 (default: MLS_NUM_THREADS or all cores)")
      ->check(CLI::Range(1, 4096));

  TrainFlags tf;
  auto* train = app.add_subcommand("train", "train a model on a generated task or a text file");
  tf.add(train);

  ZeroFlags zf;
  zf.add(train);

  SampleFlags sf;
  auto* sample = app.add_subcommand("sample", "generate text from a checkpoint, streaming tokens");
  sf.add(sample);

#ifdef MLS_HAVE_HTTPLIB
  ServeFlags svf;
  auto* serve_cmd = app.add_subcommand(
      "serve", "serve a checkpoint over HTTP: POST /v1/completions (OpenAI shape, SSE streaming), /health, /metrics");
  svf.add(serve_cmd);
  LoadgenFlags lgf;
  auto* loadgen_cmd = app.add_subcommand(
      "loadgen", "load an OpenAI completions server: Poisson arrivals; tokens/s, TTFT and ITL p50/p90/p99; SVG");
  lgf.add(loadgen_cmd);
#endif

  std::string ev_ckpt, ev_data;
  std::int64_t ev_batch = 8;
  auto* eval = app.add_subcommand("eval", "loss and perplexity of a checkpoint on a text file");
  eval->add_option("--ckpt", ev_ckpt, "checkpoint")->required();
  eval->add_option("--data", ev_data, "text file")->required();
  eval->add_option("--batch", ev_batch, "windows per forward pass")->capture_default_str();

  std::string info_ckpt;
  auto* info = app.add_subcommand(
      "info", "a checkpoint's (or llm.c file's) config, parameter count and tokenizer");
  info->add_option("--ckpt,ckpt", info_ckpt, "checkpoint")->required();

  std::string ex_ckpt, ex_format = "llmc", ex_out;
  auto* exp = app.add_subcommand("export", "write a checkpoint's weights in another format");
  exp->add_option("--ckpt", ex_ckpt, "checkpoint")->required();
  exp->add_option("--format", ex_format, "llmc")->capture_default_str();
  exp->add_option("--out", ex_out, "output file")->required();

  ModelFlags bm;
  bm.config = "small";
  std::int64_t bench_batch = 12, bench_steps = 20;
  std::uint64_t bench_seed = 0;
  std::string bench_init, bench_tokens, bench_attention = "flash";
  auto* bench =
      app.add_subcommand("bench", "time one training step (prints best_ms, tokens/s, MFU)");
  bm.add(bench);
  bench->add_option("--batch", bench_batch, "B")->capture_default_str();
  bench->add_option("--steps", bench_steps, "timed steps")->capture_default_str();
  bench->add_option("--seed", bench_seed, "seed")->capture_default_str();
  bench->add_option("--init-from", bench_init, "an llm.c .bin or checkpoint with the weights");
  bench->add_option("--tokens", bench_tokens, "int32 file of B x (T+1) tokens (the batch)");
  bench->add_option("--attention", bench_attention, "flash | naive: the attention kernel")
      ->capture_default_str();

  PlanFlags pf;
  auto* plan = app.add_subcommand(
      "plan", "the cheapest ZeRO stage, recompute plan and micro-batch within a memory budget");
  pf.add(plan);
  ZeroTableFlags ztf;
  ModelFlags ztm;
  auto* ztab = app.add_subcommand("zero-table", "ZeRO's memory per rank by stage (the paper's table)");
  ztf.add(ztab);
  ztm.add(ztab);

  CLI11_PARSE(app, argc, argv);
  try {
    if (threads > 0) set_num_threads(threads);
    if (*train && zf.ep_opt->count() > 0) {
      MLS_CHECK(tf.attention_opt->count() == 0, "train --ep: --attention ", tf.attention,
                " is an option of the single-process fused path; leave it out");
      return cmd_train_ep(zf, tf, *train);
    }
    if (*train && zf.active()) {
      MLS_CHECK(tf.attention_opt->count() == 0, "train --zero: --attention ", tf.attention,
                " is an option of the single-process fused path (ZeRO runs use lab 6's naive "
                "attention); leave it out");
      return cmd_train_zero(zf, tf.remat_flags, tf.model_flags, tf.batch, tf.accum, tf.context, tf.steps, tf.lr,
                            tf.seed);
    }
    if (*train) return cmd_train(tf);
    if (*ztab) return cmd_zero_table(ztf, ztm);
    if (*sample) return cmd_sample(sf);
#ifdef MLS_HAVE_HTTPLIB
    if (*serve_cmd) return cmd_serve(svf);
    if (*loadgen_cmd) {
      if (!lgf.prompts.empty()) lgf.opt.prompts = lgf.prompts;
      return loadgen(lgf.opt);
    }
#endif
    if (*eval) return cmd_eval(ev_ckpt, ev_data, ev_batch);
    if (*info) return cmd_info(info_ckpt);
    if (*exp) return cmd_export(ex_ckpt, ex_format, ex_out);
    if (*plan) return cmd_plan(pf);
    if (*bench)
      return cmd_bench(bm, bench_batch, bench_steps, bench_init, bench_tokens, bench_seed,
                       bench_attention);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mls-gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
