#pragma once
// Helpers of the code-generation tests: JIT options (a cache folder of the test process's own,
// exact float semantics) and running a compiled kernel like te_check.hpp's run_lowered.
#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "mls/kernels/codegen.hpp"
#include "mls/testing.hpp"
#include "te_check.hpp"

namespace kernels_test {

/// Compile options for the tests: -Werror (the default), a cache folder in this process's
/// temporary folder (never the user's), and, when `exact`, -ffp-contract=off so the compiled code
/// does the interpreter's float operations bit for bit (no fused multiply-add).
inline mls::kernels::jit::CompileOptions codegen_jit_options(bool exact = true, const std::string& opt = "-O2") {
  mls::kernels::jit::CompileOptions o;
  o.cache_dir = mls::testing::temp_path("jit-cache");
  o.opt_level = opt;
  if (exact) o.extra_flags = {"-ffp-contract=off"};
  return o;
}

/// The outputs of compiled kernel `k` run on `in` at `threads` (outputs start as NaN: every
/// element must be written).
inline std::vector<std::vector<float>> run_compiled(const te::JitKernel& k, const std::vector<te::Tensor>& inputs,
                                                    std::vector<std::vector<float>> in,
                                                    const std::vector<te::Tensor>& outputs, int threads = 1) {
  std::vector<std::vector<float>> out;
  for (const auto& t : outputs) out.emplace_back(numel(t), std::numeric_limits<float>::quiet_NaN());
  te::Bindings b;
  for (std::size_t i = 0; i < inputs.size(); ++i) b.bind(inputs[i], in[i]);
  for (std::size_t i = 0; i < outputs.size(); ++i) b.bind(outputs[i], out[i]);
  k.run(b, threads);
  return out;
}

/// Bit-for-bit equality of two float arrays (NaN equal to NaN), naming the first difference.
inline void require_identical(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) continue;
    INFO(what << " element " << i << ": got " << got[i] << ", want " << want[i]);
    REQUIRE(std::memcmp(&got[i], &want[i], sizeof(float)) == 0);
  }
}

}  // namespace kernels_test
