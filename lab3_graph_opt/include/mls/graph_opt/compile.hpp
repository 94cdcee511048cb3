#pragma once
/// `compile(fn)`: torch.compile in C++ (slides 000 "Just-in-time compilation", 001 "torch.compile:
/// trace the computation graph and compile it"). Write a function with lab 2's eager `Var` API,
/// compile it, call it like the original:
///
///   auto net = nn::mlp({784, 256, 256, 10}, rng);
///   auto step = compile([&](Var x, Var y) { return softmax_cross_entropy((*net)(x), y); });
///   Var loss = step(Var(x), Var(y));   // first call: trace, optimise, plan memory, run
///   loss.backward();                   // the compiled backward program; net's grads as in eager
///   loss = step(Var(x2), Var(y2));     // same signature: the compiled version again
///
/// On a call with a new signature, compile TRACES fn: it calls fn with placeholders of the inputs'
/// shapes and dtypes while lab 2's tracing hooks (`autodiff::TraceScope`) are installed, so every
/// op fn applies adds a node to one lab 2 Graph (define-then-run). Tensors fn captures (eager Vars
/// it uses that are not arguments, e.g. a module's weights) are lifted into the graph: one that
/// requires grad (a parameter) becomes an extra input, fed its current value at every call, so an
/// optimizer may update it in place; any other becomes a constant, frozen at its traced value. With
/// gradients needed (grad mode on and some input or parameter requiring grad), the backward graph
/// is added to the same graph (`autodiff::gradients` of sum_k sum(out_k * grad_out_k)), and the
/// joint graph is optimised by lab 3's pass pipeline as one, then split: the forward program
/// computes the outputs and the values the backward reads (the saved activations: only what the
/// optimised backward still uses); the backward program the rest. Each part gets a memory plan
/// (`plan_memory`) and runs in a `PlannedExecutor`. Each output is returned as an eager
/// `autodiff::custom` op whose backward runs the backward program, so `loss.backward()` works as
/// in eager code and reaches the inputs and parameters on the ordinary tape.
///
/// Guards: a compiled version is specialised to a `Signature` (each input's shape, dtype and
/// requires_grad, and the grad mode) and to its captures (a parameter's shape and dtype; a frozen
/// constant's identity and checksum). A call whose guards fail for every version compiles a new
/// one; after `max_versions` (default 8) new signatures run fn eagerly, with one warning line
/// naming the reason. `MLS_COMPILE_LOG=1` prints every guard failure. A captured constant changed
/// in place fails its checksum guard: the function is recompiled (not an error).
///
/// Graph breaks: fn may not read a traced value on the host (a data-dependent `if` on
/// `x.value().item()`): tracing stops with an `mls::Error` saying that compile cannot trace
/// data-dependent control flow, naming the node read (see handouts/lab3, "compile").
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "mls/graph_opt/memory.hpp"
#include "mls/graph_opt/passes.hpp"

