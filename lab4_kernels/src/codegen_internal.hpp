#pragma once
// Internals of the C++ code generator (mls/kernels/codegen.hpp), shared by codegen_cpp.cpp (the
// scalar emitter, functions and modules), codegen_vector.cpp (vectorized loops) and
// codegen_jit.cpp. The small pure functions at the top have their own tests
// (tests/test_codegen.cpp).
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "mls/kernels/codegen.hpp"
#include "te_internal.hpp"

namespace mls::kernels::te::codegen_detail {

// ---- small pure functions ----------------------------------------------------------------------

/// A float constant as C++ source that reads back to the same float: "2.0f", "0.1f" (the shortest
/// of %.6g..%.9g that round-trips), "__builtin_inff()", "-__builtin_inff()", "__builtin_nanf(\"\")".
std::string c_float_literal(float v);
/// An int64 constant: "12", "-3", "4294967296LL".
std::string c_int_literal(std::int64_t v);

/// Whether the element `idx` (one index per dimension) addresses moves by exactly one element per
/// step of `v`: the last index affine in v with coefficient 1, no other index reading v.
bool contiguous_in(const std::vector<Expr>& idx, const VarNode* v);
/// Whether `cond` holds on an interval of v's values: a conjunction (&&) of comparisons <, <=, >,
/// >= whose operands are affine in v (v in no floor division or product). Such a condition holds
/// at every lane of a chunk when it holds at the chunk's first and last lane.
bool interval_condition(const Expr& cond, const VarNode* v);
/// Whether two iterations v != v' of a loop write disjoint elements through `idx` (one index per
/// dimension; `span[d]` more elements past each index, a tile's window), with the loops inside the
/// loop ranging over `inner` and every other variable fixed: some dimension is c*v + r with c != 0
/// and r varying over fewer than |c| - span[d] values.
bool writes_disjoint(const std::vector<Expr>& idx, const std::vector<std::int64_t>& span, const VarNode* v,
                     const detail::Ranges& inner);

/// Text of a C++ expression and its precedence (16 primary, 15 unary, 13 * / %, 12 + -, 10 < <= >
/// >=, 9 == !=, 5 &&, 4 ||, 3 ?:).
struct CText {
  std::string s;
  int prec = 16;
};
/// `t` parenthesised when its precedence is below `min_prec`.
std::string wrap(const CText& t, int min_prec);

/// The spellings in which the C++ and the CUDA generators differ (everything else of an
/// expression's text is theirs in common: c_expr).
struct Dialect {
  const char* who;       ///< starts error messages: "generate_cpp", "generate_cuda"
  const char* int_type;  ///< the index type: "std::int64_t", "long long"
  const char* exp;       ///< float functions: "__builtin_expf", "expf", ...
  const char* sqrt;
  const char* fabs;
  const char* fmin;
  const char* fmax;
  const char* inf;  ///< +infinity and a quiet NaN: "__builtin_inff()", "__builtin_nanf(\"\")" (C++),
  const char* nan;  ///< "__int_as_float(0x7f800000)", "__int_as_float(0x7fffffff)" (CUDA)
};
const Dialect& cpp_dialect();
/// The C++ dialect with exp as the generated unit's polynomial `mls_expf` (CodegenOptions::fast_exp).
const Dialect& cpp_fast_exp_dialect();
/// The helpers of CodegenOptions::fast_exp (`mls_expf`, `mls_vexp_fast`), after the prelude
/// (src/codegen_fastmath.cpp): Cephes' exp, or with `exp2` (CodegenOptions::fast_exp2) 2^(x log2e)
/// by mls::kExp2Poly.
const std::string& fast_exp_prelude(bool exp2);
/// The helpers of CodegenOptions::stream_stores (`mls_stream`, `mls_stream_fence`), after the prelude.
const char* stream_prelude();
/// The helpers of CodegenOptions::fast_reduce and ::prefetch (`mls_vmax_acc`, `mls_hsum`, ...,
/// `mls_prefetch`), after the prelude (and the fast_exp prelude: they use mls_fmaxf).
const char* fast_reduce_prelude();
const Dialect& cuda_dialect();

/// What printing an expression needs from its emitter: the name of a variable, the text of a
/// loaded element, the ranges of the loops around (a floor division of a value never negative is
/// C's `/`), the function's name (for errors). The generated code provides mls_floordiv,
/// mls_floormod, mls_min, mls_max and mls_abs on the index type.
struct ExprContext {
  const Dialect* dialect = nullptr;
  std::function<std::string(const VarNode*)> var;
  std::function<std::string(const Load&)> load;
  const detail::Ranges* ranges = nullptr;
  std::string func;
};
/// The C/C++/CUDA text of a scalar expression (Int, Float or Bool) with its precedence.
CText c_expr(const Expr& e, const ExprContext& cx);

// ---- the emitter -------------------------------------------------------------------------------

/// What the functions of one translation unit share: options, and the intrinsics' functions.
struct Module {
  CodegenOptions options;
  int lanes = 1;                               // resolved_vector_lanes(options)
  std::map<std::string, std::string> intrinsic_ident;  // source key -> function name
  std::set<std::string> intrinsic_names;
  std::string intrinsic_text;                  // their definitions, in order of first use
  /// The name of the function computing `part` of `in` (defined in intrinsic_text on first use).
  std::string intrinsic_function(const Intrinsic& in, CallPart part);
};

/// A buffer as the generated code names it.
struct BufVar {
  std::string ident;
  std::vector<std::int64_t> shape, strides;
  std::int64_t size = 1;
  bool is_arg = false;
  bool live = false;  // an argument, or inside its Allocate
  bool used = false;
};

/// Emits one LoweredFunc as an extern "C" function.
class Emitter {
 public:
  Emitter(const LoweredFunc& f, Module& m);
  /// The function's definition.
  std::string function();

