// Code generation meets the JIT: intrinsic sources (the plain loops of each pattern, the
// register-blocked gemm micro-kernel), compiling generated units, and running compiled kernels.
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "codegen_internal.hpp"
#include "mls/common/error.hpp"
#include "mls/common/file.hpp"
#include "mls/common/parallel.hpp"

namespace mls::kernels::te {

int resolved_vector_lanes(const CodegenOptions& options) {
  const int l = options.vector_lanes;
  MLS_CHECK(l == 0 || l == 1 || l == 4 || l == 8 || l == 16, "generate_cpp: vector_lanes ", l,
            " is not 0 (from the CPU), 1 (no SIMD), 4, 8 or 16");
  if (l != 0) return l;
  const jit::CpuInfo& cpu = jit::cpu_info();
  return cpu.avx512f ? 16 : cpu.avx2 ? 8 : 4;
}

// ---- intrinsic sources ---------------------------------------------------------------------------

namespace {
/// The plain loops of a pattern, in the order of te_ir.cpp's reference functions.
/// `c_last`: the order of the prefetch_c kernel's reference (products summed from zero, then added).
std::string pattern_source(const Intrinsic& in, CallPart part, bool c_last = false) {
  if (in.pattern == IntrinsicPattern::Gemm && part == CallPart::Update)
    // A tile of few outputs (a narrow edge's): one accumulator per output and k outside, so the
    // outputs' FMAs overlap instead of each waiting for the one before it (one FMA's latency per
    // k); the same sums in the same order as the loops after it.
    return std::string("if (extents[0] * extents[1] <= 48) {\n"
                       "    float acc[48];\n"
                       "    for (std::int64_t i = 0; i < extents[0]; ++i)\n"
                       "        for (std::int64_t j = 0; j < extents[1]; ++j)\n") +
           (c_last ? "            acc[i * extents[1] + j] = 0.0f;\n"
                   : "            acc[i * extents[1] + j] = ptrs[0][i * strides[0] + j * strides[1]];\n") +
           "    for (std::int64_t k = 0; k < extents[2]; ++k)\n"
           "#pragma GCC unroll 48\n"
           "        for (std::int64_t i = 0; i < extents[0]; ++i)\n"
           "#pragma GCC unroll 48\n"
           "            for (std::int64_t j = 0; j < extents[1]; ++j)\n"
           "                acc[i * extents[1] + j] += ptrs[1][i * strides[3] + j * strides[4] + k * strides[5]] *\n"
           "                                           ptrs[2][i * strides[6] + j * strides[7] + k * strides[8]];\n"
           "    for (std::int64_t i = 0; i < extents[0]; ++i)\n"
           "        for (std::int64_t j = 0; j < extents[1]; ++j)\n" +
           (c_last ? "            ptrs[0][i * strides[0] + j * strides[1]] = ptrs[0][i * strides[0] + j * strides[1]] + acc[i * extents[1] + j];\n"
                   : "            ptrs[0][i * strides[0] + j * strides[1]] = acc[i * extents[1] + j];\n") +
           "    return;\n"
           "}\n"
           "for (std::int64_t i = 0; i < extents[0]; ++i) {\n"
           "    for (std::int64_t j = 0; j < extents[1]; ++j) {\n"
           "        float* const out = ptrs[0] + i * strides[0] + j * strides[1];\n" +
           (c_last ? "        float acc = 0.0f;\n" : "        float acc = *out;\n") +
           "        for (std::int64_t k = 0; k < extents[2]; ++k)\n"
           "            acc += ptrs[1][i * strides[3] + j * strides[4] + k * strides[5]] *\n"
           "                   ptrs[2][i * strides[6] + j * strides[7] + k * strides[8]];\n" +
           (c_last ? "        *out = *out + acc;\n" : "        *out = acc;\n") +
           "    }\n"
           "}\n";
  if (in.pattern == IntrinsicPattern::Gemm)
    return "for (std::int64_t i = 0; i < extents[0]; ++i)\n"
           "    for (std::int64_t j = 0; j < extents[1]; ++j) ptrs[0][i * strides[0] + j * strides[1]] = 0.0f;\n";
  MLS_CHECK(part == CallPart::Update, "intrinsic_source: copy intrinsic '", in.name, "' has no reset");
  const std::size_t r = in.tile.size();
  MLS_CHECK(r >= 1 && r <= 4, "intrinsic_source: copy intrinsic '", in.name, "' has ", r, " tile axes, expected 1 to 4");
  std::string s, dst, src;
  for (std::size_t t = 0; t < r; ++t) {
    const std::string i = "t" + std::to_string(t);
    s += std::string(4 * t, ' ') + "for (std::int64_t " + i + " = 0; " + i + " < extents[" + std::to_string(t) +
         "]; ++" + i + ")\n";
    dst += (t ? " + " : "") + i + " * strides[" + std::to_string(t) + "]";
    src += (t ? " + " : "") + i + " * strides[" + std::to_string(r + t) + "]";
  }
  return s + std::string(4 * r, ' ') + "ptrs[0][" + dst + "] = ptrs[1][" + src + "];\n";
}
}  // namespace

std::string intrinsic_source(const Intrinsic& in, CallPart part) {
  const std::string& own = part == CallPart::Update ? in.update_source : in.reset_source;
  return own.empty() ? pattern_source(in, part) : own;
}

namespace {
/// The reference of the prefetch_c kernel, in its order: each output's products summed from zero
/// over k, then added to the output (the interpreter's result equals the compiled one bit for bit).
void gemm_update_c_last(float* const* p, const std::int64_t* s, const std::int64_t* e) {
  for (std::int64_t i = 0; i < e[0]; ++i)
    for (std::int64_t j = 0; j < e[1]; ++j) {
      float acc = 0.0f;
      for (std::int64_t k = 0; k < e[2]; ++k)
        acc += p[1][i * s[3] + j * s[4] + k * s[5]] * p[2][i * s[6] + j * s[7] + k * s[8]];
      float& out = p[0][i * s[0] + j * s[1]];
      out = out + acc;
    }
}
}  // namespace

Intrinsic gemm_regblock_intrinsic(std::int64_t mr, std::int64_t nr, std::int64_t k, int lanes, bool prefetch_c) {
  if (lanes == 0) lanes = resolved_vector_lanes({});
  MLS_CHECK(lanes == 4 || lanes == 8 || lanes == 16, "gemm_regblock_intrinsic: lanes ", lanes, " is not 4, 8 or 16");
  MLS_CHECK(mr >= 1 && k >= 1 && nr >= lanes && nr % lanes == 0, "gemm_regblock_intrinsic: tile ", mr, "x", nr, "x",
            k, " needs mr, k >= 1 and nr a positive multiple of ", lanes, " lanes");
  Intrinsic in = gemm_intrinsic(mr, nr, k, "gemm" + std::to_string(mr) + "x" + std::to_string(nr) + "x" +
                                               std::to_string(k) + "_regblock" + (prefetch_c ? "_pc" : ""));
  if (prefetch_c) in.update = gemm_update_c_last;
  const std::string L = std::to_string(lanes), MR = std::to_string(mr), NV = std::to_string(nr / lanes),
                    K = std::to_string(k);
  // The tile of C: read before the k loop (the accumulators start from it), or, with prefetch_c,
  // prefetched before it with the tile mr rows below (the accumulators start at zero: the k loop
  // never waits for C) and added after it. A prefetch never faults: past the output's end it is a
  // no-op.
  const std::string row = "out + i * strides[0] + v * " + L;
  const std::string c_first =
      prefetch_c ? "    // The tile of C, and the one " + MR + " rows below (the next call's where the row panels are\n"
                   "    // the inner loop), are fetched while the k loop runs; the accumulators start at zero.\n"
                   "#pragma GCC unroll " + MR + "\n"
                   "    for (int i = 0; i < " + MR + "; ++i)\n"
                   "#pragma GCC unroll " + NV + "\n"
                   "        for (int v = 0; v < " + NV + "; ++v) {\n"
                   "            __builtin_prefetch(" + row + ", 1);\n"
                   "            __builtin_prefetch(" + row + " + " + MR + " * strides[0], 1);\n"
                   "            acc[i][v] = vec{};\n"
                   "        }\n"
                 : "#pragma GCC unroll " + MR + "\n"
                   "    for (int i = 0; i < " + MR + "; ++i)\n"
                   "#pragma GCC unroll " + NV + "\n"
                   "        for (int v = 0; v < " + NV + "; ++v) __builtin_memcpy(&acc[i][v], " + row + ", sizeof(vec));\n";
  const std::string c_last = prefetch_c ? "            vec c;\n"
                                          "            __builtin_memcpy(&c, " + row + ", sizeof(vec));\n"
                                          "            acc[i][v] = c + acc[i][v];\n"
                                        : "";
  in.update_source =
      "// An " + MR + " x " + std::to_string(nr) + " block of the output in " + MR + " x " + NV +
      " vector registers for the whole k loop; per k, " + NV + " loads of b's row (and prefetches 8 rows ahead) and " + MR +
      " broadcasts of a.\n"
      "typedef float vec __attribute__((vector_size(" + std::to_string(4 * lanes) + ")));\n"
      "if (strides[1] == 1 && strides[7] == 1 && strides[2] == 0 && strides[4] == 0 && strides[6] == 0) {\n"
      "    float* const out = ptrs[0];\n"
      "    const float* const a = ptrs[1];\n"
      "    const float* const b = ptrs[2];\n"
      "    vec acc[" + MR + "][" + NV + "];\n" + c_first +
      "    for (std::int64_t k = 0; k < " + K + "; ++k) {\n"
      "        // b's row 8 ahead, as lab4_packed's micro-kernel: a row of a packed block is read once per call.\n"
      "#pragma GCC unroll " + NV + "\n"
      "        for (int v = 0; v < " + NV + "; ++v) __builtin_prefetch(b + (k + 8) * strides[8] + v * " + L + ");\n"
      "        vec bk[" + NV + "];\n"
      "#pragma GCC unroll " + NV + "\n"
      "        for (int v = 0; v < " + NV + "; ++v) __builtin_memcpy(&bk[v], b + k * strides[8] + v * " + L +
      ", sizeof(vec));\n"
      "#pragma GCC unroll " + MR + "\n"
      "        for (int i = 0; i < " + MR + "; ++i) {\n"
      "            const float aik = a[i * strides[3] + k * strides[5]];\n"
      "#pragma GCC unroll " + NV + "\n"
      "            for (int v = 0; v < " + NV + "; ++v) acc[i][v] += aik * bk[v];\n"
      "        }\n"
      "    }\n"
      "#pragma GCC unroll " + MR + "\n"
      "    for (int i = 0; i < " + MR + "; ++i)\n"
      "#pragma GCC unroll " + NV + "\n"
      "        for (int v = 0; v < " + NV + "; ++v) {\n" + c_last +
      "            __builtin_memcpy(out + i * strides[0] + v * " + L + ", &acc[i][v], sizeof(vec));\n"
      "        }\n"
      "    return;\n"
      "}\n"
      "// Any other layout: the plain loops.\n" +
      pattern_source(in, CallPart::Update, prefetch_c);
  return in;
}

// ---- running compiled kernels --------------------------------------------------------------------

void pool_parallel_for(void*, std::int64_t n, RangeBodyFn body, void* ctx) {
  mls::parallel_for(0, n, 1, [&](std::int64_t b, std::int64_t e) { body(ctx, b, e); });
}

void JitKernel::run(std::span<const std::span<float>> args, int threads) const {
  MLS_CHECK(fn_, "JitKernel::run: the kernel is empty (default-constructed, not compiled)");
  const auto& fa = func_.args;
  std::string names;
  for (std::size_t i = 0; i < fa.size(); ++i) names += (i ? ", " : "") + fa[i]->name;
  MLS_CHECK(args.size() == fa.size(), "JitKernel::run: '", func_.name, "' takes ", fa.size(), " buffers (", names,
            "), got ", args.size());
  MLS_CHECK(threads >= 0, "JitKernel::run: threads ", threads, " must be >= 0 (0: mls::num_threads())");
  std::vector<float*> ptrs;
  for (std::size_t i = 0; i < fa.size(); ++i) {
    const std::int64_t n = buffer_span(*fa[i]);
    MLS_CHECK(static_cast<std::int64_t>(args[i].size()) == n, "JitKernel::run: buffer '", fa[i]->name, "' of '",
              func_.name, "' has ", args[i].size(), " floats, its shape ", detail::layout_text(*fa[i]), " needs ", n);
    for (std::size_t j = 0; j < i; ++j) {
      const float *a = args[i].data(), *b = args[j].data();
      MLS_CHECK(a + args[i].size() <= b || b + args[j].size() <= a, "JitKernel::run: buffers '", fa[j]->name, "' and '",
                fa[i]->name, "' of '", func_.name, "' overlap (the generated code needs distinct arrays)");
    }
    ptrs.push_back(args[i].data());
  }
  if (threads == 1) return fn_(ptrs.data(), nullptr, nullptr);
  std::optional<ThreadCountGuard> guard;
  if (threads > 1) guard.emplace(threads);
  fn_(ptrs.data(), &pool_parallel_for, nullptr);
}

void JitKernel::run(const Bindings& buffers, int threads) const {
  MLS_CHECK(fn_, "JitKernel::run: the kernel is empty (default-constructed, not compiled)");
  std::vector<std::span<float>> spans;
  for (const auto& a : func_.args) {
    const std::span<float>* s = buffers.find(a.get());
    MLS_CHECK(s, "JitKernel::run: argument '", a->name, "' of '", func_.name, "' is not bound");
    spans.push_back(*s);
  }
  run(spans, threads);
}

// ---- compiling -----------------------------------------------------------------------------------

std::vector<JitKernel> compile_all(std::span<const LoweredFunc> fs, const CodegenOptions& options,
                                   const jit::CompileOptions& jit_options) {
  const std::string source = generate_cpp(fs, options);
  if (const char* dir = std::getenv("MLS_CODEGEN_DUMP"); dir && *dir) {
    std::filesystem::create_directories(dir);
    std::string name = c_identifier(fs.front().name);
    if (fs.size() > 1) name += "_and_" + std::to_string(fs.size() - 1) + "_more";
    write_file_atomic(std::filesystem::path(dir) / (name + ".cpp"), source, "MLS_CODEGEN_DUMP");
  }
  const jit::LoadedModule module = jit::compile_shared(source, jit_options);
  std::vector<JitKernel> out;
  for (const auto& f : fs) out.emplace_back(f, source, module, module.symbol<KernelFn>(c_identifier(f.name)));
  return out;
}

JitKernel compile(const LoweredFunc& f, const CodegenOptions& options, const jit::CompileOptions& jit_options) {
  return compile_all(std::span<const LoweredFunc>(&f, 1), options, jit_options).front();
}

JitKernel compile(const Schedule& s, const std::string& name, const CodegenOptions& options,
                  const jit::CompileOptions& jit_options) {
  return compile(lower(s, name), options, jit_options);
}

void run_jit(const LoweredFunc& f, const Bindings& buffers, int threads, const CodegenOptions& options,
             const jit::CompileOptions& jit_options) {
  compile(f, options, jit_options).run(buffers, threads);
}

}  // namespace mls::kernels::te