namespace mls::graph_opt {

/// What a compiled version assumes about one input.
struct InputSpec {
  Shape shape;
  DType dtype = DType::Float32;
  bool requires_grad = false;
  friend bool operator==(const InputSpec&, const InputSpec&) = default;
};

/// What a compiled version is specialised to: one spec per input, in call order, and the grad
/// mode of the call (`autodiff::grad_enabled()`: with it off, no backward is compiled).
struct Signature {
  std::vector<InputSpec> inputs;
  bool grad_mode = true;
  friend bool operator==(const Signature&, const Signature&) = default;
  /// "(float32 [128, 784] grad, int64 [128]) grad_mode=1".
  std::string str() const;
};

/// A tensor fn captured while it was traced: an eager Var it used that was not an argument.
struct Capture {
  NodePtr node;                 // the captured eager node (kept alive by the compiled version)
  bool as_input = false;        // requires grad: fed node->value at every call; else a frozen constant
  Tensor value;                 // a constant: the tensor frozen into the graph (the same storage)
  std::uint64_t checksum = 0;   // a constant: tensor_checksum(value) when traced
  Shape shape;                  // the traced shape and dtype
  DType dtype = DType::Float32;
  std::string name;             // "capture 2 'W'"
};

/// FNV-1a hash of a tensor's dtype, shape and elements in row-major order: what the guard of a
/// captured constant compares to notice a change in place.
std::uint64_t tensor_checksum(const Tensor& t);

/// [lab 3 task] The signature of a call: for every input (each must be a defined Var) its shape,
/// dtype and requires_grad, in order, and `grad_mode`. Throws `mls::Error` naming the input when
/// one is undefined.
Signature signature_of(const std::vector<Var>& inputs, bool grad_mode);

/// [lab 3 task] The guards of a compiled version (the `compiled` signature and its `captures`)
/// against a call's signature `now`. Returns "" when every guard holds, else a description of the
/// first one that fails, in this order and wording:
///   "grad_mode: 1 compiled, 0 now"
///   "number of inputs: 2 compiled, 3 now"
///   "input 1: shape [128, 784] compiled, [64, 784] now"   (then dtype, then requires_grad: 1/0)
///   "<capture name>: shape [256] compiled, [128] now"      (a capture's node->value; then dtype)
///   "<capture name>: no longer requires grad"              (an input capture)
///   "<capture name>: replaced by another tensor"           (a constant whose node holds another storage)
///   "<capture name>: changed in place (checksum <old hex> compiled, <new hex> now)"
std::string check_guards(const Signature& compiled, const std::vector<Capture>& captures, const Signature& now);

/// Options of compile().
struct CompileOptions {
  std::string name = "fn";                    // in messages and logs
  /// Passes on the traced forward graph before the backward is built from it (rewrites to ops
  /// whose gradient rules are fused kernels); "" for none.
  std::string pre_grad_passes = compile_pre_grad_pipeline();
  std::string passes = compile_pipeline();    // lab 3's pass pipeline run on the joint graph
  int max_versions = 8;                       // compiled versions kept; then new signatures run eagerly
  /// Cache hits per version that trace fn again and compare the graph with the compiled one (an
  /// `mls::Error` when it differs: the graph depends on something the guards do not see). -1: every
  /// hit; MLS_COMPILE_CHECK=1 in the environment also means every hit.
  int retrace_checks = 1;
  bool log = false;                           // print guard failures to stderr (also MLS_COMPILE_LOG=1)
  /// true: run the forward and backward programs in their planned buffers (`PlannedExecutor`: the
  /// memory plan's peak, one copy of each value into its buffer); false: lab 2's `Executor` (`run`:
  /// no copies, each value freed after its last use).
  bool planned = true;
};

/// Counters of a compiled function (for tests and the tool).
struct CompileStats {
  int compiles = 0;        // versions traced and compiled
  int cache_hits = 0;      // calls that ran a compiled version
  int fallbacks = 0;       // calls run eagerly because the version limit was reached
  int guard_failures = 0;  // guards that failed (one per version checked on a miss)
  int retraces = 0;        // retrace checks run
  double compile_ms = 0;   // time spent tracing, optimising and planning
};

/// One compiled version: what it was traced to, what the passes made of it, and its executors.
struct CompiledVersion {
  Signature signature;
  std::vector<Capture> captures;
  std::vector<std::string> structure;  // one line per traced node: what the retrace check compares
  Program traced;                      // as traced (forward, and backward when compiled), before passes
  PassReport report;                   // the pre-gradient passes on the forward, then the pipeline on the joint graph
  std::size_t optimised_nodes = 0;     // nodes of the joint graph after the passes
  Program forward;                     // inputs: the call's, then input captures; outputs: fn's, then saved
  Program backward;                    // inputs: see `backward_sources`; outputs: one gradient per grad input
  bool has_backward = false;
  std::size_t num_outputs = 0;         // fn's outputs (the forward program's first outputs)
  std::vector<std::size_t> grad_inputs;  // indices (call inputs, then input captures) that get gradients
  /// Where each backward input comes from: {0, i} forward input i, {1, s} saved value s (forward
  /// output num_outputs + s), {2, k} the adjoint of output k.
  std::vector<std::pair<int, std::size_t>> backward_sources;
  std::unique_ptr<PlannedExecutor> forward_exec, backward_exec;
  int retraces_done = 0;
};

/// The type-erased compiled function: inputs in, outputs out (eager Vars both).
class CompiledFunction {
 public:
  using Fn = std::function<std::vector<Var>(const std::vector<Var>&)>;
  explicit CompiledFunction(Fn fn, CompileOptions options = {});
  /// Runs a compiled version whose guards hold, compiling one when none does (or fn eagerly past
  /// the version limit). Inputs must be defined eager Vars; when they are graph nodes (a compiled
  /// function called inside a function being traced), fn is traced inline.
  std::vector<Var> operator()(const std::vector<Var>& inputs);
  const CompileStats& stats() const { return stats_; }
  const CompileOptions& options() const { return options_; }
  std::size_t num_versions() const { return versions_.size(); }
  /// Version `i` (0: the first compiled); throws `mls::Error` when out of range.
  const CompiledVersion& version(std::size_t i) const;
  /// The guards of version `i`, one per line ("input 0: float32 [128, 784] requires_grad=0", ...).
  std::string guards(std::size_t i) const;
  /// Drops every version and the counters (the next call compiles again).
  void reset();