 private:
  // codegen_cpp.cpp: names, expressions, statements
  std::string var(const VarNode* v) const;
  std::string bind(const VarNode* v, const std::string& base, std::int64_t lo, std::int64_t hi);
  void unbind(const VarNode* v);
  std::string fresh(const std::string& base);
  BufVar& buf(const BufferNode* b, const char* what);
  Expr flat_index(const BufVar& bv, const std::vector<Expr>& idx) const;
  std::string element(const BufferNode* b, const std::vector<Expr>& idx, const char* what);
  CText expr(const Expr& e);
  void line(int depth, const std::string& text);
  void stmt(const Stmt& s, int depth, bool whole_block);
  void loop(const For& f, int depth);
  void serial_loop(const For& f, int depth, const std::string& v);
  void parallel_loop(const For& f, int depth, const std::string& v);
  std::string parallel_conflict(const For& f);
  void store(const Store& st, int depth);
  void allocate(const Allocate& a, int depth, bool whole_block);
  void call(const Call& c, const Stmt& s, int depth);

  // codegen_vector.cpp: vectorized loops
  void vector_loop(const For& f, int depth, const std::string& v);
  /// A transposing copy `for a: for b in vectorized: D[.. a .. b] = S[.. b .. a]` (D contiguous in
  /// b, S contiguous in a, both buffers distinct, no guard, constant bounds, both extents at least
  /// the lanes): emitted as W x W blocks transposed through vector registers (mls_transpose<W>,
  /// defined once per unit), the edges element by element. False (nothing emitted) for any other
  /// loop.
  bool transpose_copy(const For& f, int depth);
  std::string vector_obstacle(const For& f) const;
  void vstore(const Store& st, int depth);
  // codegen_fastmath.cpp: non-temporal stores (CodegenOptions::stream_stores)
  bool streamed(const Store& st) const;
  bool streams_in(const Stmt& s) const;
  void vstore_streamed(const Store& st, int depth);
  // codegen_fastmath.cpp: reductions in lanes (CodegenOptions::fast_reduce), prefetches (::prefetch)
  void prefetches(const Store& st, int depth);
  /// Whether `text` is already a line at `depth` of the block being written (a chunk's prefetch of
  /// a row read by two of its statements is issued once).
  bool in_this_block(int depth, const std::string& text) const;
  bool vstore_minmax(const Store& st, int depth);
  bool reduce_loop(const For& f, int depth, const std::string& v);
  void vif(const IfThenElse& i, int depth);
  CText vexpr(const Expr& e, bool& vec);
  CText lanewise(const Expr& e);
  std::string vtype() const { return "mls_f32x" + std::to_string(vec_lanes_); }
  std::string splat(const CText& t, bool vec) const;

  const LoweredFunc& f_;
  Module& m_;
  std::string out_;
  std::map<const BufferNode*, BufVar> bufs_;
  std::map<const VarNode*, std::vector<std::string>> names_;  // a stack per variable
  std::set<std::string> active_;                            // names bound now
  std::set<std::string> taken_;                             // buffers', helpers' and reserved names
  detail::Ranges ranges_;
  bool uses_parallel_ = false;
  bool uses_stream_ = false;     // a non-temporal store was emitted (the function ends with a fence)
  int in_vectorized_ = 0;        // vectorized loops around (their nested ones run serially)
  const VarNode* vec_var_ = nullptr;  // emitting a chunk of this variable's vectorized loop
  Var vec_loop_var_;                  // its Var
  int vec_lanes_ = 1;
  std::vector<std::string> pre_;  // statements before the current vector statement
  int temps_ = 0;
  // CodegenOptions::prefetch_pass_step: per prefetched buffer, the pass number of each vectorized
  // loop (its variable) that prefetched it, in the order they were written.
  std::map<std::string, std::map<const VarNode*, std::int64_t>> prefetch_passes_;
};

}  // namespace mls::kernels::te::codegen_detail
