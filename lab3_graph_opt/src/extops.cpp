// Lab 3's ops, registered with lab 2's op registry like any other op: fused elementwise loops
// (evaluated with lab 1's scalar functions, mls/tensor/scalar.hpp) and GEMM with transpose flags
// and an epilogue; a conv2d with its bias. Lab 2's executor runs them like any op. The conv2d_bias
// float32 kernel is also registered in common's conv2d registry (mls/common/kernels.hpp), so lab
// 2's float32 conv2d runs on it too: folded and unfolded programs run the same conv.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "mls/common/alloc.hpp"
#include "mls/common/kernels.hpp"
#include "mls/common/parallel.hpp"
#include "mls/graph_opt/ir.hpp"
#include "mls/tensor/scalar.hpp"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

// The register evaluator passes 64-byte vectors between inlined helpers of this file only (no
// ABI to keep), also in the baseline clone of the multiversioned loops.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace mls::graph_opt {

namespace {

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
std::vector<Instr> decode(const autodiff::Attrs& attrs, std::size_t n_inputs) {
  const auto& code = attrs.ints("code");
  MLS_CHECK(!code.empty() && code.size() % 3 == 0, "fused_elementwise: 'code' must be a non-empty list of triples, has ",
            code.size(), " entries");
  std::vector<Instr> prog;
  const auto n_in = static_cast<std::int64_t>(n_inputs);
  for (std::size_t i = 0; i < code.size(); i += 3) {
    const auto op = static_cast<Op>(code[i]);
    MLS_CHECK(code[i] >= 0 && code[i] <= 0xffff && autodiff::is_registered(op) && autodiff::op_def(op).elementwise,
              "fused_elementwise: instruction ", i / 3, " has opcode ", code[i], ", not an elementwise op");
    const autodiff::OpDef& def = autodiff::op_def(op);
    const std::int64_t limit = n_in + static_cast<std::int64_t>(i / 3);
    MLS_CHECK(code[i + 1] >= 0 && code[i + 1] < limit, "fused_elementwise: instruction ", i / 3, " reads slot ",
              code[i + 1], ", only ", limit, " defined");
    if (def.unary) {
      MLS_CHECK(code[i + 2] == -1, "fused_elementwise: unary instruction ", i / 3, " must have b = -1");
    } else {
      MLS_CHECK(code[i + 2] >= 0 && code[i + 2] < limit, "fused_elementwise: instruction ", i / 3, " reads slot ",
                code[i + 2], ", only ", limit, " defined");
    }
    prog.push_back({op, def.unary, def.binary.value_or(BinaryOp::Add), static_cast<int>(code[i + 1]),
                    static_cast<int>(code[i + 2])});
  }
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

/// 64-byte vectors (GCC/Clang vector extension): one AVX-512 register, two AVX2 ones.
template <class T>
struct VecOf;
template <>
struct VecOf<float> {
  typedef float type __attribute__((vector_size(64)));
};
template <>
struct VecOf<double> {
  typedef double type __attribute__((vector_size(64)));
};
template <class T>
using Vec = typename VecOf<T>::type;
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
            run_unary<T>(*r.instr->unary, ta, false, to, W);
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
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define MLS_FUSED_DISPATCH 1
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
/// The AVX-512 build of a loop where the CPU has AVX-512, else the AVX2 (+FMA) one, else the baseline.
template <class Fn>
Fn pick_isa(Fn avx512, Fn avx2, Fn baseline) {
  static const bool has512 = __builtin_cpu_supports("avx512f");
  static const bool has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has512 ? avx512 : has2 ? avx2 : baseline;
}
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
#ifdef MLS_FUSED_DISPATCH
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

template <class T>
Tensor fused_eval(const std::vector<Instr>& prog, std::span<const Tensor> in, DType dtype) {
  Shape shape;
  for (const Tensor& t : in) shape = broadcast(shape, t.shape());
  Tensor out = Tensor::empty(shape, dtype);
  const std::int64_t numel = out.numel();
  if (numel == 0) return out;
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
    return out;
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
  return out;
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
  if (dtype == DType::Float32) return fused_eval<float>(prog, in, dtype);
  return fused_eval<double>(prog, in, dtype);
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
  return autodiff::shape_numel(n.shape) * static_cast<double>(n.attrs.ints("code").size() / 3);
}

// ---- gemm ---------------------------------------------------------------------------------------
Shape gemm_shape(const Shape& a0, const Shape& b0, bool ta, bool tb) {
  MLS_CHECK(a0.size() >= 2 && b0.size() >= 2, "gemm: operands must be >= 2-D, got ", shape_str(a0), " and ",
            shape_str(b0));
  Shape a = a0, b = b0;
  if (ta) std::swap(a[a.size() - 1], a[a.size() - 2]);
  if (tb) std::swap(b[b.size() - 1], b[b.size() - 2]);
  const std::int64_t ka = a[a.size() - 1], kb = b[b.size() - 2];
  MLS_CHECK(ka == kb || ka < 0 || kb < 0, "gemm: inner dimensions differ: ", shape_str(a), " x ", shape_str(b));
  Shape s = broadcast(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  s.push_back(a[a.size() - 2]);
  s.push_back(b[b.size() - 1]);
  return s;
}

void gemm_infer(InNodes in, const autodiff::Attrs& attrs, Shape& shape, DType& dtype) {
  MLS_CHECK(in.size() == 2 || in.size() == 3, "gemm: expected 2 or 3 inputs, got ", in.size());
  shape = gemm_shape(in[0]->shape, in[1]->shape, attrs.i("trans_a") != 0, attrs.i("trans_b") != 0);
  dtype = promote(in[0]->dtype, in[1]->dtype);
  const std::int64_t act = attrs.i("act");
  MLS_CHECK(act >= 0 && act <= 2, "gemm: act must be 0 (none), 1 (relu) or 2 (gelu), got ", act);
  if (in.size() == 3) {
    const Shape& bs = in[2]->shape;
    std::int64_t numel = 1;
    for (std::int64_t d : bs) numel *= d;
    MLS_CHECK(numel == shape.back() && (bs.empty() || bs.back() == shape.back()), "gemm: bias ", shape_str(bs),
              " must broadcast along the last dim of ", shape_str(shape));
    MLS_CHECK(bs.size() <= shape.size(), "gemm: bias ", shape_str(bs), " has more dims than the output ", shape_str(shape));
  }
}

template <class T>
void epilogue(T* c, const T* bias, std::int64_t rows, std::int64_t n, std::int64_t act) {
  parallel_for(0, rows, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, n)), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      T* row = c + r * n;
      if (bias)
        for (std::int64_t j = 0; j < n; ++j) row[j] += bias[j];
      if (act == 1)
        for (std::int64_t j = 0; j < n; ++j) row[j] = row[j] > T(0) ? row[j] : T(0);
      else if (act == 2)
        for (std::int64_t j = 0; j < n; ++j) row[j] = scalar::gelu(row[j]);
    }
  });
}

