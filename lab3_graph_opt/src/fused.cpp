// Lab 3's fused_elementwise op, registered with lab 2's op registry like any other op: a chain or
// tree of elementwise ops in one loop, evaluated with lab 1's scalar functions
// (mls/tensor/scalar.hpp), a block of instructions at a time or a register tile at a time. Its
// attribute "code" names each instruction's op by name (ir.hpp). Lab 2's executor runs it like any op.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <type_traits>

#include "mls/common/alloc.hpp"
#include "mls/common/parallel.hpp"
#include "mls/graph_opt/ir.hpp"
#include "mls/tensor/scalar.hpp"
#include "simd.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

// The register evaluator passes 64-byte vectors between inlined helpers of this file only (no
// ABI to keep), also in the baseline clone of the multiversioned loops.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace mls::graph_opt {

namespace {

using simd::pick_isa;
using simd::Vec;

using Ins = std::span<const Tensor>;
using InNodes = std::span<const Node* const>;

/// o[j] = f(a[j], b[j]) where either side may be one value (`sa`, `sb`: broadcast scalars).
/// Four loops so that each one vectorises.
template <class T, class F>
inline void loop2(F f, const T* a, bool sa, const T* b, bool sb, T* o, std::int64_t n) {
  if (!sa && !sb) {
    for (std::int64_t j = 0; j < n; ++j) o[j] = f(a[j], b[j]);
  } else if (!sa) {
    const T bv = *b;
    for (std::int64_t j = 0; j < n; ++j) o[j] = f(a[j], bv);
  } else if (!sb) {
    const T av = *a;
    for (std::int64_t j = 0; j < n; ++j) o[j] = f(av, b[j]);
  } else {
    o[0] = f(*a, *b);
  }
}

/// One instruction over a block: o = op(a, b), lab 1's scalar function per element. Returns true
/// when the result is one value (both operands were), stored in o[0]. The switch is outside the
/// loops so the simple ops vectorise.
template <class T>
bool run_binary(BinaryOp op, const T* a, bool sa, const T* b, bool sb, T* o, std::int64_t n) {
  scalar::with_binary(op, [&](auto c) {
    constexpr BinaryOp B = decltype(c)::value;
    if constexpr (B < BinaryOp::Eq) loop2<T>([](T x, T y) { return scalar::binary<B, T>(x, y); }, a, sa, b, sb, o, n);
  });
  return sa && sb;
}
template <class T>
bool run_unary(UnaryOp op, const T* a, bool sa, T* o, std::int64_t n) {
  const std::int64_t m = sa ? 1 : n;
  scalar::with_unary(op, [&](auto c) {
    constexpr UnaryOp U = decltype(c)::value;
    for (std::int64_t j = 0; j < m; ++j) o[j] = scalar::unary<U, T>(a[j]);
  });
  return sa;
}

/// One instruction of a fused program: the lab 1 scalar function of a registered elementwise
/// op, applied to slots a (and b).
struct Instr {
  Op op;
  std::optional<UnaryOp> unary;
  BinaryOp binary = BinaryOp::Add;
  int a, b;
};
/// Parses one instruction "<op> <a> [<b>]" of a fused program's "code" attribute: an elementwise
/// op by its registered name and the slots it reads (inputs 0..n_in-1, then the earlier results).
Instr parse_instr(const std::string& text, std::size_t k, std::int64_t limit) {
  std::istringstream is(text);
  std::string name, extra;
  std::int64_t a = -1, b = -1;
  const bool one = static_cast<bool>(is >> name >> a);
  const bool two = one && static_cast<bool>(is >> b);
  is.clear();
  MLS_CHECK(one && !(is >> extra), "fused_elementwise: instruction ", k, " is '", text,
            "', expected '<op> <a>' or '<op> <a> <b>'");
  Op op{};
  try {
    op = autodiff::op_from_name(name);
  } catch (const Error&) {
    fail("fused_elementwise: instruction ", k, " names op '", name, "', which is not registered");
  }
  const autodiff::OpDef& def = autodiff::op_def(op);
  MLS_CHECK(def.elementwise, "fused_elementwise: instruction ", k, " names op '", name, "', not an elementwise op");
  MLS_CHECK(two != def.unary.has_value(), "fused_elementwise: instruction ", k, " ('", text, "') gives ", two ? 2 : 1,
            " operand(s); ", name, " takes ", def.unary ? 1 : 2);
  for (const std::int64_t slot : {a, b}) {
    if (slot == b && !two) continue;
    MLS_CHECK(slot >= 0 && slot < limit, "fused_elementwise: instruction ", k, " reads slot ", slot, ", only ", limit,
              " defined");
  }
  return {op, def.unary, def.binary.value_or(BinaryOp::Add), static_cast<int>(a), two ? static_cast<int>(b) : -1};
}
std::vector<Instr> decode(const autodiff::Attrs& attrs, std::size_t n_inputs) {
  const auto& code = attrs.strs("code");
  MLS_CHECK(!code.empty(), "fused_elementwise: 'code' must list at least one instruction");
  std::vector<Instr> prog;
  for (std::size_t k = 0; k < code.size(); ++k)
    prog.push_back(parse_instr(code[k], k, static_cast<std::int64_t>(n_inputs + k)));
  return prog;
}

Shape broadcast(const Shape& a, const Shape& b) { return autodiff::broadcast_inferred(a, b, "fused_elementwise"); }

constexpr std::int64_t kBlock = 512;

/// Runs the instructions over one block of `n` elements: slot i < n_in is input i (`src`,
/// `one_value`: a single value for the whole block), slot n_in + k the result of instruction k,
/// kept in `scratch`; the last instruction writes `out`.
template <class T>
inline void run_program(const Instr* prog, std::size_t n_prog, std::size_t n_in, const T** src, char* one_value,
                        T* scratch, T* out, std::int64_t n) {
  for (std::size_t k = 0; k < n_prog; ++k) {
    const bool last = k + 1 == n_prog;
    T* dst = last ? out : scratch + (n_in + k) * kBlock;
    const Instr& in = prog[k];
    const bool b_ok = in.b >= 0;
    const T* pa = src[static_cast<std::size_t>(in.a)];
    const bool sa = one_value[static_cast<std::size_t>(in.a)] != 0;
    const bool one = in.unary ? run_unary<T>(*in.unary, pa, sa, dst, n)
                              : run_binary<T>(in.binary, pa, sa, b_ok ? src[static_cast<std::size_t>(in.b)] : nullptr,
                                              b_ok ? one_value[static_cast<std::size_t>(in.b)] != 0 : true, dst, n);
    if (one && last) std::fill(out + 1, out + n, out[0]);
    src[n_in + k] = dst;
    one_value[n_in + k] = one && !last;
  }
}

// The float program compiled for AVX-512, AVX2 and the baseline, the best picked at start-up
// (GCC target_clones; `flatten` inlines the per-op loops so that they are vectorised for each
// target: the baseline's 4-wide SSE loops made a fused chain compute-bound).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define MLS_FUSED_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default"), flatten))
#else
#define MLS_FUSED_MULTIVERSION
#endif
MLS_FUSED_MULTIVERSION void run_program_f32(const Instr* prog, std::size_t n_prog, std::size_t n_in, const float** src,
                                            char* one_value, float* scratch, float* out, std::int64_t n) {
  run_program<float>(prog, n_prog, n_in, src, one_value, scratch, out, n);
}

/// One unary op over n floats, vectorised for the best ISA (the register evaluator's tiles of
/// the ops it has no vector code of its own for: exp, tanh, sigmoid, gelu, ...), multiversioned
/// like the block evaluator. Their loops vectorize only with -fno-trapping-math (CMakeLists.txt);
/// without it they called libm's floorf/fmaf per element, 10-20x slower than lab 1's kernels.
MLS_FUSED_MULTIVERSION void run_unary_f32(UnaryOp op, const float* a, float* o, std::int64_t n) {
  run_unary<float>(op, a, false, o, n);
}

/// Evaluates the program over one block of `n` elements. `ptr[i]`/`stride[i]`: input i's first
/// element and its step (0: one value for the whole block, 1: dense, else gathered). `out`
/// receives the result; with `stream` it is assembled in scratch and streamed out with
/// non-temporal stores (a result too big to stay in cache: no read-for-ownership of its lines).
template <class T>
void eval_block(const std::vector<Instr>& prog, std::size_t n_in, const std::vector<const T*>& ptr,
                const std::vector<std::int64_t>& stride, T* out, std::int64_t n, std::vector<T>& scratch,
                bool stream = false, std::int64_t prefetch = 0) {
  const std::size_t slots = n_in + prog.size();
  scratch.resize((slots + 1) * kBlock);
  T* const dst = stream ? scratch.data() + slots * kBlock : out;
  thread_local std::vector<const T*> src;
  thread_local std::vector<char> one_value;  // per slot: one value for the whole block
  if (src.size() < slots) {
    src.resize(slots);
    one_value.resize(slots);
  }
  for (std::size_t i = 0; i < n_in; ++i) {
    if (stride[i] == 1 && prefetch > 0) {
      // The computation between two blocks' reads leaves the memory idle: ask for the lines of
      // a block `prefetch` elements ahead now (the streamed path's inputs come from DRAM).
      for (std::int64_t j = 0; j < n; j += 64 / static_cast<std::int64_t>(sizeof(T))) {
        __builtin_prefetch(ptr[i] + prefetch + j, 0, 3);
      }
    }
    if (stride[i] == 1 || stride[i] == 0) {
      src[i] = ptr[i];
      one_value[i] = stride[i] == 0;
    } else {
      T* buf = scratch.data() + i * kBlock;
      for (std::int64_t j = 0; j < n; ++j) buf[j] = ptr[i][j * stride[i]];
      src[i] = buf;
      one_value[i] = 0;
    }
  }
  if constexpr (std::is_same_v<T, float>) {
    run_program_f32(prog.data(), prog.size(), n_in, src.data(), one_value.data(), scratch.data(), dst, n);
  } else {
    run_program<T>(prog.data(), prog.size(), n_in, src.data(), one_value.data(), scratch.data(), dst, n);
  }
  if (stream) stream_copy(out, dst, static_cast<std::size_t>(n) * sizeof(T), /*fence=*/false);
}

// ---- register tiles ------------------------------------------------------------------------------
// The block evaluator above runs one instruction over a whole block before the next, so every
// instruction stores its block to L1 and the next one loads it back: a 6-op chain spends more
// time in those stores than the memory needs to deliver its input, and the next block's loads
// wait behind them. The register evaluator runs the whole program over one tile of
// kTileVecs vectors (64 floats) at a time, keeping the running value (the result of the last
// instruction) in registers: an input is loaded once per tile, the result stored once, and only
// values that a later instruction reads again (not the next one) are saved to a tile in L1.
// Add, sub, mul, div, maximum, minimum, neg, abs and relu run on the vectors (the same
// expressions as lab 1's scalar functions); every other op goes through the block loops of
// `run_unary` / `run_binary` on the tile, so the numerics are lab 1's in both evaluators.

constexpr int kTileVecs = 4;
template <class T>
constexpr std::int64_t kTile = kTileVecs * static_cast<std::int64_t>(sizeof(Vec<T>) / sizeof(T));

/// The ops the register evaluator computes on vectors; kOther: through lab 1's block loops.
enum class VecOp : std::uint8_t { kAdd, kSub, kMul, kDiv, kMax, kMin, kNeg, kAbs, kRelu, kOther };

/// One instruction of the register evaluator: operand a (and b) is the running value (`*_acc`)
/// or memory operand `*_mem` (a dense input, one value repeated over a tile, or a saved result);
/// `save` >= 0: the result is also stored to memory operand `save` for a later instruction.
struct RegInstr {
  VecOp vop;
  bool a_acc, b_acc, unary;
  int a_mem, b_mem, save;
  const Instr* instr;  // for kOther
};
/// Memory operand: element j of the tile starting at s is base[(s + j) * step] (step 1 or 0).
template <class T>
struct MemOperand {
  const T* base;
  std::int64_t step;
};

VecOp vec_op(const Instr& k) {
  if (k.unary) {
    switch (*k.unary) {
      case UnaryOp::Neg: return VecOp::kNeg;
      case UnaryOp::Abs: return VecOp::kAbs;
      case UnaryOp::Relu: return VecOp::kRelu;
      default: return VecOp::kOther;
    }
  }
  switch (k.binary) {
    case BinaryOp::Add: return VecOp::kAdd;
    case BinaryOp::Sub: return VecOp::kSub;
    case BinaryOp::Mul: return VecOp::kMul;
    case BinaryOp::Div: return VecOp::kDiv;
    case BinaryOp::Maximum: return VecOp::kMax;
    case BinaryOp::Minimum: return VecOp::kMin;
    default: return VecOp::kOther;
  }
}

/// A fused program compiled for the register evaluator: memory operands 0..n_in-1 are the
/// inputs, then one per saved result (`n_saved` tiles of scratch).
struct RegProgram {
  std::vector<RegInstr> code;
  std::size_t n_in = 0, n_saved = 0;
};
RegProgram compile_registers(const std::vector<Instr>& prog, std::size_t n_in) {
  RegProgram rp;
  rp.n_in = n_in;
  // Slot of each value: inputs, then results; a result read by any instruction but the next
  // one (or read twice by the next) gets a saved tile.
  const std::size_t n = prog.size();
  std::vector<int> saved(n, -1);
  for (std::size_t k = 0; k < n; ++k) {
    for (int slot : {prog[k].a, prog[k].b}) {
      if (slot < static_cast<int>(n_in)) continue;
      const auto j = static_cast<std::size_t>(slot) - n_in;  // result of instruction j
      if (j + 1 != k && saved[j] < 0) saved[j] = static_cast<int>(n_in + rp.n_saved++);
    }
  }
  for (std::size_t k = 0; k < n; ++k) {
    const Instr& in = prog[k];
    RegInstr r{vec_op(in), false, false, in.unary.has_value(), -1, -1, saved[k], &in};
    auto operand = [&](int slot, bool& acc, int& mem) {
      if (slot < 0) return;
      if (slot < static_cast<int>(n_in)) {
        mem = slot;
        return;
      }
      const auto j = static_cast<std::size_t>(slot) - n_in;
      if (j + 1 == k) acc = true;
      else mem = saved[j];
    };
    operand(in.a, r.a_acc, r.a_mem);
    operand(in.b, r.b_acc, r.b_mem);
    rp.code.push_back(r);
  }
  return rp;
}

/// A tile of kTileVecs (4) vectors as separate members, so that the compiler keeps a running
/// value in registers (an array indexed in loops would live on the stack).
template <class T>
struct Tile {
  Vec<T> v0, v1, v2, v3;
};
template <class T>
inline Tile<T> load_tile(const T* p) {
  constexpr std::size_t L = sizeof(Vec<T>) / sizeof(T);
  Tile<T> t;
  std::memcpy(&t.v0, p, sizeof(Vec<T>));
  std::memcpy(&t.v1, p + L, sizeof(Vec<T>));
  std::memcpy(&t.v2, p + 2 * L, sizeof(Vec<T>));
  std::memcpy(&t.v3, p + 3 * L, sizeof(Vec<T>));
  return t;
}
template <class T>
inline void store_tile(T* p, const Tile<T>& t) {
  constexpr std::size_t L = sizeof(Vec<T>) / sizeof(T);
  std::memcpy(p, &t.v0, sizeof(Vec<T>));
  std::memcpy(p + L, &t.v1, sizeof(Vec<T>));
  std::memcpy(p + 2 * L, &t.v2, sizeof(Vec<T>));
  std::memcpy(p + 3 * L, &t.v3, sizeof(Vec<T>));
}
/// f applied to each vector of the tiles.
template <class T, class F>
inline Tile<T> map_tile(const Tile<T>& a, const Tile<T>& b, F f) {
  return {f(a.v0, b.v0), f(a.v1, b.v1), f(a.v2, b.v2), f(a.v3, b.v3)};
}

/// Runs the compiled program over the tiles of [s0, s0 + n) (n a multiple of kTile<T>),
/// writing element s0 + j of the result to out[j]. `mem` holds n_in + n_saved operands; the
/// saved ones point at tiles of scratch (step 0).
template <class T, class Store>
inline void run_registers(const RegInstr* code, std::size_t n_code, const MemOperand<T>* mem, std::int64_t s0,
                          std::int64_t n, T* out) {
  using V = Vec<T>;
  constexpr std::int64_t W = kTile<T>;
  for (std::int64_t t = 0; t < n; t += W) {
    Tile<T> acc{};
    for (std::size_t k = 0; k < n_code; ++k) {
      const RegInstr& r = code[k];
      const Tile<T> a = r.a_acc ? acc : load_tile(mem[r.a_mem].base + (s0 + t) * mem[r.a_mem].step);
      const Tile<T> b = r.unary || r.b_acc ? acc : load_tile(mem[r.b_mem].base + (s0 + t) * mem[r.b_mem].step);
      switch (r.vop) {
        case VecOp::kAdd: acc = map_tile(a, b, [](V x, V y) { return x + y; }); break;
        case VecOp::kSub: acc = map_tile(a, b, [](V x, V y) { return x - y; }); break;
        case VecOp::kMul: acc = map_tile(a, b, [](V x, V y) { return x * y; }); break;
        case VecOp::kDiv: acc = map_tile(a, b, [](V x, V y) { return x / y; }); break;
        case VecOp::kMax:  // scalar::binary<Maximum>: (a != a || a > b) ? a : b
          acc = map_tile(a, b, [](V x, V y) { return ((x != x) | (x > y)) ? x : y; });
          break;
        case VecOp::kMin: acc = map_tile(a, b, [](V x, V y) { return ((x != x) | (x < y)) ? x : y; }); break;
        case VecOp::kNeg: acc = map_tile(a, a, [](V x, V) { return -x; }); break;
        case VecOp::kAbs:  // fabs: -x below zero, +0 for -0
          acc = map_tile(a, a, [](V x, V) { return x < V{} ? -x : (x == V{} ? V{} : x); });
          break;
        case VecOp::kRelu: acc = map_tile(a, a, [](V x, V) { return x > V{} ? x : V{}; }); break;  // scalar::relu
        case VecOp::kOther: {
          alignas(64) T ta[W], tb[W], to[W];
          store_tile(ta, a);
          if (r.unary) {
            if constexpr (std::is_same_v<T, float>) run_unary_f32(*r.instr->unary, ta, to, W);
            else run_unary<T>(*r.instr->unary, ta, false, to, W);
          } else {
            store_tile(tb, b);
            run_binary<T>(r.instr->binary, ta, false, tb, false, to, W);
          }
          acc = load_tile<T>(to);
          break;
        }
      }
      if (r.save >= 0) store_tile(const_cast<T*>(mem[r.save].base), acc);
    }
    Store::store(out + t, acc);
  }
}

/// How the register evaluator stores its results: plain stores (a result that stays in cache
/// for its consumer), or non-temporal ones of whole 64-byte lines (a big result: no
/// read-for-ownership of its lines, `out` 64-byte aligned; `stream_fence` after the last).
struct PlainStore {
  template <class T>
  static void store(T* p, const Tile<T>& t) {
    store_tile(p, t);
  }
};
#ifdef MLS_SIMD_DISPATCH
struct StreamStore512 {
  template <class T>
  __attribute__((target("avx512f"))) static void store(T* p, const Tile<T>& t) {
    for (int u = 0; u < kTileVecs; ++u) {
      const Vec<T>& v = u == 0 ? t.v0 : u == 1 ? t.v1 : u == 2 ? t.v2 : t.v3;
      if constexpr (std::is_same_v<T, float>) _mm512_stream_ps(p + 16 * u, reinterpret_cast<const __m512&>(v));
      else _mm512_stream_pd(p + 8 * u, reinterpret_cast<const __m512d&>(v));
    }
  }
};
struct StreamStore256 {
  template <class T>
  __attribute__((target("avx2"))) static void store(T* p, const Tile<T>& t) {
    constexpr int L = static_cast<int>(32 / sizeof(T));  // per 256-bit half
    alignas(64) T buf[kTile<T>];
    store_tile(buf, t);
    for (int h = 0; h < 2 * kTileVecs; ++h) {
      if constexpr (std::is_same_v<T, float>) _mm256_stream_ps(p + L * h, _mm256_load_ps(buf + L * h));
      else _mm256_stream_pd(p + L * h, _mm256_load_pd(buf + L * h));
    }
  }
};
/// Streamed (with `Stream`'s non-temporal stores) or plain stores.
template <class T, class Stream>
inline void run_registers_to(const RegInstr* code, std::size_t n_code, const MemOperand<T>* mem, std::int64_t s0,
                             std::int64_t n, T* out, bool stream) {
  if (stream) run_registers<T, Stream>(code, n_code, mem, s0, n, out);
  else run_registers<T, PlainStore>(code, n_code, mem, s0, n, out);
}
template <class T>
__attribute__((target("avx512f"), flatten)) void run_registers_avx512(const RegInstr* code, std::size_t n_code,
                                                                      const MemOperand<T>* mem, std::int64_t s0,
                                                                      std::int64_t n, T* out, bool stream) {
  run_registers_to<T, StreamStore512>(code, n_code, mem, s0, n, out, stream);
}
template <class T>
__attribute__((target("avx2"), flatten)) void run_registers_avx2(const RegInstr* code, std::size_t n_code,
                                                                 const MemOperand<T>* mem, std::int64_t s0,
                                                                 std::int64_t n, T* out, bool stream) {
  run_registers_to<T, StreamStore256>(code, n_code, mem, s0, n, out, stream);
}
#endif
template <class T>
__attribute__((flatten)) void run_registers_baseline(const RegInstr* code, std::size_t n_code,
                                                     const MemOperand<T>* mem, std::int64_t s0, std::int64_t n,
                                                     T* out) {
  run_registers<T, PlainStore>(code, n_code, mem, s0, n, out);
}

/// The register evaluator compiled for AVX-512, AVX2 or the baseline, the best this CPU runs.
/// Returns false where it cannot stream (the caller stages the block and streams it out).
template <class T>
bool run_registers_best(const RegInstr* code, std::size_t n_code, const MemOperand<T>* mem, std::int64_t s0,
                        std::int64_t n, T* out, bool stream) {
#ifdef MLS_SIMD_DISPATCH
  const auto fn = pick_isa<void (*)(const RegInstr*, std::size_t, const MemOperand<T>*, std::int64_t, std::int64_t, T*, bool)>(
      run_registers_avx512<T>, run_registers_avx2<T>, nullptr);
  if (fn) {
    fn(code, n_code, mem, s0, n, out, stream);
    return true;
  }
#endif
  run_registers_baseline<T>(code, n_code, mem, s0, n, out);
  return !stream;
}

/// Results of this many elements and more are written with non-temporal stores, and their
/// dense inputs are prefetched kPrefetch elements ahead.
constexpr std::int64_t kStreamFrom = 1 << 20;
constexpr std::int64_t kPrefetch = 8 * kBlock;

/// Evaluates the program into `out` (compact, of the broadcast shape and `dtype`; it may be the
/// memory of an input of that shape: each element is read before it is written).
template <class T>
void fused_eval(const std::vector<Instr>& prog, std::span<const Tensor> in, DType dtype, Tensor& out) {
  const Shape& shape = out.shape();
  const std::int64_t numel = out.numel();
  if (numel == 0) return;
  std::vector<Tensor> x(in.size());
  bool flat = true;
  for (std::size_t i = 0; i < in.size(); ++i) {
    x[i] = in[i].dtype() == dtype ? in[i] : in[i].to(dtype);
    if (x[i].numel() != 1 && !(x[i].shape() == shape && x[i].is_contiguous())) flat = false;
  }
  T* o = out.data<T>();
  if (flat) {
    // Every input is dense of the output's shape or a single value: one flat loop.
    // Base pointers and steps once per call (not per block: Tensor::data() and numel() checks
    // cost as much as a short block's arithmetic).
    std::vector<const T*> base(x.size());
    std::vector<std::int64_t> step(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      step[i] = x[i].numel() == 1 ? 0 : 1;
      base[i] = x[i].data<T>();
    }
    const bool big = numel >= kStreamFrom;
    const bool stream_direct = big && reinterpret_cast<std::uintptr_t>(o) % 64 == 0;
    const RegProgram rp = compile_registers(prog, x.size());
    // One value repeated over a tile, for the register evaluator's inputs of one element.
    std::vector<Vec<T>> splats(x.size() * kTileVecs);
    for (std::size_t i = 0; i < x.size(); ++i)
      if (step[i] == 0)
        for (int u = 0; u < kTileVecs; ++u) splats[i * kTileVecs + static_cast<std::size_t>(u)] = Vec<T>{} + base[i][0];
    parallel_for(0, (numel + kBlock - 1) / kBlock, 64, [&](std::int64_t b0, std::int64_t b1) {
      std::vector<T> scratch;
      std::vector<const T*> ptr(x.size());
      const std::vector<std::int64_t>& stride = step;
      std::vector<Vec<T>> saved((rp.n_saved + kBlock / kTile<T>) * kTileVecs);  // saved tiles, then staging
      T* const staging = reinterpret_cast<T*>(saved.data() + rp.n_saved * kTileVecs);
      std::vector<MemOperand<T>> mem(rp.n_in + rp.n_saved);
      for (std::size_t i = 0; i < x.size(); ++i)
        mem[i] = step[i] ? MemOperand<T>{base[i], 1} : MemOperand<T>{reinterpret_cast<const T*>(&splats[i * kTileVecs]), 0};
      for (std::size_t k = 0; k < rp.n_saved; ++k)
        mem[rp.n_in + k] = MemOperand<T>{reinterpret_cast<const T*>(&saved[k * kTileVecs]), 0};
      for (std::int64_t b = b0; b < b1; ++b) {
        const std::int64_t s = b * kBlock, n = std::min(kBlock, numel - s);
        if (n == kBlock) {
          // Whole blocks: the register evaluator (streaming its results where it can, else
          // through an L1 staging block).
          if (!run_registers_best<T>(rp.code.data(), rp.code.size(), mem.data(), s, n, o + s, stream_direct)) {
            run_registers_best<T>(rp.code.data(), rp.code.size(), mem.data(), s, n, staging, false);
            stream_copy(o + s, staging, static_cast<std::size_t>(n) * sizeof(T), /*fence=*/false);
          }
          continue;
        }
        for (std::size_t i = 0; i < x.size(); ++i) ptr[i] = base[i] + (stride[i] ? s : 0);
        eval_block<T>(prog, x.size(), ptr, stride, o + s, n, scratch, big,
                      big && s + kPrefetch + kBlock <= numel ? kPrefetch : 0);
      }
      stream_fence();  // the streamed blocks of this chunk, before the join publishes them
    });
    return;
  }
  // General broadcasting: row by row over the last dim, inputs as broadcast views.
  std::vector<Tensor> v(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) v[i] = x[i].expand(shape);
  const std::int64_t last = shape.empty() ? 1 : shape.back();
  const std::int64_t rows = numel / last;
  const std::size_t nd = shape.size();
  parallel_for(0, rows, std::max<std::int64_t>(1, 4096 / last), [&](std::int64_t r0, std::int64_t r1) {
    std::vector<T> scratch;
    std::vector<const T*> ptr(v.size());
    std::vector<std::int64_t> stride(v.size());
    for (std::int64_t r = r0; r < r1; ++r) {
      for (std::size_t i = 0; i < v.size(); ++i) {
        std::int64_t off = v[i].offset(), rem = r;
        for (std::size_t d = nd - 1; d-- > 0;) {
          off += (rem % shape[d]) * v[i].strides()[d];
          rem /= shape[d];
        }
        ptr[i] = static_cast<const T*>(static_cast<const void*>(v[i].storage()->data())) + off;
        stride[i] = nd == 0 ? 0 : v[i].strides()[nd - 1];
      }
      for (std::int64_t s = 0; s < last; s += kBlock) {
        const std::int64_t n = std::min(kBlock, last - s);
        std::vector<const T*> p(ptr);
        for (std::size_t i = 0; i < p.size(); ++i) p[i] += s * stride[i];
        eval_block<T>(prog, v.size(), p, stride, o + r * last + s, n, scratch);
      }
    }
  });
}

/// Shape and dtype of a fused node: the inputs broadcast together, their promoted dtype.
void fused_types(std::span<const Shape* const> shapes, std::span<const DType> dtypes, Shape& shape, DType& dtype) {
  MLS_CHECK(!shapes.empty(), "fused_elementwise: needs at least one input");
  shape.clear();
  DType d = DType::Bool;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    shape = broadcast(shape, *shapes[i]);
    d = promote(d, dtypes[i]);
  }
  MLS_CHECK(is_floating(d), "fused_elementwise: inputs must be floating, got ", d);
  dtype = d;
}
Tensor fused_forward(Ins in, const autodiff::Attrs& attrs) {
  const std::vector<Instr> prog = decode(attrs, in.size());
  std::vector<const Shape*> shapes;
  std::vector<DType> dtypes;
  for (const Tensor& t : in) {
    shapes.push_back(&t.shape());
    dtypes.push_back(t.dtype());
  }
  Shape shape;
  DType dtype = DType::Float32;
  fused_types(shapes, dtypes, shape, dtype);
  Tensor out = Tensor::empty(shape, dtype);
  if (dtype == DType::Float32) fused_eval<float>(prog, in, dtype, out);
  else fused_eval<double>(prog, in, dtype, out);
  return out;
}
/// A program into a planned buffer: every input either elsewhere or the very elements of out.
bool program_into(const std::vector<Instr>& prog, Ins in, Tensor& out) {
  if (!out.is_contiguous() || !is_floating(out.dtype())) return false;
  Shape shape;
  for (const Tensor& t : in) {
    shape = broadcast(shape, t.shape());
    if (t.storage() == out.storage() && !(t.offset() == out.offset() && t.shape() == out.shape() && t.is_contiguous() &&
                                          t.dtype() == out.dtype()))
      return false;
  }
  if (shape != out.shape()) return false;
  if (out.dtype() == DType::Float32) fused_eval<float>(prog, in, out.dtype(), out);
  else fused_eval<double>(prog, in, out.dtype(), out);
  return true;
}
bool fused_into(Ins in, const autodiff::Attrs& attrs, Tensor& out) {
  return program_into(decode(attrs, in.size()), in, out);
}
/// Lab 2's add, sub, mul and div of two float inputs of out's dtype, into a planned buffer: a
/// program of one instruction (the same IEEE operation per element as lab 1's kernels, so the
/// same bits).
template <Op O>
bool binary_into(Ins in, const autodiff::Attrs&, Tensor& out) {
  if (in.size() != 2 || in[0].dtype() != out.dtype() || in[1].dtype() != out.dtype()) return false;
  static const std::vector<Instr> prog{Instr{O, std::nullopt, *autodiff::op_def(O).binary, 0, 1}};
  return program_into(prog, in, out);
}
void fused_infer(InNodes in, const autodiff::Attrs& attrs, Shape& shape, DType& dtype) {
  MLS_CHECK(!in.empty(), "fused_elementwise: needs at least one input");
  decode(attrs, in.size());
  std::vector<const Shape*> shapes;
  std::vector<DType> dtypes;
  for (const Node* n : in) {
    shapes.push_back(&n->shape);
    dtypes.push_back(n->dtype);
  }
  fused_types(shapes, dtypes, shape, dtype);
}
double fused_flops(const Node& n) {
  return autodiff::shape_numel(n.shape) * static_cast<double>(n.attrs.strs("code").size());
}

}  // namespace

