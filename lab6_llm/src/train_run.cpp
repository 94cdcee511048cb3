// Lab 6: a whole training run on one process (what `mls-gpt train` does; the CLI parses flags).
#include "mls/llm/train_run.hpp"
#include "mls/llm/moe.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <utility>
#include <vector>

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

namespace mls::llm {

namespace fs = std::filesystem;

namespace {

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
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

/// What a run starts from besides its options: a checkpoint to resume, or initial parameters.
struct RunStart {
  bool resuming = false;
  Checkpoint resumed;
  GPTConfig init_cfg{};
  std::vector<float> init_params;
  std::string init_tokenizer;
};

/// Loads the checkpoint to resume (its task, digits, data and seed replace the options') or the
/// parameters to start from.
RunStart load_start(TrainRunOptions& o) {
  RunStart st;
  st.resuming = !o.resume.empty();
  if (st.resuming) {
    st.resumed = load_checkpoint(o.resume);
    const auto& set = st.resumed.settings;
    const auto it = set.find("task");
    if (o.data.empty() && it != set.end() && !it->second.empty()) o.task = it->second;
    const auto dg = set.find("digits");
    if (dg != set.end()) o.digits = std::stoll(dg->second);
    const auto dt = set.find("data");
    if (o.data.empty() && dt != set.end()) o.data = dt->second;
    o.seed = st.resumed.counter("seed");
  }
  if (!o.init_from.empty()) {
    InitFrom init = load_init_from(o.init_from);  // an mls-gpt checkpoint or an llm.c .bin
    st.init_cfg = init.config;
    st.init_params = std::move(init.params);
    st.init_tokenizer = std::move(init.tokenizer);
  }
  return st;
}

/// The tokenizer (text), the config and the data source of the run.
GPTConfig prepare_data(const TrainRunOptions& o, const RunStart& st, RunData& rd) {
  if (!o.data.empty()) {
    const std::string text = read_text_file(o.data);
    if (st.resuming)
      rd.tok = load_tokenizer(st.resumed.tokenizer);
    else if (!st.init_tokenizer.empty())
      rd.tok = load_tokenizer(st.init_tokenizer);
    else
      rd.tok = train_tokenizer(o.tokenizer, text, o.vocab);
  }
  const std::int64_t vocab = o.data.empty() ? 12 : rd.tok->vocab_size();
  const GPTConfig cfg = o.init_from.empty() ? o.model.make(vocab) : st.init_cfg;
  if (!o.init_from.empty()) {
    MLS_CHECK(st.init_cfg.vocab_size == vocab, "train --init-from: ", o.init_from, " has vocab_size ",
              st.init_cfg.vocab_size, ", the data's tokenizer has ", vocab, " tokens");
    check_moe_compatible("train --init-from " + o.init_from, st.init_cfg, o.model.make(vocab));
  }
  if (st.resuming) check_resume_compatible(st.resumed.config, cfg);
  if (o.data.empty()) {
    rd.task = make_task(o.task, o.digits, o.seed);
    MLS_CHECK(rd.task->vocab_size() == cfg.vocab_size, "train: task vocabulary ",
              rd.task->vocab_size(), " != config vocab ", cfg.vocab_size);
  } else {
    rd.text = std::make_unique<TextData>(read_text_file(o.data), *rd.tok, cfg.block_size, o.seed);
  }
  return cfg;
}

TrainOptions trainer_options(const TrainRunOptions& f, const GPTConfig& cfg, const RunData& rd) {
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
  // the tape path (--autodiff) has its own attention: the option is the fused path's
  o.attention = f.autodiff ? Attention::Naive : parse_attention(f.attention, "train: --attention");
  o.validate(cfg);  // --accum and the rest, before any parameter is made
  MLS_CHECK(!(f.autodiff && f.accum > 1), "train: --autodiff and --accum ", f.accum,
            " together, expected one of them (the tape takes the whole batch)");
  MLS_CHECK(!(f.autodiff && !(f.remat == RecomputeKind::None)), "train: --autodiff and --remat ", f.remat,
            " together, expected one of them");
  return o;
}

/// The plan's buffers for the trainer's micro-batch, or null for "none". Prints the plan, its
/// bytes against keeping everything, and the recomputed blocks. Frees the trainer's own
/// full-size activations (the step under a plan does not use them).
std::unique_ptr<RematActivations> setup_remat(const TrainRunOptions& f, Trainer& tr) {
  if (f.remat == RecomputeKind::None) return nullptr;
  const GPTConfig& cfg = tr.params.config();
  const std::int64_t B = tr.options().micro_batch(), T = tr.options().context;  // one micro-batch
  const std::int64_t budget =
      f.remat_budget.empty() ? 0 : static_cast<std::int64_t>(parse_bytes(f.remat_budget));
  auto ra = std::make_unique<RematActivations>(cfg, B, T, gpt_plan(f.remat, cfg, B, T, budget),
                                               tr.options().attention);
  const std::int64_t all = remat_activation_bytes(cfg, B, T, no_remat_plan(cfg.n_layer));
  const RematPlan& p = ra->plan();
  std::printf(
      "remat %s: segments %s; activations %s (no remat: %s, %.1f%%); recomputes %lld of %lld "
      "blocks per micro-batch (+%.1f%% FLOPs)\n",
      f.remat.name(), p.to_string().c_str(), mem::human_bytes(static_cast<double>(ra->bytes())).c_str(),
      mem::human_bytes(static_cast<double>(all)).c_str(),
      100.0 * static_cast<double>(ra->bytes()) / static_cast<double>(all),
      (long long)p.recomputed_layers(), (long long)cfg.n_layer,
      100.0 * static_cast<double>(p.recomputed_layers()) * block_forward_flops(cfg, B, T) /
          (static_cast<double>(B * T) * train_flops_per_token(cfg, T)));
  tr.acts = GPTActivations();
  tr.dacts = GPTActivations();
  return ra;
}

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
    // The cache holds prompts up to the block size; past it generate slides the window itself.
    return generate(p, prompt, n_new, g,
                    /*use_cache=*/prompt.size() <= static_cast<std::size_t>(p.config().block_size), unused);
  };
}

