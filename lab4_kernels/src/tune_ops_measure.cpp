// The operator templates at run time (mls/kernels/tune_ops.hpp): arrays, compiling and running an
// instance, the hand-written kernels they are checked and timed against, the error measure, the
// bench that measures a candidate (as Bench does for SGEMM: a forked first run, a checked run here,
// interleaved timing), the tuner (the one Search of tune.hpp) and the database lookup.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "mls/common/alloc.hpp"
#include "mls/common/error.hpp"
#include "mls/common/interleaved_timing.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/rng.hpp"
#include "mls/kernels/fused.hpp"
#include "mls/kernels/jit.hpp"
#include "mls/kernels/tune_ops.hpp"

namespace mls::kernels::tune {

// ---- arrays, instances and compiled operators ------------------------------------------------------

OpArrays make_op_arrays(const OpProblem& p, std::uint64_t seed) {
  check_problem(p);
  OpArrays a;
  for (const auto& arg : op_args(p)) {
    std::size_t n = 1;
    for (auto d : arg.shape) n *= static_cast<std::size_t>(d);
    OpArray& v = a[arg.name];
    v.assign(n, 0.0f);
    if (arg.output) continue;
    Rng rng(seed, "op_" + arg.name);
    const bool rstd = p.kind == OpKind::LayerNormBwd && arg.name == "rstd";
    for (auto& x : v) x = static_cast<float>(rstd ? rng.uniform(0.5, 2.0) : rng.uniform(-1, 1));
  }
  return a;
}

void interpret_op(const OpInstance& inst, OpArrays& arrays) {
  te::Bindings b;
  for (const auto& t : inst.args) {
    auto it = arrays.find(t.name());
    MLS_CHECK(it != arrays.end(), "interpret_op: no array '", t.name(), "' for ", op_name(inst.problem.kind));
    b.bind(t, it->second);
  }
  te::interpret(inst.func, b);
}

namespace {
/// The spans of `arrays` in the order of the kernel's arguments.
std::vector<std::span<float>> spans_for(const te::JitKernel& k, OpArrays& arrays) {
  std::vector<std::span<float>> out;
  for (const auto& b : k.func().args) {
    auto it = arrays.find(b->name);
    MLS_CHECK(it != arrays.end(), "CompiledOp: no array '", b->name, "' for kernel '", k.func().name, "'");
    std::size_t n = 1;
    for (auto d : b->shape) n *= static_cast<std::size_t>(d);
    MLS_CHECK(it->second.size() == n, "CompiledOp: array '", b->name, "' has ", it->second.size(),
              " floats, kernel '", k.func().name, "' needs ", n);
    out.emplace_back(it->second);
  }
  return out;
}
}  // namespace

void CompiledOp::run(OpArrays& arrays, int threads) const {
  MLS_CHECK(static_cast<bool>(kernel_), "CompiledOp: empty (nothing compiled)");
  const std::vector<std::span<float>> args = spans_for(kernel_, arrays);
  kernel_.run(args, threads);
}

CompiledOp compile_op(const OpProblem& p, const OpKnobs& k, const jit::CompileOptions& options) {
  const OpInstance inst = instantiate_op(p, k);
  return CompiledOp(p, k, te::compile(inst.func, inst.codegen, options));
}

std::vector<CompiledOp> compile_ops(const OpProblem& p, const std::vector<OpKnobs>& knobs,
                                    const jit::CompileOptions& options) {
  std::vector<CompiledOp> out(knobs.size());
  std::map<int, std::vector<std::size_t>> by_lanes;
  for (std::size_t i = 0; i < knobs.size(); ++i) {
    check_op_knobs(p, knobs[i]);
    by_lanes[knobs[i].at("lanes")].push_back(i);
  }
  for (const auto& [lanes, idx] : by_lanes) {
    std::vector<te::LoweredFunc> fs;
    std::map<std::string, std::size_t> unit;  // function name -> its index in fs (one per plan)
    std::vector<std::size_t> which(idx.size());
    te::CodegenOptions cg;
    for (std::size_t i = 0; i < idx.size(); ++i) {
      OpInstance inst = instantiate_op(p, knobs[idx[i]]);
      cg = inst.codegen;
      auto [it, fresh] = unit.emplace(inst.func.name, fs.size());
      if (fresh) fs.push_back(std::move(inst.func));
      which[i] = it->second;
    }
    const std::vector<te::JitKernel> ks = te::compile_all(fs, cg, options);
    for (std::size_t i = 0; i < idx.size(); ++i) out[idx[i]] = CompiledOp(p, knobs[idx[i]], ks[which[i]]);
  }
  return out;
}

// ---- the hand-written kernels ------------------------------------------------------------------------

void conv2d_direct(const OpProblem& p, const float* x, const float* w, float* y) {
  const long oh = p.oh(), ow = p.ow();
  mls::parallel_for(0, p.n * p.k, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t bo = lo; bo < hi; ++bo) {
      const long b = bo / p.k, o = bo % p.k;
      for (long oy = 0; oy < oh; ++oy)
        for (long ox = 0; ox < ow; ++ox) {
          float acc = 0.0f;
          for (long c = 0; c < p.c; ++c)
            for (long i = 0; i < p.kh; ++i)
              for (long j = 0; j < p.kh; ++j) {
                const long iy = oy * p.stride - p.pad + i, ix = ox * p.stride - p.pad + j;
                if (iy < 0 || iy >= p.h || ix < 0 || ix >= p.w) continue;
                acc += x[((b * p.c + c) * p.h + iy) * p.w + ix] * w[((o * p.c + c) * p.kh + i) * p.kh + j];
              }
          y[((b * p.k + o) * oh + oy) * ow + ox] = acc;
        }
    }
  });
}