Tensor gemm_forward(Ins in, const autodiff::Attrs& attrs) {
  MLS_CHECK(in.size() == 2 || in.size() == 3, "gemm: expected 2 or 3 inputs, got ", in.size());
  Tensor a = in[0], b = in[1];
  if (attrs.i("trans_a")) a = a.transpose(-2, -1);
  if (attrs.i("trans_b")) b = b.transpose(-2, -1);
  Tensor c = mls::matmul(a, b);
  if (!c.is_contiguous()) c = c.compact();
  const std::int64_t act = attrs.i("act");
  if (in.size() < 3 && act == 0) return c;
  const std::int64_t cols = c.shape().back(), rows = c.numel() / std::max<std::int64_t>(1, cols);
  Tensor bias;
  if (in.size() == 3) bias = in[2].to(c.dtype()).reshape({cols}).compact();
  dispatch(c.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>)
      epilogue<T>(c.data<T>(), bias.defined() ? bias.data<T>() : nullptr, rows, cols, act);
    else
      fail("gemm: the epilogue needs a floating dtype, got ", c.dtype());
  });
  return c;
}

double gemm_flops(const Node& n) {
  const Shape& a = n.inputs[0]->shape;
  const double k = static_cast<double>(std::max<std::int64_t>(1, n.attrs.i("trans_a") ? a[a.size() - 2] : a.back()));
  const double out = autodiff::shape_numel(n.shape);
  return 2 * out * k + out * static_cast<double>((n.inputs.size() == 3) + (n.attrs.i("act") != 0));
}