const Op kFusedElementwise = [] {
  const Op op = autodiff::register_op(
      {.name = "fused_elementwise", .arity = -1, .differentiable = false, .forward = fused_forward,
       .infer = fused_infer, .doc = "a chain of elementwise ops in one loop (attribute code: instructions \"<op> <a> [<b>]\")",
       .flops = fused_flops});
  register_forward_into(op, fused_into);
  register_forward_into(Op::Add, binary_into<Op::Add>);
  register_forward_into(Op::Sub, binary_into<Op::Sub>);
  register_forward_into(Op::Mul, binary_into<Op::Mul>);
  register_forward_into(Op::Div, binary_into<Op::Div>);
  return op;
}();
std::string fused_instruction(Op op, std::int64_t a, std::int64_t b) {
  std::string s = autodiff::op_name(op);
  s += " " + std::to_string(a);
  if (b >= 0) s += " " + std::to_string(b);
  return s;
}

std::string fused_expression(const Node& n) {
  MLS_CHECK(n.op == kFusedElementwise, "fused_expression: node is ", autodiff::op_name(n.op), ", not fused_elementwise");
  const std::vector<Instr> prog = decode(n.attrs, n.inputs.size());
  std::vector<std::string> slot;
  for (std::size_t i = 0; i < n.inputs.size(); ++i) slot.push_back("in" + std::to_string(i));
  for (const Instr& k : prog) {
    std::string s = autodiff::op_name(k.op);
    s += "(" + slot[static_cast<std::size_t>(k.a)];
    if (k.b >= 0) s += ", " + slot[static_cast<std::size_t>(k.b)];
    s += ")";
    slot.push_back(std::move(s));
  }
  return slot.back();
}

}  // namespace mls::graph_opt