/// After training: the held-out exact match and three problems (a task), or a sample (text).
void show_results(const TrainRunOptions& f, RunData& rd, const GPTParams& params) {
  if (rd.task) {
    const double em = exact_match(*rd.task, greedy_of(params), 200, true, 1);
    std::printf("held-out exact match (greedy, 200 problems): %.1f%%\n", 100 * em);
    Rng r(f.seed, "show");
    for (int i = 0; i < 3; ++i) {
      const Problem p = rd.task->sample(r, true);
      const auto out = greedy_of(params)(p.prompt, static_cast<int>(p.answer.size()));
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
    generate(params, prompt, f.sample_tokens, so, true, r,
             [&](std::int32_t t) { std::cout << rd.tok->decode({t}) << std::flush; });
    std::printf("\n");
  }
}

/// The steps [start, end) with validation, checkpoints and the progress bar; appends the rows.
/// Returns (last loss, mean tokens/s over the steps after the first).
std::pair<double, double> train_steps(const TrainRunOptions& f, Trainer& tr, RematActivations* remat,
                                      RunData& rd, std::int64_t start, std::int64_t end,
                                      std::vector<LossRow>& rows, std::vector<MoeRow>& moe_rows,
                                      double peak, const std::function<void()>& save) {
  const TrainOptions& o = tr.options();
  const GPTConfig& cfg = tr.params.config();
  const double flops_tok = train_flops_per_token(cfg, o.context);
  ProgressBar bar(std::max<std::int64_t>(1, end - start), "train");
  double tok_s_sum = 0, last_loss = 0;
  std::int64_t timed = 0;
  MoeRecord record;  // under a recompute plan: each MoE block's last forward (the segments keep one at a time)
  if (remat) remat->seg.moe_record = &record;
  for (std::int64_t s = start; s < end; ++s) {
    const Batch b = rd.source().next_train(o.batch, o.context);
    std::vector<MoeBlockStats> routed;
    if (is_moe(cfg) && f.autodiff) {  // the tape keeps no routing: the fused forward on the same batch and
      // parameters routes as it does (fused = autodiff, drops included: test_moe.cpp), outside the timed step
      FlatModel m(cfg, tr.params.views(), ParamPtrs{});
      model_forward(cfg, m, PassBuffers::keep(tr.acts), batch_view(b));
      routed = moe_stats(cfg, tr.acts);
    }
    Timer t;
    const StepStats st = f.autodiff ? tr.step_autodiff(b) : remat ? tr.step(b, *remat) : tr.step(b);
    const double sec = t.seconds();
    if (is_moe(cfg) && !f.autodiff) routed = remat ? record.stats(cfg) : moe_stats(cfg, tr.acts);
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
    if (!routed.empty()) moe_rows.push_back(moe_row(s, routed));
    std::string status = "step " + std::to_string(s + 1) + " loss " + fmt("%.4f", st.loss) +
                         (r.val_loss >= 0 ? " val " + fmt("%.4f", r.val_loss) : "") + " | " +
                         fmt("%.0f", r.tokens_per_s) + " tok/s | MFU " +
                         fmt("%.1f%%", 100.0 * r.tokens_per_s * flops_tok / (peak * 1e9));
    bar.update(s + 1 - start, status);
    if (f.ckpt_every > 0 && (s + 1) % f.ckpt_every == 0 && !last) save();
  }
  bar.finish();
  return {last_loss, timed ? tok_s_sum / static_cast<double>(timed) : 0.0};
}

}  // namespace