 private:
  std::vector<Var> run_version(const std::shared_ptr<CompiledVersion>& v, const std::vector<Var>& inputs);
  Fn fn_;
  CompileOptions options_;
  CompileStats stats_;
  std::vector<std::shared_ptr<CompiledVersion>> versions_;
  bool warned_ = false;
};

namespace detail {
template <class T>
struct fn_traits : fn_traits<decltype(&T::operator())> {};
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...) const> { using type = R(A...); };
template <class C, class R, class... A>
struct fn_traits<R (C::*)(A...)> { using type = R(A...); };
template <class R, class... A>
struct fn_traits<R (*)(A...)> { using type = R(A...); };
template <class R, class... A>
struct fn_traits<R(A...)> { using type = R(A...); };

template <class T>
inline constexpr bool is_var = std::is_same_v<std::remove_cvref_t<T>, Var>;
template <class T>
inline constexpr bool is_var_list = std::is_same_v<std::remove_cvref_t<T>, std::vector<Var>>;
template <class T>
struct is_var_tuple : std::false_type {};
template <class... T>
struct is_var_tuple<std::tuple<T...>> : std::bool_constant<(is_var<T> && ...)> {};
template <class R>
inline constexpr bool valid_result = is_var<R> || is_var_list<R> || is_var_tuple<R>::value;
template <class... A>
inline constexpr bool valid_args = (sizeof...(A) == 1 && (is_var_list<A> && ...)) || (is_var<A> && ...);

template <class R>
std::vector<Var> flatten(R&& r) {
  if constexpr (is_var<R>) return {std::forward<R>(r)};
  else if constexpr (is_var_list<R>) return std::forward<R>(r);
  else return std::apply([](auto&&... v) { return std::vector<Var>{v...}; }, std::forward<R>(r));
}
template <class R>
R unflatten(std::vector<Var> v) {
  if constexpr (is_var<R>) return v.at(0);
  else if constexpr (is_var_list<R>) return v;
  else return [&]<std::size_t... I>(std::index_sequence<I...>) { return R{v.at(I)...}; }(std::make_index_sequence<std::tuple_size_v<R>>());
}
}  // namespace detail

/// True when compile() accepts `F`: a callable whose arguments are Vars (by value or const
/// reference) or one `std::vector<Var>`, returning a Var, a std::vector<Var> or a std::tuple of
/// Vars. A function returning anything else is refused at compile time.
template <class F>
concept Compilable = requires { typename detail::fn_traits<std::decay_t<F>>::type; } &&
                     []<class R, class... A>(R (*)(A...)) {
                       return detail::valid_result<R> && detail::valid_args<A...>;
                     }(static_cast<typename detail::fn_traits<std::decay_t<F>>::type*>(nullptr));

template <class Sig>
class Compiled;
/// The callable compile() returns: the signature of fn, and the compiled function behind it.
template <class R, class... A>
class Compiled<R(A...)> {
 public:
  explicit Compiled(std::shared_ptr<CompiledFunction> impl) : impl_(std::move(impl)) {}
  R operator()(A... args) const {
    std::vector<Var> in;
    if constexpr (sizeof...(A) == 1 && (detail::is_var_list<A> && ...)) in = std::vector<Var>(args...);
    else (in.push_back(args), ...);
    return detail::unflatten<R>((*impl_)(in));
  }
  CompiledFunction& impl() const { return *impl_; }
  const CompileStats& stats() const { return impl_->stats(); }

 private:
  std::shared_ptr<CompiledFunction> impl_;
};

namespace detail {
template <class F, class... A, std::size_t... I>
std::vector<Var> call_unpacked(const F& fn, const std::vector<Var>& in, std::index_sequence<I...>) {
  return flatten(fn(in[I]...));
}
/// fn as a function of a list of Vars.
template <class F, class R, class... A>
CompiledFunction::Fn erase(F fn, R (*)(A...)) {
  return [fn = std::move(fn)](const std::vector<Var>& in) -> std::vector<Var> {
    if constexpr (sizeof...(A) == 1 && (is_var_list<A> && ...)) {
      return flatten(fn(in));
    } else {
      MLS_CHECK(in.size() == sizeof...(A), "compile: fn takes ", sizeof...(A), " inputs, called with ", in.size());
      return call_unpacked<F, A...>(fn, in, std::index_sequence_for<A...>());
    }
  };
}
}  // namespace detail

/// Compiles `fn` (see the top of this file): returns a callable with fn's signature.
template <class F>
  requires Compilable<F>
auto compile(F fn, CompileOptions options = {}) {
  using Sig = typename detail::fn_traits<std::decay_t<F>>::type;
  return Compiled<Sig>(std::make_shared<CompiledFunction>(detail::erase(std::move(fn), static_cast<Sig*>(nullptr)),
                                                          std::move(options)));
}

/// An eager model to compile (the examples of `mls-opt compile`, the benchmark and the tests).
struct EagerExample {
  std::string name;
  CompiledFunction::Fn fn;     // inputs -> {loss}
  std::vector<Var> inputs;     // example inputs (eager)
  std::vector<Var> params;     // the parameters fn captures (eager leaves requiring grad)
  std::shared_ptr<void> keep;  // what fn captures (modules)
};
/// "mlp": lab 2's MLP step model, nn::mlp 784-256-256-10 (ReLU), batch 128, softmax cross-entropy
/// on int64 labels; "attention": a self-attention block with a GELU MLP (t 64, d 64, parameters
/// captured) and an MSE loss; "slides": lecture 002's y = ln(x1) + x1*x2 - sin(x2), summed, on two
/// vectors of 16. Throws `mls::Error` for another name.
EagerExample eager_example(const std::string& name, std::uint64_t seed = 0);
/// The report of `mls-opt compile --model <name>`: compiles the example and prints the captured
/// graph, the guards, the pass table, the memory plans and (with `svg_dir`) writes DOT and SVG
/// drawings of the traced and optimised graphs there.
std::string compile_report(const std::string& name, const std::string& svg_dir = "");

}  // namespace mls::graph_opt