namespace {
/// The hand-written kernel on `a`; layernorm_bwd accumulates into the outputs as they are (the
/// anchor's timing: fused.hpp's kernel does exactly that), `fresh` copies the _in gradients first.
void hand_written(const OpProblem& p, OpArrays& a, bool fresh) {
  const long r = p.rows, c = p.cols;
  switch (p.kind) {
    case OpKind::Softmax: return softmax_forward(a.at("y").data(), a.at("x").data(), r, c);
    case OpKind::LayerNormFwd:
      return layernorm_forward(a.at("out").data(), a.at("mean").data(), a.at("rstd").data(), a.at("x").data(),
                               a.at("weight").data(), a.at("bias").data(), r, c, p.eps);
    case OpKind::LayerNormBwd:
      if (fresh) {
        a.at("dinp") = a.at("dinp_in");
        a.at("dweight") = a.at("dweight_in");
        a.at("dbias") = a.at("dbias_in");
      }
      return layernorm_backward(a.at("dinp").data(), a.at("dweight").data(), a.at("dbias").data(),
                                a.at("dout").data(), a.at("x").data(), a.at("weight").data(), a.at("mean").data(),
                                a.at("rstd").data(), r, c);
    case OpKind::AddMulAdd:
      return fused_add_mul_add(p.n, a.at("a").data(), a.at("b").data(), a.at("c").data(), a.at("d").data(),
                               a.at("e").data());
    case OpKind::Conv2d: return conv2d_direct(p, a.at("x").data(), a.at("w").data(), a.at("y").data());
  }
}

/// The longest reduction behind an element of output `name`.
double reduction_length(const OpProblem& p, const std::string& name) {
  switch (p.kind) {
    case OpKind::Softmax:
    case OpKind::LayerNormFwd: return static_cast<double>(p.cols);
    case OpKind::LayerNormBwd: return static_cast<double>(name == "dinp" ? p.cols : p.rows);
    case OpKind::AddMulAdd: return 1.0;
    case OpKind::Conv2d: return static_cast<double>(p.c * p.kh * p.kh);
  }
  return 1.0;
}
}  // namespace

void run_hand_written(const OpProblem& p, OpArrays& arrays) {
  check_problem(p);
  for (const auto& arg : op_args(p))
    MLS_CHECK(arrays.count(arg.name), "run_hand_written: no array '", arg.name, "' for ", op_name(p.kind));
  hand_written(p, arrays, true);
}