// ---- conv2d with bias ---------------------------------------------------------------------------
// conv2d(x, W) + bias[o] as one op: what conv + batch norm folding leaves. Float32 runs as a GEMM
// out[n] (O x L) = W (O x C*kh*kw) times the im2col columns of image n, without materialising
// the columns: a panel of kPanel output pixels' columns is packed into L2 (the im2col copy
// straight into the GEMM's B panel), then an 8-channel x 32-pixel register tile accumulates over
// the panel, starting from the bias (the epilogue costs nothing). Float64 runs lab 2's conv2d
// and adds the bias.

struct ConvShape {
  std::int64_t n, c, h, w, o, kh, kw, stride, pad, oh, ow;
  std::int64_t k() const { return c * kh * kw; }
  std::int64_t l() const { return oh * ow; }
};
ConvShape conv_shape(const Shape& x, const Shape& w, const autodiff::Attrs& a) {
  MLS_CHECK(x.size() == 4 && w.size() == 4, "conv2d_bias: x must be [N, C, H, W] and w [O, C, kh, kw], got ",
            shape_str(x), " and ", shape_str(w));
  MLS_CHECK(x[1] == w[1] || x[1] < 0, "conv2d_bias: x has ", x[1], " channels, w expects ", w[1]);
  ConvShape g{x[0], x[1], x[2], x[3], w[0], w[2], w[3], a.i("stride"), a.i("pad"), -1, -1};
  MLS_CHECK(g.stride >= 1 && g.pad >= 0 && g.kh >= 1 && g.kw >= 1, "conv2d_bias: need kernel >= 1, stride >= 1, pad >= 0, got kernel ",
            g.kh, "x", g.kw, " stride ", g.stride, " pad ", g.pad);
  if (g.h >= 0) g.oh = (g.h + 2 * g.pad - g.kh) / g.stride + 1;
  if (g.w >= 0) g.ow = (g.w + 2 * g.pad - g.kw) / g.stride + 1;
  MLS_CHECK((g.h < 0 || g.h + 2 * g.pad >= g.kh) && (g.w < 0 || g.w + 2 * g.pad >= g.kw), "conv2d_bias: kernel ", g.kh,
            "x", g.kw, " is larger than the padded input ", shape_str(x));
  return g;
}

constexpr int kConvMR = 8;                // output channels per register tile
constexpr int kConvNR = 32;               // output pixels per register tile (two 16-float vectors)
constexpr std::int64_t kPanel = 4 * kConvNR;  // output pixels per packed panel

/// Columns [p0, p0 + np) of image xn's im2col matrix as panel[k * kPanel + q] (zeros past np).
void pack_panel(const ConvShape& g, const float* xn, std::int64_t p0, std::int64_t np, float* panel) {
  const std::int64_t kk = g.kh * g.kw;
  for (std::int64_t k = 0; k < g.k(); ++k) {
    const std::int64_t c = k / kk, i = (k / g.kw) % g.kh, j = k % g.kw;
    float* row = panel + k * kPanel;
    const float* plane = xn + c * g.h * g.w;
    // ox with 0 <= ox*stride - pad + j < w: [lo, hi)
    const std::int64_t lo = std::min(g.ow, std::max<std::int64_t>(0, (g.pad - j + g.stride - 1) / g.stride));
    const std::int64_t hi = std::max(lo, std::min(g.ow, g.w + g.pad - j <= 0 ? 0 : (g.w + g.pad - j - 1) / g.stride + 1));
    for (std::int64_t q = 0; q < np;) {
      const std::int64_t p = p0 + q, oy = p / g.ow, ox0 = p % g.ow, seg = std::min(g.ow - ox0, np - q);
      const std::int64_t iy = oy * g.stride - g.pad + i;
      float* r = row + q - ox0;  // r[ox] for ox in [ox0, ox0 + seg)
      const std::int64_t a = std::clamp(lo, ox0, ox0 + seg), b = std::clamp(hi, a, ox0 + seg);
      if (iy < 0 || iy >= g.h) {
        for (std::int64_t ox = ox0; ox < ox0 + seg; ++ox) r[ox] = 0.0f;
      } else {
        const float* src = plane + iy * g.w - g.pad + j;  // src[ox * stride]
        for (std::int64_t ox = ox0; ox < a; ++ox) r[ox] = 0.0f;
        if (g.stride == 1) {
          for (std::int64_t ox = a; ox < b; ++ox) r[ox] = src[ox];
        } else {
          for (std::int64_t ox = a; ox < b; ++ox) r[ox] = src[ox * g.stride];
        }
        for (std::int64_t ox = b; ox < ox0 + seg; ++ox) r[ox] = 0.0f;
      }
      q += seg;
    }
    for (std::int64_t q = np; q < kPanel; ++q) row[q] = 0.0f;
  }
}

