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
#include "mls/llm/tokenizer.hpp"
#include "mls/llm/train.hpp"
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

struct ModelFlags {
  std::string config = "nano";
  std::int64_t n_layer = 0, n_head = 0, n_embd = 0, block_size = 0;
  void add(CLI::App* app) {
    app->add_option("--config", config,
                    "named config: nano (3 layers, 3 heads, 48 dims, block 32) or small "
                    "(4, 4, 128, block 64)")
        ->capture_default_str();
    app->add_option("--n-layer", n_layer, "override the config's layers");
    app->add_option("--n-head", n_head, "override the config's heads");
    app->add_option("--n-embd", n_embd, "override the config's width");
    app->add_option("--block-size", block_size, "override the config's context length");
  }
  GPTConfig make(std::int64_t vocab) const {
    GPTConfig c = config_by_name(config);
    if (n_layer) c.n_layer = n_layer;
    if (n_head) c.n_head = n_head;
    if (n_embd) c.n_embd = n_embd;
    if (block_size) c.block_size = block_size;
    c.vocab_size = vocab;
    c.validate();
    return c;
  }
  /// The flags that name this model again (for a printed command line).
  std::string args() const {
    std::string a = "--config " + config;
    if (n_layer) a += " --n-layer " + std::to_string(n_layer);
    if (n_head) a += " --n-head " + std::to_string(n_head);
    if (n_embd) a += " --n-embd " + std::to_string(n_embd);
    if (block_size) a += " --block-size " + std::to_string(block_size);
    return a;
  }
};

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

void print_counts(const GPTConfig& c, std::int64_t T) {
  const auto L = c.n_layer, C = c.n_embd, V = c.vocab_size, Tb = c.block_size;
  std::printf("config: L=%lld H=%lld C=%lld T=%lld V=%lld\n", (long long)L, (long long)c.n_head,
              (long long)C, (long long)Tb, (long long)V);
  std::printf(
      "parameters: L(12C^2 + 13C) + V*C + T*C + 2C = %lld*%lld + %lld + %lld + %lld = %lld\n",
      (long long)L, (long long)(12 * C * C + 13 * C), (long long)(V * C), (long long)(Tb * C),
      (long long)(2 * C), (long long)num_params(c));
  std::printf(
      "training FLOPs/token: 6N + 12*L*T*C = 6*%lld + 12*%lld*%lld*%lld = %.4g  (N = params - T*C: "
      "every "
      "matmul weight, the tied LM head counted once, the position table not)\n",
      (long long)flops_params(c), (long long)L, (long long)T, (long long)C,
      train_flops_per_token(c, T));
}

/// The run's data: a generated task or a text file.
struct RunData {
  std::unique_ptr<GeneratedTask> task;
  std::unique_ptr<TextData> text;
  std::unique_ptr<Tokenizer> tok;  // for text
  DataSource& source() {
    return task ? static_cast<DataSource&>(*task) : static_cast<DataSource&>(*text);
  }
  const Tokenizer& tokenizer() const { return task ? task->tokenizer() : *tok; }
};

double val_loss(Trainer& tr, DataSource& src, std::int64_t batches, std::int64_t B,
                std::int64_t T) {
  double s = 0;
  for (std::int64_t i = 0; i < batches; ++i) s += tr.eval_loss(src.next_val(B, T));
  return s / static_cast<double>(batches);
}

GreedyFn greedy_of(const GPTParams& p) {
  return [&p](const std::vector<std::int32_t>& prompt, int n_new) {
    SampleOptions g;
    g.greedy = true;
    Rng unused(0);
    return generate(p, prompt, n_new, g,
                    /*use_cache=*/prompt.size() + static_cast<std::size_t>(n_new) <=
                        static_cast<std::size_t>(p.config().block_size),
                    unused);
  };
}

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