std::string describe_counts(const GPTConfig& c, std::int64_t T) {
  const auto L = c.n_layer, C = c.n_embd, V = c.vocab_size, Tb = c.block_size;
  char buf[1024];
  std::string out;
  std::snprintf(buf, sizeof buf, "config: L=%lld H=%lld C=%lld T=%lld V=%lld\n", (long long)L,
                (long long)c.n_head, (long long)C, (long long)Tb, (long long)V);
  out += buf;
  if (!is_moe(c)) {
    std::snprintf(buf, sizeof buf,
                  "parameters: L(12C^2 + 13C) + V*C + T*C + 2C = %lld*%lld + %lld + %lld + %lld = %lld\n",
                  (long long)L, (long long)(12 * C * C + 13 * C), (long long)(V * C),
                  (long long)(Tb * C), (long long)(2 * C), (long long)num_params(c));
  } else {
    const long long Ld = num_dense_blocks(c), Lm = num_moe_blocks(c), E = c.moe_experts;
    std::snprintf(buf, sizeof buf,
                  "parameters: L(4C^2 + 8C) + Ld(8C^2 + 5C) + Lm*E(8C^2 + 6C) + V*C + T*C + 2C = "
                  "%lld*%lld + %lld*%lld + %lld*%lld*%lld + %lld + %lld + %lld = %lld (Ld = %lld dense, "
                  "Lm = %lld MoE blocks)\n",
                  (long long)L, (long long)(4 * C * C + 8 * C), Ld, (long long)(8 * C * C + 5 * C), Lm, E,
                  (long long)(8 * C * C + 6 * C), (long long)(V * C), (long long)(Tb * C), (long long)(2 * C),
                  (long long)num_params(c), Ld, Lm);
  }
  out += buf;
  std::snprintf(buf, sizeof buf,
                "training FLOPs/token: 6N + 12*L*T*C = 6*%lld + 12*%lld*%lld*%lld = %.4g  (N = "
                "params - T*C: every matmul weight, the tied LM head counted once, the position "
                "table not)\n",
                (long long)flops_params(c), (long long)L, (long long)T, (long long)C,
                train_flops_per_token(c, T));
  out += buf;
  if (is_moe(c)) {
    std::snprintf(buf, sizeof buf,
                  "moe: %lld experts, top-%lld, every %lld block(s) (%lld MoE blocks), capacity "
                  "factor %g, aux coef %g, z coef %g; active parameters %lld of %lld (N above counts "
                  "the active ones)\n",
                  (long long)c.moe_experts, (long long)c.moe_top_k, (long long)c.moe_every,
                  (long long)num_moe_blocks(c), c.capacity_factor, c.moe_aux_coef, c.moe_z_coef,
                  (long long)num_active_params(c), (long long)num_params(c));
    out += buf;
    GPTConfig all = c;  // every expert active: what a dense model of the same size would cost
    all.moe_top_k = c.moe_experts;
    std::snprintf(buf, sizeof buf,
                  "moe FLOPs/token: forward %.4g, training %.4g with top-%lld (all %lld experts: %.4g, "
                  "%.4g)\n",
                  forward_flops_per_token(c, T), train_flops_per_token(c, T), (long long)c.moe_top_k,
                  (long long)c.moe_experts, forward_flops_per_token(all, T), train_flops_per_token(all, T));
    out += buf;
  }
  return out;
}