double op_error(const OpProblem& p, const OpArrays& got, const OpArrays& want) {
  double worst = 0;
  for (const auto& arg : op_args(p)) {
    if (!arg.output) continue;
    const auto g = got.find(arg.name), w = want.find(arg.name);
    if (g == got.end() || w == want.end() || g->second.size() != w->second.size())
      return std::numeric_limits<double>::infinity();
    double diff = 0, scale = 0;
    for (std::size_t i = 0; i < g->second.size(); ++i) {
      const double d = std::fabs(static_cast<double>(g->second[i]) - w->second[i]);
      if (!(d < std::numeric_limits<double>::infinity())) return std::numeric_limits<double>::infinity();  // NaN, inf
      diff = std::max(diff, d);
      scale = std::max(scale, std::fabs(static_cast<double>(w->second[i])));
    }
    const double tol = 4.0 * (reduction_length(p, arg.name) + 8.0) * std::numeric_limits<float>::epsilon();
    worst = std::max(worst, diff / (scale + 1e-30) / tol);
  }
  return worst;
}

// ---- the bench --------------------------------------------------------------------------------------

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

OpBench::OpBench(const OpProblem& p, int threads, std::uint64_t seed) : problem_(p), threads_(threads) {
  check_problem(p);
  MLS_CHECK(threads >= 1, "tune ", op_name(p.kind), ": threads ", threads, " must be >= 1");
  arrays_ = make_op_arrays(p, seed);
  reference_ = arrays_;
  anchor_ = arrays_;
  ThreadCountGuard guard(threads_);
  hand_written(p, reference_, true);
  hand_written(p, anchor_, true);
  anchor_seconds_ = median_batch_seconds([&] { run_anchor(); });
}

void OpBench::run_anchor() {
  ThreadCountGuard guard(threads_);
  hand_written(problem_, anchor_, false);
}

OpTrial OpBench::measure(const OpKnobs& k, const MeasureOptions& options, const jit::CompileOptions& jit) {
  OpTrial t;
  t.knobs = k;
  CompiledOp op;
  const double t0 = now_seconds();
  try {
    op = compile_op(problem_, k, jit);
  } catch (const std::exception& e) {
    t.status = TrialStatus::CompileError;
    t.message = short_message(e.what());
    return t;
  }
  t.compile_seconds = now_seconds() - t0;
  OpArrays got = arrays_;
  CandidateChecks checks;
  checks.run = [&](int threads) {
    for (const auto& arg : op_args(problem_))
      if (arg.output) std::fill(got[arg.name].begin(), got[arg.name].end(), std::numeric_limits<float>::quiet_NaN());
    op.run(got, threads);
  };
  checks.error = [&] { return op_error(problem_, got, reference_); };
  checks.time = [&] { return time(op, options.repeat, options.batch_seconds); };
  checks.peer = "the hand-written kernel's";
  checks.anchor = "the hand-written kernel";
  const CandidateResult r = measure_candidate(checks, options, anchor_seconds_, threads_);
  t.status = r.status;
  t.message = r.message;
  if (r.status != TrialStatus::Ok) return t;
  t.seconds = r.seconds;
  t.gbs = op_bytes(problem_) / t.seconds * 1e-9;
  return t;
}

double OpBench::time(const CompiledOp& op, int repeat, double batch_seconds) {
  ThreadCountGuard guard(threads_);
  OpArrays got = arrays_;
  const std::vector<std::span<float>> args = spans_for(op.kernel(), got);
  const te::JitKernel& k = op.kernel();
  // The ratio of the two programs' best batches (bench::interleaved_best, `repeat` rounds), not the
  // median of per-round ratios: a search's re-timing of its best candidates moved by up to 30% that way.
  const bench::BestPair best =
      bench::interleaved_best([&] { run_anchor(); }, [&] { k.run(args, 0); }, repeat, batch_seconds, repeat);
  return best.b / best.a * anchor_seconds_;
}

// ---- the tuner ---------------------------------------------------------------------------------------

nlohmann::json op_schedule_json(OpKind kind, const OpKnobs& k, bool confirmed) {
  nlohmann::json j = op_knobs_to_json(kind, k);
  j["measure"] = confirmed ? "confirmed" : "search";
  return j;
}

