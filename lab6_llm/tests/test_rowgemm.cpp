// Lab 6: the decode GEMM (rowgemm.hpp, given): packed and on-the-fly equal to the bit, close to a
// float64 reference, and every row's bits independent of the batch and of the threads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "mls/common/parallel.hpp"
#include "mls/llm/engine.hpp"
#include "mls/llm/rowgemm.hpp"
#include "mls/testing.hpp"
#include "util.hpp"

using namespace mls;
using namespace mls::llm;
using namespace llm_test;
using mls::testing::require_error;

namespace {

std::vector<float> randn(Rng& rng, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}

bool same_bits(const float* a, const float* b, std::int64_t n) {
  return std::memcmp(a, b, sizeof(float) * static_cast<std::size_t>(n)) == 0;
}

}  // namespace

TEST_CASE("decode GEMM: packed and on-the-fly agree bit for bit, equal a float64 reference, each "
          "row's bits do not depend on the batch or the threads, AddTo adds the result",
          "[lab6][plumbing][rowgemm]") {
  Rng rng(31, "rowgemm");
  for (int trial = 0; trial < 24; ++trial) {
    const std::int64_t N = rng.randint(1, 21), C = rng.randint(1, 90), OC = rng.randint(1, 110);
    const bool with_bias = trial % 3 != 0;
    const auto x = randn(rng, N * C), w = randn(rng, OC * C), b = randn(rng, OC);
    const float* bias = with_bias ? b.data() : nullptr;
    const PackedMatrix pk = pack_matrix(w.data(), OC, C);
    std::vector<float> packed(static_cast<std::size_t>(N * OC)), fly(packed.size()), one(static_cast<std::size_t>(OC)),
        serial(packed.size());
    matmul_packed_forward(packed.data(), x.data(), pk, bias, N);
    matmul_rows_forward(fly.data(), x.data(), w.data(), bias, N, C, OC);
    {
      IntraOpBudget single(1);
      matmul_packed_forward(serial.data(), x.data(), pk, bias, N);
    }
    mls::testing::observe("decode GEMM (" + std::to_string(N) + ", " + std::to_string(C) + ") x (" +
                              std::to_string(C) + ", " + std::to_string(OC) + ")",
                          packed);
    CHECK(same_bits(packed.data(), fly.data(), N * OC));
    CHECK(same_bits(packed.data(), serial.data(), N * OC));
    // the AddTo epilogue (the residual add): out + the Store result, element by element
    {
      const auto base = randn(rng, N * OC);
      std::vector<float> added = base, want(base.size());
      matmul_packed_forward(added.data(), x.data(), pk, bias, N, nullptr, RowGemmOut::AddTo);
      for (std::size_t i = 0; i < want.size(); ++i) want[i] = base[i] + packed[i];
      CHECK(same_bits(added.data(), want.data(), N * OC));
    }
    // float64 reference: |error| <= C * eps * sum |x w| (+ the bias's rounding)
    double worst = 0;
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t o = 0; o < OC; ++o) {
        double s = with_bias ? b[static_cast<std::size_t>(o)] : 0.0, mag = std::abs(s);
        for (std::int64_t c = 0; c < C; ++c) {
          const double t = static_cast<double>(x[static_cast<std::size_t>(n * C + c)]) * w[static_cast<std::size_t>(o * C + c)];
          s += t;
          mag += std::abs(t);
        }
        const double err = std::abs(packed[static_cast<std::size_t>(n * OC + o)] - s);
        const double tol = static_cast<double>(C + 1) * std::numeric_limits<float>::epsilon() * mag + 1e-30;
        worst = std::max(worst, err / tol);
      }
    CHECK(worst <= 1.0);
    // each row alone (a GEMV: other register tiles) gives the same bits
    bool rows_equal = true;
    for (std::int64_t n = 0; n < N; ++n) {
      matmul_packed_forward(one.data(), x.data() + n * C, pk, bias, 1);
      rows_equal = rows_equal && same_bits(one.data(), packed.data() + n * OC, OC);
    }
    CHECK(rows_equal);
  }
  // a PackedScope: matmul_rows_forward finds the packing (the same bits), and forgets it after
  {
    const std::int64_t N = 3, C = 37, OC = 45;
    const auto x = randn(rng, N * C), w = randn(rng, OC * C), b = randn(rng, OC);
    const PackedMatrix pk = pack_matrix(w.data(), OC, C);
    std::vector<float> plain(static_cast<std::size_t>(N * OC)), scoped(plain.size());
    matmul_rows_forward(plain.data(), x.data(), w.data(), b.data(), N, C, OC);
    std::vector<std::int64_t> found;  // 1: as expected
    {
      PackedScope scope({&pk});
      found.push_back(PackedScope::find(w.data(), OC, C) == &pk);
      found.push_back(PackedScope::find(w.data(), OC - 1, C) == nullptr);  // another shape
      matmul_rows_forward(scoped.data(), x.data(), w.data(), b.data(), N, C, OC);
    }
    found.push_back(PackedScope::find(w.data(), OC, C) == nullptr);
    mls::testing::observe("PackedScope: found, other shape not found, gone after", found);
    CHECK(found == std::vector<std::int64_t>{1, 1, 1});
    mls::testing::observe("matmul_rows_forward in a PackedScope", scoped);
    CHECK(same_bits(plain.data(), scoped.data(), N * OC));
  }
  const std::vector<float> w(6, 1.f);
  require_error([&] { pack_matrix(w.data(), 0, 6); }, "pack_matrix: a (0, 6) weight");
  require_error([&] { pack_matrix(w.data(), 6, 0); }, "pack_matrix: a (6, 0) weight");
}