/// Multiply-add of the register tile: one fused instruction where the CPU has one.
struct MulAdd {
  static Vec<float> fma(Vec<float> a, Vec<float> b, Vec<float> c) { return a * b + c; }
};
#ifdef MLS_FUSED_DISPATCH
struct Fma512 {
  __attribute__((target("avx512f"))) static Vec<float> fma(Vec<float> a, Vec<float> b, Vec<float> c) {
    return reinterpret_cast<Vec<float>>(_mm512_fmadd_ps(reinterpret_cast<__m512>(a), reinterpret_cast<__m512>(b),
                                                        reinterpret_cast<__m512>(c)));
  }
};
struct Fma256 {
  __attribute__((target("avx2,fma"))) static Vec<float> fma(Vec<float> a, Vec<float> b, Vec<float> c) {
    __m256 a2[2], b2[2], c2[2];
    std::memcpy(a2, &a, 64);
    std::memcpy(b2, &b, 64);
    std::memcpy(c2, &c, 64);
    c2[0] = _mm256_fmadd_ps(a2[0], b2[0], c2[0]);
    c2[1] = _mm256_fmadd_ps(a2[1], b2[1], c2[1]);
    std::memcpy(&c, c2, 64);
    return c;
  }
};
#endif

/// Eight rows of a register tile: out rows o0.. of 32 pixels = bias + wp (8 x K, k-major) times
/// K rows of 32 columns, row k at brow(k) (a packed panel's row, or a padded image's row
/// segment). Writes `rows` rows and `cols` pixels of out (row stride ldo).
template <class F, class BRow>
inline void conv_tile(const float* wp, BRow brow, std::int64_t K, const float* bias, float* out, std::int64_t ldo,
                      int rows, std::int64_t cols) {
  using V = Vec<float>;
  V c00 = V{} + bias[0], c10 = V{} + bias[1], c20 = V{} + bias[2], c30 = V{} + bias[3];
  V c40 = V{} + bias[4], c50 = V{} + bias[5], c60 = V{} + bias[6], c70 = V{} + bias[7];
  V c01 = c00, c11 = c10, c21 = c20, c31 = c30, c41 = c40, c51 = c50, c61 = c60, c71 = c70;
  for (std::int64_t k = 0; k < K; ++k) {
    V b0, b1;
    const float* bk = brow(k);
    std::memcpy(&b0, bk, sizeof(V));
    std::memcpy(&b1, bk + 16, sizeof(V));
    const float* a = wp + k * kConvMR;
#define MLS_CONV_ROW(r)                   \
  {                                       \
    const V ar = V{} + a[r];              \
    c##r##0 = F::fma(ar, b0, c##r##0);    \
    c##r##1 = F::fma(ar, b1, c##r##1);    \
  }
    MLS_CONV_ROW(0) MLS_CONV_ROW(1) MLS_CONV_ROW(2) MLS_CONV_ROW(3)
    MLS_CONV_ROW(4) MLS_CONV_ROW(5) MLS_CONV_ROW(6) MLS_CONV_ROW(7)
#undef MLS_CONV_ROW
  }
  const V acc[kConvMR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},
                             {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71}};
  for (int r = 0; r < rows; ++r) {
    float* o = out + r * ldo;
    if (cols == kConvNR) {
      std::memcpy(o, &acc[r][0], sizeof(V));
      std::memcpy(o + 16, &acc[r][1], sizeof(V));
    } else {
      alignas(64) float t[kConvNR];
      std::memcpy(t, &acc[r][0], sizeof(V));
      std::memcpy(t + 16, &acc[r][1], sizeof(V));
      std::memcpy(o, t, static_cast<std::size_t>(cols) * sizeof(float));
    }
  }
}

