// Lab 4: the warptile rung's kernel itself (src/sgemm_warptile.cuh, the code src/kernels_cuda.cu
// launches) compiled as C++ behind the CUDA emulator's prelude (tests/cuda_emulator.hpp: a std::thread
// per CUDA thread, __syncthreads() a barrier, one block at a time) and run, with no GPU, for every block
// tile the rung runs (warptile_layout::kShapes), with float4 loads (kVec) and without, on awkward sizes
// (tails of every tile, several K slices, a partial last slice) against a naive product. Small
// integers make every sum exact, so the comparison is an equality.
#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_emulator.hpp"
#include "mls/common/error.hpp"
#include "mls/common/rng.hpp"
#include "warptile_layout.hpp"

namespace W = mls::kernels::cuda::warptile_layout;
using kernels_test::compile_emulated;
using kernels_test::launch_emulated;

namespace {
std::string read_source(const std::string& name) {
  const std::string path = std::string(MLS_LAB4_SRC_DIR) + "/" + name;
  std::ifstream in(path);
  MLS_CHECK(in.good(), "test_warptile_emulated: cannot read ", path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// `text` without its first line `line` (which must be there).
std::string drop(std::string text, const std::string& line) {
  const auto at = text.find(line + "\n");
  REQUIRE(at != std::string::npos);
  return text.erase(at, line.size() + 1);
}

/// The kernel's source as one unit: warptile_layout.hpp, then sgemm_warptile.cuh without its
/// #include of it (the JIT's cache is keyed by the text, so the text holds all of it), neither with
/// its #pragma once.
std::string kernel_source() {
  return drop(read_source("warptile_layout.hpp"), "#pragma once") + "\n" +
         drop(drop(read_source("sgemm_warptile.cuh"), "#pragma once"), "#include \"warptile_layout.hpp\"");
}
}  // namespace

TEST_CASE("warptile kernel, emulated on the CPU: every block tile, float4 and scalar loads, awkward sizes",
          "[lab4][warptile][emulated]") {
  const std::string source = kernel_source();
  // M, N, K: 1; primes (tails everywhere, scalar loads); several 16-deep K slices with a partial last
  // one and partial block tiles (multiples of 4: the float4 loads too); whole tiles.
  const std::array<int, 3> sizes[] = {{1, 1, 1}, {7, 5, 3}, {31, 33, 17}, {130, 136, 40}, {64, 128, 32}, {129, 68, 20}};
  for (const W::Shape& sh : W::kShapes) {
    for (const bool vec : {false, true}) {
      const std::string tmpl = "mls::kernels::cuda::sgemm_warptile<" + std::to_string(sh.bm) + ", " + std::to_string(sh.bn) +
                               ", " + std::to_string(W::kBK) + ", " + std::to_string(sh.wm) + ", " + std::to_string(sh.wn) +
                               ", " + std::to_string(W::kTM) + ", " + std::to_string(W::kTN) + ", " + (vec ? "true" : "false") + ">";
      // p[3]: M, N, K, alpha, beta
      const std::string wrapper = "extern \"C\" void mls_emu_warptile(float* const* p) {\n  " + tmpl +
                                  "(int(p[3][0]), int(p[3][1]), int(p[3][2]), p[3][3], p[0], p[1], p[3][4], p[2]);\n}\n";
      const auto module = compile_emulated(source, wrapper);
      std::uint64_t seed = 1;
      for (const auto& s : sizes) {
        const int M = s[0], N = s[1], K = s[2];
        if (vec && (N % 4 != 0 || K % 4 != 0)) continue;  // the launcher's condition for kVec
        for (const auto [alpha, beta] : {std::array<float, 2>{1.0f, 0.0f}, {1.5f, -0.5f}}) {
          INFO(tmpl << " M=" << M << " N=" << N << " K=" << K << " alpha=" << alpha << " beta=" << beta);
          mls::Rng rng(seed++, "warptile_emulated");
          auto small = [&] { return static_cast<float>(static_cast<int>(rng.uniform(0.0, 7.0)) - 3); };
          std::vector<float> a(static_cast<std::size_t>(M) * K), b(static_cast<std::size_t>(K) * N),
              c(static_cast<std::size_t>(M) * N);
          for (auto& x : a) x = small();
          for (auto& x : b) x = small();
          for (auto& x : c) x = small();
          std::vector<float> want = c;
          for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j) {
              double acc = 0;
              for (int k = 0; k < K; ++k) acc += double(a[i * K + k]) * b[k * N + j];
              want[i * N + j] = static_cast<float>(alpha * acc + (beta == 0.0f ? 0.0 : beta * double(c[i * N + j])));
            }
          std::vector<float> scalars{float(M), float(N), float(K), alpha, beta};
          float* params[4] = {a.data(), b.data(), c.data(), scalars.data()};
          launch_emulated(module, "mls_emu_warptile", params, {(N + sh.bn - 1) / sh.bn, (M + sh.bm - 1) / sh.bm, 1},
                          {128, 1, 1});
          long bad = 0;
          for (std::size_t i = 0; i < c.size(); ++i)
            if (c[i] != want[i] && bad++ < 3)
              UNSCOPED_INFO("C[" << i / N << "][" << i % N << "] = " << c[i] << ", expected " << want[i]);
          CHECK(bad == 0);
        }
      }
    }
  }
}