TEST_CASE("decode model: MoE models and a packed model of other parameters are errors",
          "[lab6][plumbing][rowgemm]") {
  Rng rng(32, "rowgemm-errors");
  GPTConfig cfg = random_config(rng);
  const GPTParams p = random_params(cfg, rng), q = random_params(cfg, rng);
  const auto model = std::make_shared<const DecodeModel>(p);
  EngineOptions opt;
  require_error([&] { Engine e(q, opt, {}, model); }, "engine: a packed model of other parameters");
  Engine ok(p, opt, {}, model);  // its own parameters: fine
  mls::testing::observe("engine with a shared packed model, free blocks", ok.stats().blocks_free);
  CHECK(ok.stats().blocks_free == opt.num_blocks);
  cfg.moe_experts = 2;
  const GPTParams m = random_params(cfg, rng);
  require_error([&] { DecodeModel d(m); }, "DecodeModel: a model with MoE blocks");
}

TEST_CASE("decode GEMM in parts (a team's share of the output columns): the parts together give "
          "matmul_packed_forward's bits, Store and AddTo, and a part outside 0..parts-1 is an error",
          "[lab6][plumbing][rowgemm]") {
  Rng rng(33, "rowgemm-parts");
  for (int trial = 0; trial < 16; ++trial) {
    const std::int64_t N = rng.randint(1, 40), C = rng.randint(1, 70), OC = rng.randint(1, 200);
    const int parts = static_cast<int>(rng.randint(1, 5));
    const auto x = randn(rng, N * C), w = randn(rng, OC * C), b = randn(rng, OC), base = randn(rng, N * OC);
    const PackedMatrix pk = pack_matrix(w.data(), OC, C), next = pack_matrix(w.data(), OC, C);
    for (const RowGemmOut mode : {RowGemmOut::Store, RowGemmOut::AddTo}) {
      std::vector<float> whole = base, split = base;
      matmul_packed_forward(whole.data(), x.data(), pk, b.data(), N, nullptr, mode);
      std::int64_t covered = 0;
      for (int part = 0; part < parts; ++part) {
        matmul_packed_part(split.data(), x.data(), pk, b.data(), N, part, parts, &next, mode);
        const auto [o0, o1] = part_columns(pk, part, parts);
        CHECK(o0 == covered);  // the parts tile the columns in order
        covered = std::max(covered, o1);
      }
      CHECK(covered == OC);
      mls::testing::observe("decode GEMM in " + std::to_string(parts) + " parts (" + std::to_string(N) + ", " +
                                std::to_string(C) + ") x (" + std::to_string(C) + ", " + std::to_string(OC) + ")",
                            split);
      CHECK(same_bits(whole.data(), split.data(), N * OC));
    }
  }
  const auto w = randn(rng, 8 * 4), x = randn(rng, 4);
  const PackedMatrix pk = pack_matrix(w.data(), 8, 4);
  std::vector<float> out(8);
  require_error([&] { matmul_packed_part(out.data(), x.data(), pk, nullptr, 1, 2, 2); },
                "matmul_packed_part: part 2 of 2, expected 0 <= part < parts");
  require_error([&] { matmul_packed_part(out.data(), x.data(), pk, nullptr, 1, -1, 3); },
                "matmul_packed_part: part -1 of 3");
  require_error([&] { matmul_packed_part(out.data(), x.data(), pk, nullptr, 1, 0, 0); },
                "matmul_packed_part: part 0 of 0");
}