/// Stride 1: output row oy of image n straight from its zero-padded copy xp ([C, hp, wp]):
/// the im2col row of k = (c, i, j) for pixels ox0.. is xp[c, oy + i, ox0 + j ..], so nothing
/// is packed.
template <class F>
inline void conv_row_direct(const ConvShape& g, const float* wpk, const float* bias, const float* xp, std::int64_t hp,
                            std::int64_t wpad, float* out_n, std::int64_t oy) {
  const std::int64_t K = g.k(), L = g.l(), kk = g.kh * g.kw;
  for (std::int64_t ob = 0; ob * kConvMR < g.o; ++ob) {
    const int rows = static_cast<int>(std::min<std::int64_t>(kConvMR, g.o - ob * kConvMR));
    for (std::int64_t ox0 = 0; ox0 < g.ow; ox0 += kConvNR) {
      const float* base = xp + oy * wpad + ox0;
      auto brow = [&](std::int64_t k) {
        const std::int64_t c = k / kk, r = k - c * kk, i = r / g.kw, j = r - i * g.kw;
        return base + (c * hp + i) * wpad + j;
      };
      conv_tile<F>(wpk + ob * kConvMR * K, brow, K, bias + ob * kConvMR, out_n + ob * kConvMR * L + oy * g.ow + ox0, L,
                   rows, std::min<std::int64_t>(kConvNR, g.ow - ox0));
    }
  }
}

/// One packed panel of image n: every 8-channel block times every 32-pixel tile.
template <class F>
inline void conv_panel(const ConvShape& g, const float* wp, const float* bias, const float* panel, float* out_n,
                       std::int64_t p0, std::int64_t np) {
  const std::int64_t K = g.k(), L = g.l();
  for (std::int64_t ob = 0; ob * kConvMR < g.o; ++ob) {
    const int rows = static_cast<int>(std::min<std::int64_t>(kConvMR, g.o - ob * kConvMR));
    for (std::int64_t q = 0; q < np; q += kConvNR)
      conv_tile<F>(wp + ob * kConvMR * K, [&](std::int64_t k) { return panel + q + k * kPanel; }, K, bias + ob * kConvMR,
                   out_n + ob * kConvMR * L + p0 + q, L, rows, std::min<std::int64_t>(kConvNR, np - q));
  }
}

/// One call of the conv kernels: output row `a` of an image from its padded copy (`direct`,
/// stride 1), or the packed panel `src` of pixels [a, a + b).
struct ConvJob {
  const ConvShape* g;
  const float *wp, *bias, *src;
  std::int64_t hp, wpad;
  float* out_n;
  std::int64_t a, b;
  bool direct;
};
template <class F>
inline void conv_job(const ConvJob& j) {
  if (j.direct) conv_row_direct<F>(*j.g, j.wp, j.bias, j.src, j.hp, j.wpad, j.out_n, j.a);
  else conv_panel<F>(*j.g, j.wp, j.bias, j.src, j.out_n, j.a, j.b);
}
__attribute__((flatten)) void conv_job_baseline(const ConvJob& j) { conv_job<MulAdd>(j); }
#ifdef MLS_FUSED_DISPATCH
__attribute__((target("avx512f"), flatten)) void conv_job_avx512(const ConvJob& j) { conv_job<Fma512>(j); }
__attribute__((target("avx2,fma"), flatten)) void conv_job_avx2(const ConvJob& j) { conv_job<Fma256>(j); }
#endif
using ConvJobFn = void (*)(const ConvJob&);
ConvJobFn best_conv_job() {
#ifdef MLS_FUSED_DISPATCH
  return pick_isa<ConvJobFn>(conv_job_avx512, conv_job_avx2, conv_job_baseline);
#else
  return conv_job_baseline;
#endif
}