OpTuner::OpTuner(OpProblem problem, OpTuneOptions options)
    : problem_(problem),
      options_(std::move(options)),
      space_(options_.space ? *options_.space : OpSpace::full(problem, std::max(1, options_.threads))) {
  check_problem(problem_);
  const std::string op = "tune " + op_name(problem_.kind) + ": ";
  MLS_CHECK(options_.threads >= 1, op, "threads ", options_.threads, " must be >= 1");
  MLS_CHECK(options_.trials >= 1, "tune: trials ", options_.trials, " must be >= 1");
  MLS_CHECK(options_.budget_s >= 0, "tune: budget ", options_.budget_s, " s must be >= 0 (0: none)");
  MLS_CHECK(options_.epsilon >= 0 && options_.epsilon <= 1, "tune: epsilon ", options_.epsilon, " must be in [0, 1]");
  MLS_CHECK(options_.proposals >= 1, "tune: proposals ", options_.proposals, " must be >= 1");
  MLS_CHECK(space_.problem == problem_, op, "the space is for ", op_name(space_.problem.kind), " ",
            to_string(space_.problem), ", not ", to_string(problem_));
  space_.check();
}

OpTuneResult OpTuner::run() {
  OpTuneResult r;
  r.best = space_.default_knobs();
  const bool synthetic = static_cast<bool>(options_.evaluate);
  std::optional<OpBench> bench;
  if (!synthetic) {
    bench.emplace(problem_, options_.threads, options_.seed);
    r.anchor_seconds = bench->anchor_seconds();
  }
  std::optional<TuningDb> db;
  if (options_.record && !synthetic) db.emplace(options_.db_path.empty() ? default_tuning_db_path() : options_.db_path);
  bool db_warned = false;
  const double bytes = op_bytes(problem_);
  auto to_op = [&](const SearchTrial& t) {
    OpTrial o;
    o.index = t.index;
    o.knobs = space_.knobs_at(t.point);
    o.status = t.status;
    o.seconds = t.seconds;
    o.gbs = t.rate;
    o.compile_seconds = t.compile_seconds;
    o.message = t.message;
    return o;
  };
  SearchCallbacks cb;
  cb.evaluate = [&](const Point& p) {
    const OpKnobs k = space_.knobs_at(p);
    const OpTrial o = synthetic ? options_.evaluate(k) : bench->measure(k, options_.measure, options_.jit);
    SearchTrial t;
    t.status = o.status;
    t.seconds = o.seconds;
    t.rate = o.gbs;
    t.compile_seconds = o.compile_seconds;
    t.message = o.message;
    return t;
  };
  if (bench) {
    cb.retime = [&](const Point& p) -> std::optional<double> {
      try {
        return bench->time(compile_op(problem_, space_.knobs_at(p), options_.jit), 3 * options_.measure.repeat,
                           4 * options_.measure.batch_seconds);
      } catch (const std::exception&) {
        return std::nullopt;
      }
    };
  }
  cb.rate_of = [&](double seconds) { return bytes / seconds * 1e-9; };
  if (db) {
    cb.record = [&](const SearchTrial& t, bool confirmed) {
      try {
        db->append(make_tuning_record(op_name(problem_.kind), to_json(problem_), options_.threads,
                                      op_schedule_json(problem_.kind, space_.knobs_at(t.point), confirmed), t.seconds,
                                      op_flops(problem_) / t.seconds * 1e-9));
      } catch (const std::exception& e) {
        if (!db_warned) std::fprintf(stderr, "tune: warning: not recorded in the tuning database: %s\n", e.what());
        db_warned = true;
      }
    };
  }
  if (options_.on_trial)
    cb.on_trial = [&](const SearchTrial& t, const std::vector<double>& best) { options_.on_trial(to_op(t), best); };
  SearchOptions so;
  so.strategy = options_.strategy;
  so.trials = options_.trials;
  so.budget_s = options_.budget_s;
  so.seed = options_.seed;
  so.confirm = bench ? options_.confirm : 0;
  so.epsilon = options_.epsilon;
  so.proposals = options_.proposals;
  const SearchResult s = Search(space_.search_space(), so).run(cb);
  r.found = s.found;
  if (s.found) r.best = space_.knobs_at(s.best);
  r.best_seconds = s.best_seconds;
  r.best_gbs = s.best_rate;
  for (const auto& t : s.trials) r.trials.push_back(to_op(t));
  for (const auto& t : s.confirmed) r.confirmed.push_back(to_op(t));
  r.best_so_far = s.best_so_far;
  r.wall_seconds = s.wall_seconds;
  return r;
}