TrainRunResult run_training(TrainRunOptions f) {
  RunStart st = load_start(f);
  RunData rd;
  const GPTConfig cfg = prepare_data(f, st, rd);
  const TrainOptions o = trainer_options(f, cfg, rd);
  GPTParams params = f.init_from.empty() ? init_params(cfg, f.seed) : GPTParams(cfg);
  if (!f.init_from.empty()) params.vec() = st.init_params;
  Trainer tr(std::move(params), o);
  const auto remat = setup_remat(f, tr);
  std::int64_t start = 0;
  std::vector<LossRow> rows;
  std::vector<MoeRow> moe_rows;
  fs::create_directories(f.out);
  TrainRunResult res;
  res.checkpoint = (fs::path(f.out) / "ckpt.bin").string();
  res.loss_csv = (fs::path(f.out) / "loss.csv").string();
  res.loss_svg = (fs::path(f.out) / "loss.svg").string();
  if (st.resuming) {
    rd.source().seek(restore_trainer(tr, st.resumed));
    start = tr.adam.step;
    if (fs::exists(res.loss_csv))
      for (const auto& r : read_loss_csv(res.loss_csv))
        if (r.step < start) rows.push_back(r);
    std::printf("resumed from %s at step %lld\n", f.resume.c_str(), (long long)start);
  }
  const std::string tok_bytes = rd.tokenizer().serialize();
  std::printf("%s", describe_counts(cfg, o.context).c_str());
  const int threads = num_threads();
  // MFU divides by lab 4's peak, measured once per machine and cached: it compares across runs.
  const kernels::CachedPeak pk = kernels::peak_gflops_cached(threads);
  const double peak = pk.gflops;
  std::printf(
      "data: %s; batch %lld x context %lld (accum %lld: micro-batches of %lld); %lld steps; %d "
      "thread(s), peak %.1f GFLOP/s (lab 4 roofline, %s); matmul %s; attention %s\n",
      rd.task ? (f.task + " task, " + std::to_string(f.digits) + " digits").c_str() : f.data.c_str(),
      (long long)o.batch, (long long)o.context, (long long)o.accum, (long long)o.micro_batch(),
      (long long)o.steps, threads, peak, pk.source.c_str(), sgemm_kernel().name.c_str(),
      f.autodiff ? "autodiff tape" : to_string(o.attention));
  auto save = [&] {
    Checkpoint ck = trainer_checkpoint(tr, tok_bytes, rd.source().position());
    ck.counters["seed"] = f.seed;
    ck.settings["task"] = rd.task ? f.task : "";
    ck.settings["digits"] = std::to_string(f.digits);
    if (!f.data.empty()) ck.settings["data"] = f.data;
    ck.settings["lr"] = fmt("%g", o.lr);
    ck.settings["steps"] = std::to_string(o.steps);
    save_checkpoint(res.checkpoint, ck);
  };
  const std::int64_t end = f.stop_after > 0 ? std::min(o.steps, f.stop_after) : o.steps;
  const auto [last_loss, tok_s] = train_steps(f, tr, remat.get(), rd, start, end, rows, moe_rows, peak, save);
  save();
  write_loss_csv(res.loss_csv, rows);
  write_loss_svg(res.loss_svg, rows,
                 "mls-gpt: " + (rd.task ? f.task + " task" : f.data) + ", " + f.model.config);
  const double flops_tok = train_flops_per_token(cfg, o.context);
  std::printf("final loss %.9g; mean %.0f tokens/s, %.3g GFLOP/s, MFU %.1f%% of %.1f GFLOP/s\n",
              last_loss, tok_s, tok_s * flops_tok * 1e-9, 100.0 * tok_s * flops_tok / (peak * 1e9),
              peak);
  std::printf("wrote %s, %s, %s\n", res.checkpoint.c_str(), res.loss_csv.c_str(), res.loss_svg.c_str());
  if (!moe_rows.empty()) {
    res.moe_csv = (fs::path(f.out) / "moe.csv").string();
    res.moe_svg = (fs::path(f.out) / "moe.svg").string();
    write_moe_csv(res.moe_csv, moe_rows);
    write_moe_svg(res.moe_svg, moe_rows,
                  "expert utilisation: " + std::to_string(cfg.moe_experts) + " experts, top-" +
                      std::to_string(cfg.moe_top_k) + ", capacity factor " + fmt("%g", cfg.capacity_factor) +
                      ", aux coef " + fmt("%g", cfg.moe_aux_coef));
    const MoeRow& l = moe_rows.back();
    std::string toks;
    for (auto t : l.tokens) toks += (toks.empty() ? "" : " ") + std::to_string(t);
    std::printf("moe: last step tokens per expert [%s], dropped %.1f%% of %lld choices; wrote %s, %s\n",
                toks.c_str(), 100.0 * l.dropped_fraction(), (long long)l.choices, res.moe_csv.c_str(),
                res.moe_svg.c_str());
  }
  show_results(f, rd, tr.params);
  res.final_loss = last_loss;
  res.tokens_per_s = tok_s;
  return res;
}

}  // namespace mls::llm