/// The float32 kernel on compact arrays: y = conv2d(x, w) + bias, or plain conv2d(x, w) when
/// `b` is null (a zero bias, bit for bit). Registered in common's conv2d registry (`Conv2dFn`),
/// where lab 2's float32 conv2d finds it; needs a non-empty problem (`kernel_covers`).
void conv2d_f32(const Conv2dProblem& p, const float* xd, const float* wd, const float* b, float* od) {
  const ConvShape g{p.n, p.c, p.h, p.w, p.o, p.kh, p.kw, p.stride, p.pad, p.oh, p.ow};
  const std::int64_t K = g.k(), L = g.l(), blocks = (g.o + kConvMR - 1) / kConvMR;
  // Weights as [O/8][K][8] (the 8 values one k multiplies are adjacent), bias padded to 8s.
  std::vector<float> wp(static_cast<std::size_t>(blocks * kConvMR * K), 0.0f), bias(static_cast<std::size_t>(blocks * kConvMR), 0.0f);
  for (std::int64_t o = 0; o < g.o; ++o) {
    if (b) bias[static_cast<std::size_t>(o)] = b[o];
    for (std::int64_t k = 0; k < K; ++k)
      wp[static_cast<std::size_t>(((o / kConvMR) * K + k) * kConvMR + o % kConvMR)] = wd[o * K + k];
  }
  if (g.stride == 1) {
    // Zero-padded copies of the images, each row long enough for whole 32-pixel tiles.
    const std::int64_t hp = g.h + 2 * g.pad, wpad = std::max(g.w + 2 * g.pad, (g.ow + kConvNR - 1) / kConvNR * kConvNR + g.kw - 1);
    Tensor padded = Tensor::zeros({g.n, g.c, hp, wpad}, DType::Float32);
    float* pd = padded.data<float>();
    parallel_for(0, g.n * g.c, 4, [&](std::int64_t p0, std::int64_t p1) {
      for (std::int64_t p = p0; p < p1; ++p)
        for (std::int64_t y = 0; y < g.h; ++y)
          std::memcpy(pd + (p * hp + y + g.pad) * wpad + g.pad, xd + (p * g.h + y) * g.w, static_cast<std::size_t>(g.w) * sizeof(float));
    });
    const ConvJobFn job = best_conv_job();
    parallel_for(0, g.n * g.oh, 2, [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) {
        const std::int64_t n = t / g.oh, oy = t % g.oh;
        job({&g, wp.data(), bias.data(), pd + n * g.c * hp * wpad, hp, wpad, od + n * g.o * L, oy, 0, true});
      }
    });
    return;
  }
  const ConvJobFn job = best_conv_job();
  const std::int64_t panels = (L + kPanel - 1) / kPanel;
  parallel_for(0, g.n * panels, 1, [&](std::int64_t t0, std::int64_t t1) {
    std::vector<Vec<float>> buf(static_cast<std::size_t>(K * kPanel / 16));
    float* panel = reinterpret_cast<float*>(buf.data());
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t n = t / panels, p0 = (t % panels) * kPanel, np = std::min(kPanel, L - p0);
      pack_panel(g, xd + n * g.c * g.h * g.w, p0, np, panel);
      job({&g, wp.data(), bias.data(), panel, 0, 0, od + n * g.o * L, p0, np, false});
    }
  });
}
/// conv2d_bias's float32 forward: the kernel on float32 copies of x, w and the bias.
Tensor conv_bias_f32(const Tensor& x0, const Tensor& w0, const Tensor& b0, const ConvShape& g) {
  const Tensor x = x0.to(DType::Float32).compact(), w = w0.to(DType::Float32).compact();
  const Tensor b = b0.to(DType::Float32).reshape({g.o}).compact();
  Tensor out = Tensor::empty({g.n, g.o, g.oh, g.ow}, DType::Float32);
  conv2d_f32({g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.stride, g.pad, g.oh, g.ow}, x.data<float>(), w.data<float>(),
             b.data<float>(), out.data<float>());
  return out;
}