std::optional<OpKnobs> best_op_knobs(const std::vector<TuningRecord>& records, const OpProblem& p, int threads,
                                     std::string_view cpu_key) {
  const nlohmann::json shape = to_json(p);
  const std::string op = op_name(p.kind);
  std::optional<OpKnobs> best, best_confirmed;
  double t_best = 0, t_confirmed = 0;
  for (const auto& r : records) {
    if (r.op != op || r.cpu_key != cpu_key || r.threads != threads || r.shape != shape) continue;
    OpKnobs k;
    try {
      k = op_knobs_from_json(p.kind, r.schedule);
      check_op_knobs(p, k);
    } catch (const std::exception&) {
      continue;  // another template version, or lanes this CPU does not have
    }
    const bool confirmed = r.schedule.value("measure", std::string()) == "confirmed";
    if (!best || r.seconds < t_best) best = k, t_best = r.seconds;
    if (confirmed && (!best_confirmed || r.seconds < t_confirmed)) best_confirmed = k, t_confirmed = r.seconds;
  }
  return best_confirmed ? best_confirmed : best;
}

// ---- comparing with the peers ------------------------------------------------------------------------

/// compare_op's rounds per peer (each a batch of about 20 ms of the kernel and one of the peer): until
/// neither best has improved by 1% in kCompareRounds rounds, at most kCompareMaxRounds.
constexpr int kCompareRounds = 9;
constexpr int kCompareMaxRounds = 40;

OpComparison compare_op(const CompiledOp& op, int threads, std::uint64_t seed) {
  MLS_CHECK(static_cast<bool>(op), "compare_op: empty (nothing compiled)");
  MLS_CHECK(threads >= 1, "compare_op: threads ", threads, " must be >= 1");
  const OpProblem& p = op.problem();
  OpArrays got = make_op_arrays(p, seed), hand = got;
  hand_written(p, hand, true);
  const std::vector<std::span<float>> args = spans_for(op.kernel(), got);
  const double bytes = op_bytes(p);
  // The copy: as many bytes read and written as the operator moves, split over the threads, each
  // piece with streaming stores (mls::stream_copy, what the hand-written kernels write with).
  const std::size_t floats = static_cast<std::size_t>(std::ceil(bytes / 8.0));
  std::vector<float> src(floats, 1.0f), dst(floats, 0.0f);
  auto copy = [&] {
    mls::parallel_for(0, static_cast<std::int64_t>(floats), 1 << 14, [&](std::int64_t i0, std::int64_t i1) {
      mls::stream_copy(dst.data() + i0, src.data() + i0, static_cast<std::size_t>(i1 - i0) * sizeof(float));
    });
  };
  ThreadCountGuard guard(threads);
  auto tuned = [&] { op.kernel().run(args, 0); };
  auto peer = [&] { hand_written(p, hand, false); };
  tuned();
  // Best of many interleaved batches of each (bench::interleaved_best): the copy's bandwidth is its
  // best batch's, the kernel's time its best batch's, the ratios those of the bests (a median of
  // per-round ratios moved by 10-30% between runs on a shared machine).
  OpComparison c;
  const bench::BestPair vs_copy = bench::interleaved_best(tuned, copy, kCompareRounds, 20e-3, kCompareMaxRounds);
  const bench::BestPair vs_hand = bench::interleaved_best(tuned, peer, kCompareRounds, 20e-3, kCompareMaxRounds);
  c.seconds = std::min(vs_copy.a, vs_hand.a);
  c.gbs = bytes / c.seconds * 1e-9;
  c.copy_gbs = 8.0 * static_cast<double>(floats) / vs_copy.b * 1e-9;  // the copy reads and writes `floats` floats
  c.vs_copy = c.gbs / c.copy_gbs;
  c.vs_hand = vs_hand.b / c.seconds;
  c.hand_gbs = c.gbs / c.vs_hand;
  return c;
}

std::string op_ratio_lines(const OpProblem& p, int threads, const OpComparison& c) {
  const std::string tag = to_string(p) + "_t" + std::to_string(threads), op = op_name(p.kind);
  char line[256];
  std::string out;
  std::snprintf(line, sizeof line, "ratio tuned_%s_vs_copy_%s %.4f\n", op.c_str(), tag.c_str(), c.vs_copy);
  out += line;
  std::snprintf(line, sizeof line, "ratio tuned_%s_vs_%s_%s %.4f\n", op.c_str(),
                p.kind == OpKind::Conv2d ? "direct" : "fused", tag.c_str(), c.vs_hand);
  return out + line;
}

}  // namespace mls::kernels::tune
