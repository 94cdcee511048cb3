// The registry's `tuned` row operators (mls/common/kernels.hpp: MLS_ROWOPS=tuned): the operator
// templates of tune_ops.hpp compiled for the call's shape with the tuning database's best knobs (or
// the template's default), the hand-written kernels of fused.hpp where they cannot be compiled.
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>

#include "mls/common/error.hpp"
#include "mls/common/kernels.hpp"
#include "mls/common/parallel.hpp"
#include "mls/kernels/fused.hpp"
#include "mls/kernels/tune_ops.hpp"

namespace mls::kernels::tune {

namespace {

struct RowOpsState {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const CompiledOp>> kernels;  // "<op> <shape> eps<eps> t<threads>"
  std::set<std::string> failed;
  std::string last_warning;
  bool warned = false;
  std::int64_t fallbacks = 0, compiled = 0;
  jit::CompileOptions compile{};
};

RowOpsState& rowops_state() {
  static RowOpsState s;
  return s;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

/// The compiled operator of `p` at `threads`, or null (then warned once, and counted).
std::shared_ptr<const CompiledOp> row_kernel(const OpProblem& p, int threads) {
  RowOpsState& s = rowops_state();
  const std::string key = op_name(p.kind) + " " + to_string(p) + " eps" + std::to_string(p.eps) + " t" +
                          std::to_string(threads);
  std::lock_guard<std::mutex> lock(s.mu);
  if (auto it = s.kernels.find(key); it != s.kernels.end()) return it->second;
  if (!s.failed.count(key)) {
    try {
      auto k = std::make_shared<const CompiledOp>(compile_op(p, tuned_rowops_knobs(p, threads), s.compile));
      ++s.compiled;
      s.kernels.emplace(key, k);
      return k;
    } catch (const std::exception& e) {
      s.failed.insert(key);
      s.last_warning = "tuned rowops: warning: cannot compile " + op_name(p.kind) + " for " + to_string(p) + " (" +
                       first_line(e.what()) + "); using lab 4's hand-written kernel";
      if (!s.warned) std::fprintf(stderr, "%s\n", s.last_warning.c_str());
      s.warned = true;
    }
  }
  ++s.fallbacks;
  return nullptr;
}

/// Runs `op` on raw arrays given in op_args order (the compiled function takes them in its own
/// order: matched by name).
void run_raw(const CompiledOp& op, const std::vector<float*>& arrays, int threads) {
  const std::vector<OpArg> args = op_args(op.problem());
  std::vector<std::span<float>> spans;
  for (const auto& b : op.kernel().func().args) {
    std::size_t a = 0;
    while (a < args.size() && args[a].name != b->name) ++a;
    MLS_CHECK(a < args.size(), "tuned rowops: the kernel's argument '", b->name, "' is not an array of ",
              op_name(op.problem().kind));
    std::size_t n = 1;
    for (auto d : args[a].shape) n *= static_cast<std::size_t>(d);
    spans.emplace_back(arrays[a], n);
  }
  op.kernel().run(spans, threads == 1 ? 1 : 0);
}

/// A copy of n floats, 64-byte aligned.
OpArray copy_of(const float* p, long n) { return OpArray(p, p + n); }

}  // namespace

OpKnobs tuned_rowops_knobs(const OpProblem& p, int threads) {
  std::optional<OpKnobs> knobs;
  try {
    knobs = best_op_knobs(TuningDb().scan().records, p, threads, jit::cpu_key());
  } catch (const std::exception&) {
    // an unreadable database: the template's default knobs
  }
  return knobs ? *knobs : OpSpace::full(p, threads).default_knobs();
}

void softmax_tuned(float* out, const float* inp, long rows, long cols) {
  if (rows <= 0 || cols <= 0) return;
  const int threads = mls::num_threads();
  const auto k = row_kernel(row_problem(OpKind::Softmax, rows, cols), threads);
  if (!k) return softmax_forward(out, inp, rows, cols);
  OpArray in;
  if (out == inp) in = copy_of(inp, rows * cols);  // the generated code's arrays do not overlap
  run_raw(*k, {out == inp ? in.data() : const_cast<float*>(inp), out}, threads);
}

void layernorm_forward_tuned(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                             const float* bias, long rows, long cols, float eps) {
  if (rows <= 0 || cols <= 0) return;
  const int threads = mls::num_threads();
  OpProblem p = row_problem(OpKind::LayerNormFwd, rows, cols);
  p.eps = eps;
  const auto k = row_kernel(p, threads);
  if (!k) return layernorm_forward(out, mean, rstd, inp, weight, bias, rows, cols, eps);
  OpArray in;
  if (out == inp) in = copy_of(inp, rows * cols);
  run_raw(*k,
          {out == inp ? in.data() : const_cast<float*>(inp), const_cast<float*>(weight), const_cast<float*>(bias), out,
           mean, rstd},
          threads);
}

void layernorm_backward_tuned(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                              const float* weight, const float* mean, const float* rstd, long rows, long cols) {
  if (rows <= 0 || cols <= 0) return;
  const int threads = mls::num_threads();
  const auto k = row_kernel(row_problem(OpKind::LayerNormBwd, rows, cols), threads);
  if (!k) return layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, cols);
  // The template reads the old gradients (_in) and writes the new ones: the old ones copied first.
  OpArray dinp_in = copy_of(dinp, rows * cols), dw_in = copy_of(dweight, cols), db_in = copy_of(dbias, cols);
  run_raw(*k,
          {dinp_in.data(), dw_in.data(), db_in.data(), const_cast<float*>(dout), const_cast<float*>(inp),
           const_cast<float*>(weight), const_cast<float*>(mean), const_cast<float*>(rstd), dinp, dweight, dbias},
          threads);
}

void register_tuned_rowops() {
  mls::register_rowops({"tuned", &softmax_tuned, &layernorm_forward_tuned, &layernorm_backward_tuned, -100,
                        "lab 4 part 2: the operator templates compiled for the shape (the tuning database's best "
                        "knobs, else the default); lab 4's hand-written kernels where they cannot be compiled"});
}

std::string tuned_rowops_last_warning() {
  std::lock_guard<std::mutex> lock(rowops_state().mu);
  return rowops_state().last_warning;
}

std::int64_t tuned_rowops_fallbacks() {
  std::lock_guard<std::mutex> lock(rowops_state().mu);
  return rowops_state().fallbacks;
}

std::int64_t tuned_rowops_compiled() {
  std::lock_guard<std::mutex> lock(rowops_state().mu);
  return rowops_state().compiled;
}

void set_tuned_rowops_compile_options(const jit::CompileOptions& options) {
  std::lock_guard<std::mutex> lock(rowops_state().mu);
  rowops_state().compile = options;
}

void reset_tuned_rowops_state() {
  RowOpsState& s = rowops_state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.kernels.clear();
  s.failed.clear();
  s.last_warning.clear();
  s.warned = false;
  s.fallbacks = s.compiled = 0;
  s.compile = {};
}

}  // namespace mls::kernels::tune