/// The plan's buffers for the trainer's (batch, context), or null for "none". Prints the plan,
/// its bytes against keeping everything, and the recomputed blocks. Frees the trainer's own
/// full-size activations (the remat step does not use them).
std::unique_ptr<RematActivations> setup_remat(const RematFlags& f, Trainer& tr) {
  if (f.kind == "none") return nullptr;
  const GPTConfig& cfg = tr.params.config();
  const std::int64_t B = tr.options().micro_batch(), T = tr.options().context;  // one micro-batch
  const std::int64_t budget = f.budget.empty() ? 0 : static_cast<std::int64_t>(parse_bytes(f.budget));
  auto ra = std::make_unique<RematActivations>(cfg, B, T, gpt_plan(f.kind, cfg, B, T, budget));
  const std::int64_t all = remat_activation_bytes(cfg, B, T, no_remat_plan(cfg.n_layer));
  const RematPlan& p = ra->plan();
  std::printf(
      "remat %s: segments %s; activations %s (no remat: %s, %.1f%%); recomputes %lld of %lld "
      "blocks per micro-batch (+%.1f%% FLOPs)\n",
      f.kind.c_str(), p.to_string().c_str(), mem::human_bytes(static_cast<double>(ra->bytes())).c_str(),
      mem::human_bytes(static_cast<double>(all)).c_str(),
      100.0 * static_cast<double>(ra->bytes()) / static_cast<double>(all),
      (long long)p.recomputed_layers(), (long long)cfg.n_layer,
      100.0 * static_cast<double>(p.recomputed_layers()) * block_forward_flops(cfg, B, T) /
          (static_cast<double>(B * T) * train_flops_per_token(cfg, T)));
  tr.acts = GPTActivations();
  tr.dacts = GPTActivations();
  return ra;
}

// ---- train ----------------------------------------------------------------------------------

struct TrainFlags {
  ModelFlags model;
  std::string data, task = "sort", tokenizer = "char", out = "gpt-run", resume, init_from;
  std::int64_t digits = 6, vocab = 512, steps = 300, batch = 0, context = 0, warmup = -1, accum = 1;
  std::int64_t eval_every = 50, eval_batches = 4, ckpt_every = 0, sample_tokens = 200;
  double lr = 1e-3, min_lr = -1, weight_decay = 0.1, grad_clip = 1.0, beta2 = 0.95;
  std::int64_t stop_after = 0;
  bool autodiff = false;
  std::uint64_t seed = 0;
  RematFlags remat;
};