/// Shapes the float32 kernel handles (nothing empty); the rest take lab 2's conv2d.
bool kernel_covers(const ConvShape& g) { return g.k() > 0 && g.l() > 0 && g.n > 0 && g.o > 0; }

void conv_bias_infer(InNodes in, const autodiff::Attrs& attrs, Shape& shape, DType& dtype) {
  MLS_CHECK(in.size() == 3, "conv2d_bias: expected 3 inputs (x, w, bias), got ", in.size());
  const ConvShape g = conv_shape(in[0]->shape, in[1]->shape, attrs);
  std::int64_t numel = 1;
  for (std::int64_t d : in[2]->shape) numel *= d;
  MLS_CHECK(numel == g.o, "conv2d_bias: bias ", shape_str(in[2]->shape), " must have one value per output channel (",
            g.o, ")");
  shape = {g.n, g.o, g.oh, g.ow};
  dtype = promote(promote(in[0]->dtype, in[1]->dtype), in[2]->dtype);
  MLS_CHECK(is_floating(dtype), "conv2d_bias: inputs must be floating, got ", dtype);
}
Tensor conv_bias_forward(Ins in, const autodiff::Attrs& attrs) {
  MLS_CHECK(in.size() == 3, "conv2d_bias: expected 3 inputs (x, w, bias), got ", in.size());
  const ConvShape g = conv_shape(in[0].shape(), in[1].shape(), attrs);
  MLS_CHECK(in[2].numel() == g.o, "conv2d_bias: bias ", shape_str(in[2].shape()),
            " must have one value per output channel (", g.o, ")");
  const DType dt = promote(promote(in[0].dtype(), in[1].dtype()), in[2].dtype());
  if (dt == DType::Float32 && kernel_covers(g)) return conv_bias_f32(in[0], in[1], in[2], g);
  // Other dtypes: lab 2's conv2d, then the bias.
  const Tensor ins[2] = {in[0].to(dt), in[1].to(dt)};
  const Tensor y = autodiff::op_def(Op::Conv2d).forward(std::span<const Tensor>(ins, 2), attrs);
  return (y + in[2].to(dt).reshape({1, g.o, 1, 1})).compact();
}
double conv_bias_flops(const Node& n) {
  const Shape& w = n.inputs[1]->shape;
  return autodiff::shape_numel(n.shape) * (2.0 * static_cast<double>(w[1] * w[2] * w[3]) + 1.0);
}

}  // namespace

const Op kFusedElementwise = autodiff::register_op(
    {.name = "fused_elementwise", .arity = -1, .differentiable = false, .forward = fused_forward,
     .infer = fused_infer, .doc = "a chain of elementwise ops in one loop (attribute code: [opcode, a, b] triples)",
     .flops = fused_flops});
const Op kConvBias = autodiff::register_op(
    {.name = "conv2d_bias", .arity = 3, .differentiable = false, .forward = conv_bias_forward, .infer = conv_bias_infer,
     .doc = "conv2d(x, w) + bias per output channel in one pass (attributes stride, pad; what conv+BN folding leaves)",
     .flops = conv_bias_flops});
/// Lab 2's float32 conv2d runs on conv2d_bias's kernel (no bias) in every program linked with
/// lab 3: registered here, next to the op, and CMake keeps this object in every such program
/// (the linker option -u mls_graph_opt_conv2d_registered, see lab3_graph_opt/CMakeLists.txt).
extern "C" {
[[maybe_unused]] extern const bool mls_graph_opt_conv2d_registered;
const bool mls_graph_opt_conv2d_registered =
    (mls::register_conv2d({"lab3_conv2d_bias", &conv2d_f32, 100,
                           "lab 3's conv2d_bias kernel (im2col packed into the GEMM panels, 8x32 register tiles)"}),
     true);
}
const Op kGemm = autodiff::register_op(
    {.name = "gemm", .arity = -1, .differentiable = false, .forward = gemm_forward, .infer = gemm_infer,
     .doc = "matmul(op_a(A), op_b(B)) [+ bias] [then relu/gelu] in one pass", .flops = gemm_flops});

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