int cmd_train(TrainFlags& f) {
  // -- data and tokenizer
  RunData rd;
  Checkpoint resumed;
  const bool resuming = !f.resume.empty();
  if (resuming) {
    resumed = load_checkpoint(f.resume);
    const auto it = resumed.settings.find("task");
    if (f.data.empty() && it != resumed.settings.end() && !it->second.empty()) f.task = it->second;
    const auto dg = resumed.settings.find("digits");
    if (dg != resumed.settings.end()) f.digits = std::stoll(dg->second);
    const auto dt = resumed.settings.find("data");
    if (f.data.empty() && dt != resumed.settings.end()) f.data = dt->second;
    f.seed = resumed.counter("seed");
  }
  std::string init_tokenizer;
  GPTConfig init_cfg{};
  std::vector<float> init_params_flat;
  if (!f.init_from.empty()) {
    InitFrom init = load_init_from(f.init_from);  // an mls-gpt checkpoint or an llm.c .bin
    init_cfg = init.config;
    init_params_flat = std::move(init.params);
    init_tokenizer = std::move(init.tokenizer);
  }
  if (!f.data.empty()) {
    const std::string text = read_text_file(f.data);
    if (resuming)
      rd.tok = load_tokenizer(resumed.tokenizer);
    else if (!init_tokenizer.empty())
      rd.tok = load_tokenizer(init_tokenizer);
    else
      rd.tok = train_tokenizer(f.tokenizer, text, f.vocab);
  }
  // -- config
  const std::int64_t vocab = f.data.empty() ? 12 : rd.tok->vocab_size();
  GPTConfig cfg = f.init_from.empty() ? f.model.make(vocab) : init_cfg;
  if (!f.init_from.empty()) {
    MLS_CHECK(init_cfg.vocab_size == vocab, "train --init-from: ", f.init_from, " has vocab_size ",
              init_cfg.vocab_size, ", the data's tokenizer has ", vocab, " tokens");
  }
  if (resuming) check_resume_compatible(resumed.config, cfg);
  if (f.data.empty()) {
    rd.task = make_task(f.task, f.digits, f.seed);
    MLS_CHECK(rd.task->vocab_size() == cfg.vocab_size, "train: task vocabulary ",
              rd.task->vocab_size(), " != config vocab ", cfg.vocab_size);
  } else {
    rd.text = std::make_unique<TextData>(read_text_file(f.data), *rd.tok, cfg.block_size, f.seed);
  }
  // -- options
  TrainOptions o;
  o.batch = f.batch ? f.batch : (f.model.config == "small" ? 12 : 32);
  o.context = f.context ? f.context : (rd.task ? rd.task->seq_len() : cfg.block_size);
  o.steps = f.steps;
  o.warmup = f.warmup >= 0 ? f.warmup : std::max<std::int64_t>(1, f.steps / 20);
  o.lr = f.lr;
  o.min_lr = f.min_lr >= 0 ? f.min_lr : f.lr / 10;
  o.grad_clip = f.grad_clip;
  o.adamw.weight_decay = f.weight_decay;
  o.adamw.beta2 = f.beta2;
  o.accum = f.accum;
  o.validate(cfg);  // --accum and the rest, before any parameter is made
  MLS_CHECK(!(f.autodiff && f.accum > 1), "train: --autodiff and --accum ", f.accum,
            " together, expected one of them (the tape takes the whole batch)");
  GPTParams params = f.init_from.empty() ? init_params(cfg, f.seed) : GPTParams(cfg);
  if (!f.init_from.empty()) params.vec() = init_params_flat;
  Trainer tr(std::move(params), o);
  MLS_CHECK(!(f.autodiff && f.remat.kind != "none"), "train: --autodiff and --remat ",
            f.remat.kind, " together, expected one of them");
  const auto remat = setup_remat(f.remat, tr);
  std::int64_t start = 0;
  std::vector<LossRow> rows;
  fs::create_directories(f.out);
  const std::string ckpt_path = (fs::path(f.out) / "ckpt.bin").string();
  const std::string csv_path = (fs::path(f.out) / "loss.csv").string();
  const std::string svg_path = (fs::path(f.out) / "loss.svg").string();
  if (resuming) {
    rd.source().seek(restore_trainer(tr, resumed));
    start = tr.adam.step;
    if (fs::exists(csv_path))
      for (const auto& r : read_loss_csv(csv_path))
        if (r.step < start) rows.push_back(r);
    std::printf("resumed from %s at step %lld\n", f.resume.c_str(), (long long)start);
  }
  const std::string tok_bytes = rd.tokenizer().serialize();
  print_counts(cfg, o.context);
  const int threads = num_threads();
  const double peak = kernels::peak_gflops_best(threads);
  std::printf(
      "data: %s; batch %lld x context %lld (accum %lld: micro-batches of %lld); %lld steps; %d "
      "thread(s), peak %.1f GFLOP/s (lab 4 roofline); matmul %s\n",
      rd.task ? (f.task + " task, " + std::to_string(f.digits) + " digits").c_str()
              : f.data.c_str(),
      (long long)o.batch, (long long)o.context, (long long)o.accum, (long long)o.micro_batch(),
      (long long)o.steps, threads, peak,
      sgemm_kernel().name.c_str());
  auto save = [&] {
    Checkpoint ck = trainer_checkpoint(tr, tok_bytes, rd.source().position());
    ck.counters["seed"] = f.seed;
    ck.settings["task"] = rd.task ? f.task : "";
    ck.settings["digits"] = std::to_string(f.digits);
    if (!f.data.empty()) ck.settings["data"] = f.data;
    ck.settings["lr"] = fmt("%g", o.lr);
    ck.settings["steps"] = std::to_string(o.steps);
    save_checkpoint(ckpt_path, ck);
  };
  ProgressBar bar(std::max<std::int64_t>(
                      1, (f.stop_after > 0 ? std::min(o.steps, f.stop_after) : o.steps) - start),
                  "train");
  const double flops_tok = train_flops_per_token(cfg, o.context);
  double tok_s_sum = 0, last_loss = 0;
  std::int64_t timed = 0;
  const std::int64_t end = f.stop_after > 0 ? std::min(o.steps, f.stop_after) : o.steps;
  for (std::int64_t s = start; s < end; ++s) {
    const Batch b = rd.source().next_train(o.batch, o.context);
    Timer t;
    const StepStats st = f.autodiff ? tr.step_autodiff(b)
                         : remat  ? remat_train_step(tr, *remat, b)
                                  : tr.step(b);
    const double sec = t.seconds();
    LossRow r;
    r.step = s;
    r.train_loss = st.loss;
    r.lr = st.lr;
    r.grad_norm = st.grad_norm;
    r.tokens_per_s = static_cast<double>(o.batch * o.context) / sec;
    if (s > start) tok_s_sum += r.tokens_per_s, ++timed;
    last_loss = st.loss;
    const bool last = s + 1 == end;
    if (f.eval_every > 0 && ((s + 1) % f.eval_every == 0 || last))
      r.val_loss = val_loss(tr, rd.source(), f.eval_batches, o.batch, o.context);
    rows.push_back(r);
    std::string status = "step " + std::to_string(s + 1) + " loss " + fmt("%.4f", st.loss) +
                         (r.val_loss >= 0 ? " val " + fmt("%.4f", r.val_loss) : "") + " | " +
                         fmt("%.0f", r.tokens_per_s) + " tok/s | MFU " +
                         fmt("%.1f%%", 100.0 * r.tokens_per_s * flops_tok / (peak * 1e9));
    bar.update(s + 1 - start, status);
    if (f.ckpt_every > 0 && (s + 1) % f.ckpt_every == 0 && !last) save();
  }
  bar.finish();
  save();
  write_loss_csv(csv_path, rows);
  write_loss_svg(svg_path, rows,
                 "mls-gpt: " + (rd.task ? f.task + " task" : f.data) + ", " + f.model.config);
  const double tok_s = timed ? tok_s_sum / static_cast<double>(timed) : 0;
  std::printf("final loss %.9g; mean %.0f tokens/s, %.3g GFLOP/s, MFU %.1f%% of %.1f GFLOP/s\n",
              last_loss, tok_s, tok_s * flops_tok * 1e-9, 100.0 * tok_s * flops_tok / (peak * 1e9),
              peak);
  std::printf("wrote %s, %s, %s\n", ckpt_path.c_str(), csv_path.c_str(), svg_path.c_str());
  if (rd.task) {
    const double em = exact_match(*rd.task, greedy_of(tr.params), 200, true, 1);
    std::printf("held-out exact match (greedy, 200 problems): %.1f%%\n", 100 * em);
    Rng r(f.seed, "show");
    for (int i = 0; i < 3; ++i) {
      const Problem p = rd.task->sample(r, true);
      const auto out = greedy_of(tr.params)(p.prompt, static_cast<int>(p.answer.size()));
      std::printf("  %s%s  (true %s)\n", rd.task->tokenizer().decode(p.prompt).c_str(),
                  rd.task->tokenizer().decode(out).c_str(),
                  rd.task->tokenizer().decode(p.answer).c_str());
    }
  } else if (f.sample_tokens > 0) {
    SampleOptions so;
    so.temperature = 0.8;
    Rng r(f.seed, "sample");
    const auto prompt = rd.tok->encode(rd.tok->decode({rd.text->val_tokens().front()}));
    std::printf("sample: %s", rd.tok->decode(prompt).c_str());
    generate(tr.params, prompt, f.sample_tokens, so, false, r,
             [&](std::int32_t t) { std::cout << rd.tok->decode({t}) << std::flush; });
    std::printf("\n");
  }
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
  std::int64_t n = f.max_new;
  if (cache) {
    const std::int64_t room = ck.config.block_size - static_cast<std::int64_t>(prompt.size());
    if (n > room) {
      std::fprintf(
          stderr,
          "sample: the KV cache holds %lld positions: generating %lld tokens (use --no-kv-cache "
          "for more)\n",
          (long long)ck.config.block_size, (long long)room);
      n = room;
    }
  }
  Rng r(f.seed, "sample");
  std::cout << tok->decode(prompt) << std::flush;
  Timer t;
  const auto out = generate(p, prompt, n, so, cache, r,
                            [&](std::int32_t id) { std::cout << tok->decode({id}) << std::flush; });
  std::cout << "\n";
  std::fprintf(stderr, "%zu tokens, %.0f tok/s (%s)\n", out.size(),
               static_cast<double>(out.size()) / t.seconds(), cache ? "KV cache" : "recompute");
  return 0;
}

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
              const std::string& tokens_file, std::uint64_t seed) {
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
  Trainer tr(std::move(p), o);
  double best = 1e30, loss0 = 0;
  for (std::int64_t s = 0; s < steps + 3; ++s) {
    Timer t;
    const double l = tr.step(b).loss;
    if (s == 0) loss0 = l;
    if (s >= 3) best = std::min(best, t.seconds());
  }
  const double tok_s = static_cast<double>(B * T) / best, flops = train_flops_per_token(cfg, T);
  const double peak = kernels::peak_gflops_best(num_threads());
  std::printf(
      "loss0 %.6f\nbest_ms %.4f\ntokens_per_s %.0f\nmfu %.4f (%.2f GFLOP/s of %.1f peak, %d "
      "thread(s))\n",
      loss0, best * 1e3, tok_s, tok_s * flops / (peak * 1e9), tok_s * flops * 1e-9, peak,
      num_threads());
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
                best.remat.c_str(), best.plan.to_string().c_str(),
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
  void add(CLI::App* train) {
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
  const ZeroBackend backend = parse_zero_backend(z.backend);
  o.batch = batch > 0 ? batch : 4;
  o.context = context > 0 ? std::min(context, o.cfg.block_size) : o.cfg.block_size;
  o.steps = steps;
  o.lr = lr;
  o.seed = seed;
  o.validate();  // every bad flag is named before any rank starts
  auto print = [&](const ZeroRunReport& r) {
    std::printf("ZeRO stage %d, %d ranks (%s), %s, config %s: psi = %lld parameters, %lld steps of "
                "B = %lld per rank (accum %lld: micro-batches of %lld), T = %lld\n",
                r.stage, r.ranks, z.backend.c_str(), to_string(r.precision), m.config.c_str(),
                static_cast<long long>(r.psi), static_cast<long long>(o.steps),
                static_cast<long long>(o.batch), static_cast<long long>(o.zero.accum),
                static_cast<long long>(o.batch / o.zero.accum), static_cast<long long>(o.context));
    for (std::size_t s = 0; s < r.losses.size(); ++s)
      if (s == 0 || s + 1 == r.losses.size() || (s + 1) % std::max<std::size_t>(1, r.losses.size() / 5) == 0)
        std::printf("step %5zu  loss %.4f\n", s + 1, r.losses[s]);
    std::printf("\n%s\n%s", memory_table(r).c_str(), comm_table(r).c_str());
    std::printf("wall %.3f s (%.2f ms per step)\n", r.wall_s, 1e3 * r.wall_s / std::max<std::int64_t>(1, o.steps));
    if (!z.timeline.empty()) {
      std::ofstream f(z.timeline);
      MLS_CHECK(f.good(), "train --mem-timeline: cannot write ", z.timeline);
      f << mem::global().timeline_svg(0, "memory of rank 0: ZeRO stage " + std::to_string(r.stage));
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
  app.add_option("--threads", threads, "threads (default: MLS_NUM_THREADS or all cores)");

  TrainFlags tf;
  auto* train = app.add_subcommand("train", "train a model on a generated task or a text file");
  tf.model.add(train);
  train->add_option("--data", tf.data, "a UTF-8 text file (default: a generated task)");
  train->add_option("--task", tf.task, "sort | add (without --data)")->capture_default_str();
  train->add_option("--digits", tf.digits, "digits of the task")->capture_default_str();
  train->add_option("--tokenizer", tf.tokenizer, "char | bpe (text)")->capture_default_str();
  train->add_option("--vocab", tf.vocab, "BPE vocabulary size")->capture_default_str();
  train->add_option("--steps", tf.steps, "total optimizer steps")->capture_default_str();
  train->add_option("--batch", tf.batch,
                    "batch size B per step (per rank with --zero; default 12 small, 32 otherwise, 4 "
                    "with --zero)");
  train->add_option("--accum", tf.accum,
                    "gradient accumulation: micro-batches per step (a divisor of --batch; the "
                    "activations are those of one micro-batch of batch/accum)")
      ->capture_default_str();
  train->add_option("--context", tf.context,
                    "sequence length T (default: block size, or the task's length)");
  train->add_option("--lr", tf.lr, "peak learning rate")->capture_default_str();
  train->add_option("--min-lr", tf.min_lr, "final learning rate of the cosine (default lr/10)");
  train->add_option("--warmup", tf.warmup, "linear warmup steps (default steps/20)");
  train->add_option("--weight-decay", tf.weight_decay, "AdamW's decoupled weight decay")
      ->capture_default_str();
  train->add_option("--beta2", tf.beta2, "AdamW's beta2")->capture_default_str();
  train->add_option("--grad-clip", tf.grad_clip, "clip the global gradient norm (0: off)")
      ->capture_default_str();
  train->add_option("--seed", tf.seed, "seed of the init and the data")->capture_default_str();
  train->add_option("--eval-every", tf.eval_every, "validation every N steps (0: off)")
      ->capture_default_str();
  train->add_option("--eval-batches", tf.eval_batches, "validation batches")->capture_default_str();
  train->add_option("--ckpt-every", tf.ckpt_every,
                    "checkpoint every N steps (and always at the end)");
  train->add_option("--out", tf.out, "folder for ckpt.bin, loss.csv, loss.svg")
      ->capture_default_str();
  train->add_option("--stop-after", tf.stop_after,
                    "stop (and checkpoint) after this step; the schedule still "
                    "runs to --steps (for --resume)");
  train->add_flag("--autodiff", tf.autodiff,
                  "gradients from lab 2's tape (path (a)) instead of the fused path");
  train->add_option("--resume", tf.resume, "continue a run from its checkpoint (bit-identical)");
  train->add_option("--init-from", tf.init_from,
                    "start from a checkpoint's or an llm.c .bin's weights (fine-tune)");
  train->add_option("--sample", tf.sample_tokens, "tokens to sample after training a text model")
      ->capture_default_str();
  tf.remat.add(train);

  ZeroFlags zf;
  zf.add(train);

  SampleFlags sf;
  auto* sample = app.add_subcommand("sample", "generate text from a checkpoint, streaming tokens");
  sample->add_option("--ckpt", sf.ckpt, "checkpoint");
  sample->add_option("--prompt", sf.prompt, "prompt text");
  sample->add_option("--max-new-tokens,-n", sf.max_new, "tokens to generate")
      ->capture_default_str();
  sample->add_option("--temperature", sf.temperature, "> 0")->capture_default_str();
  sample->add_option("--top-k", sf.top_k, "0: off")->capture_default_str();
  sample->add_option("--top-p", sf.top_p, "(0, 1]")->capture_default_str();
  sample->add_option("--seed", sf.seed, "sampling seed")->capture_default_str();
  sample->add_flag("--greedy", sf.greedy, "argmax decoding");
  sample->add_flag("--no-kv-cache", sf.no_cache, "recompute the whole context for every token");
  sample->add_flag("--bench", sf.bench,
                   "generation tokens/s with and without the KV cache (random model)");
  sample->add_option("--bench-context", sf.bench_context, "context of --bench")
      ->capture_default_str();
  sf.model.add(sample);

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
  std::string bench_init, bench_tokens;
  auto* bench =
      app.add_subcommand("bench", "time one training step (prints best_ms, tokens/s, MFU)");
  bm.add(bench);
  bench->add_option("--batch", bench_batch, "B")->capture_default_str();
  bench->add_option("--steps", bench_steps, "timed steps")->capture_default_str();
  bench->add_option("--seed", bench_seed, "seed")->capture_default_str();
  bench->add_option("--init-from", bench_init, "an llm.c .bin or checkpoint with the weights");
  bench->add_option("--tokens", bench_tokens, "int32 file of B x (T+1) tokens (the batch)");

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
    if (*train && zf.active())
      return cmd_train_zero(zf, tf.remat, tf.model, tf.batch, tf.accum, tf.context, tf.steps, tf.lr,
                            tf.seed);
    if (*train) return cmd_train(tf);
    if (*ztab) return cmd_zero_table(ztf, ztm);
    if (*sample) return cmd_sample(sf);
    if (*eval) return cmd_eval(ev_ckpt, ev_data, ev_batch);
    if (*info) return cmd_info(info_ckpt);
    if (*exp) return cmd_export(ex_ckpt, ex_format, ex_out);
    if (*plan) return cmd_plan(pf);
    if (*bench)
      return cmd_bench(bm, bench_batch, bench_steps, bench_init, bench_tokens, bench_seed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mls-gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
