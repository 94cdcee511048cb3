// Lab 4: the index maps of the CUDA ladder's mma rung (src/mma_layout.hpp), checked on the host, no
// GPU: ldmatrix (.x4, plain and .trans) and mma.sync m16n8k16 are emulated lane by lane from their
// PTX definitions, fed through the same maps as the kernel (gemm_bf16_mma in src/kernels_cuda.cu),
// and the warp tile they compute is compared with a naive product. Small integers make every sum
// exact, so the comparisons are equalities. Also: the padded shared rows give conflict-free
// ldmatrix phases, and the block rasterization visits every tile once.
#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "mls/common/rng.hpp"
#include "mma_layout.hpp"

namespace L = mls::kernels::cuda::mma_layout;

namespace {

using Regs = std::array<std::array<std::array<float, 2>, 4>, 32>;  // [lane][register][half]

/// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 as the PTX ISA defines it: lanes 8m .. 8m+7
/// give the rows of matrix m (8 consecutive elements from their address); lane l receives in
/// register m the pair (row l/4, cols 2(l%4), 2(l%4)+1) of matrix m, or with .trans the pair
/// (rows 2(l%4), 2(l%4)+1, col l/4). `addr[l]`: lane l's address (an element offset into smem).
Regs ldmatrix_x4(const std::vector<float>& smem, const std::array<int, 32>& addr, bool trans) {
  Regs out{};
  for (int lane = 0; lane < 32; ++lane) {
    for (int m = 0; m < 4; ++m) {
      for (int h = 0; h < 2; ++h) {
        const int row = trans ? 2 * (lane % 4) + h : lane / 4, col = trans ? lane / 4 : 2 * (lane % 4) + h;
        // the map as the header states it
        const L::RowCol e = L::ldmatrix_element(lane, h, trans);
        REQUIRE((e.row == row && e.col == col));
        out[lane][m][h] = smem.at(addr[8 * m + row] + col);
      }
    }
  }
  return out;
}

/// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (d += a b) from the fragments of the warp:
/// A (16x16) gathered from a[lane][reg][half], B (16x8) from b[lane][reg][half], D (16x8) in
/// d[lane][i], each through the layout maps of the header.
void mma_16816(std::array<std::array<double, 4>, 32>& d, const Regs& a, const std::array<std::array<std::array<float, 2>, 2>, 32>& b) {
  double A[16][16] = {}, B[16][8] = {};
  int seen_a[16][16] = {}, seen_b[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    for (int r = 0; r < 4; ++r) {
      for (int h = 0; h < 2; ++h) {
        const auto e = L::a_element(lane, r, h);
        A[e.row][e.col] = a[lane][r][h], ++seen_a[e.row][e.col];
        if (r < 2) {
          const auto f = L::b_element(lane, r, h);
          B[f.row][f.col] = b[lane][r][h], ++seen_b[f.row][f.col];
        }
      }
    }
  }
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) REQUIRE(seen_a[i][j] == 1);  // every element of A in exactly one place
    for (int j = 0; j < 8; ++j) REQUIRE(seen_b[i][j] == 1);
  }
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      const auto e = L::c_element(lane, i);
      for (int k = 0; k < 16; ++k) d[lane][i] += A[e.row][k] * B[k][e.col];
    }
  }
}

}  // namespace

TEST_CASE("mma rung: the accumulator layout covers the 16x8 tile once, pairs of adjacent columns", "[lab4][mma_layout]") {
  int seen[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      const auto e = L::c_element(lane, i);
      REQUIRE((e.row >= 0 && e.row < 16 && e.col >= 0 && e.col < 8));
      ++seen[e.row][e.col];
    }
    // the epilogue writes accumulators (0, 1) and (2, 3) as float2: same row, adjacent columns
    for (int h = 0; h < 2; ++h) {
      const auto e0 = L::c_element(lane, 2 * h), e1 = L::c_element(lane, 2 * h + 1);
      CHECK((e1.row == e0.row && e1.col == e0.col + 1 && e0.col % 2 == 0));
    }
  }
  for (auto& row : seen) {
    for (int v : row) CHECK(v == 1);
  }
  // the PTX ISA figure of the m16n8 accumulator: lane 5 holds C rows 1 and 9, columns 2 and 3
  CHECK((L::c_element(5, 0).row == 1 && L::c_element(5, 0).col == 2 && L::c_element(5, 3).row == 9 &&
         L::c_element(5, 3).col == 3));
}

TEST_CASE("mma rung: emulated ldmatrix + mma.sync over a 64x64 warp tile equal the naive product", "[lab4][mma_layout]") {
  // One stage of the kernel's shared-memory ring for a 128x256x32 block (rows padded by 8 bf16), the
  // warp at (wrow, wcol) of the block, K = 32 (two 16-deep steps), exactly as gemm_bf16_mma walks it.
  constexpr int BM = 128, BN = 256, BK = 32, WM = 64, WN = 64, kLdA = BK + 8, kLdB = BN + 8;
  constexpr int FM = WM / 16, FN = WN / 8;
  mls::Rng rng(33, "mma_layout");
  std::vector<float> As(BM * kLdA, -1000.0f), Bs(BK * kLdB, -1000.0f);  // padding: poison
  for (int r = 0; r < BM; ++r) {
    for (int c = 0; c < BK; ++c) As[r * kLdA + c] = static_cast<float>(static_cast<int>(rng.uniform_float() * 9) - 4);
  }
  for (int r = 0; r < BK; ++r) {
    for (int c = 0; c < BN; ++c) Bs[r * kLdB + c] = static_cast<float>(static_cast<int>(rng.uniform_float() * 9) - 4);
  }
  for (auto [wrow, wcol] : {std::pair{0, 0}, {64, 192}, {0, 128}}) {
    std::array<std::array<std::array<double, 4>, 32>, FM * FN> acc{};  // [i * FN + j][lane][4]
    for (int kk = 0; kk < BK; kk += 16) {
      std::array<Regs, FM> fa;
      std::array<Regs, FN / 2> fb;
      std::array<int, 32> addr{};
      for (int i = 0; i < FM; ++i) {
        for (int lane = 0; lane < 32; ++lane) addr[lane] = L::ldmatrix_x4_offset(lane, wrow + 16 * i, kk, kLdA);
        fa[i] = ldmatrix_x4(As, addr, false);
      }
      for (int j = 0; j < FN / 2; ++j) {
        for (int lane = 0; lane < 32; ++lane) addr[lane] = L::ldmatrix_x4_offset(lane, kk, wcol + 16 * j, kLdB);
        fb[j] = ldmatrix_x4(Bs, addr, true);
      }
      for (int i = 0; i < FM; ++i) {
        for (int j = 0; j < FN; ++j) {
          std::array<std::array<std::array<float, 2>, 2>, 32> b{};  // registers 2(j%2), 2(j%2)+1 of fb[j/2]
          for (int lane = 0; lane < 32; ++lane) b[lane] = {fb[j / 2][lane][2 * (j % 2)], fb[j / 2][lane][2 * (j % 2) + 1]};
          mma_16816(acc[i * FN + j], fa[i], b);
        }
      }
    }
    // the epilogue's map: accumulator (i, j, q) of a lane is C[wrow + 16i + row][wcol + 8j + col]
    std::vector<int> seen(WM * WN, 0);
    long bad = 0;
    for (int i = 0; i < FM; ++i) {
      for (int j = 0; j < FN; ++j) {
        for (int lane = 0; lane < 32; ++lane) {
          for (int q = 0; q < 4; ++q) {
            const auto e = L::c_element(lane, q);
            const int r = wrow + 16 * i + e.row, c = wcol + 8 * j + e.col;
            double want = 0;
            for (int k = 0; k < BK; ++k) want += static_cast<double>(As[r * kLdA + k]) * Bs[k * kLdB + c];
            ++seen[(r - wrow) * WN + (c - wcol)];
            if (acc[i * FN + j][lane][q] != want && bad++ < 3) {
              UNSCOPED_INFO("warp (" << wrow << ", " << wcol << "): C[" << r << "][" << c << "] = "
                                     << acc[i * FN + j][lane][q] << ", expected " << want);
            }
          }
        }
      }
    }
    CHECK(bad == 0);
    for (int v : seen) REQUIRE(v == 1);  // every element of the warp tile written once
  }
}

TEST_CASE("mma rung: padded shared rows make every ldmatrix phase conflict-free", "[lab4][mma_layout]") {
  // An 8x8 matrix of an ldmatrix is one phase: its 8 rows of 16 bytes must cover the 32 banks once.
  // Row strides (bf16): A with BK = 32 or 64 (+8), B with BN = 128 or 256 (+8).
  for (int ld : {32 + 8, 64 + 8, 128 + 8, 256 + 8}) {
    for (int row0 : {0, 16, 48}) {
      for (int col0 : {0, 16}) {
        for (int m = 0; m < 4; ++m) {
          std::set<int> banks;
          for (int lane = 8 * m; lane < 8 * m + 8; ++lane) {
            const int byte = 2 * L::ldmatrix_x4_offset(lane, row0, col0, ld);
            REQUIRE(byte % 16 == 0);  // ldmatrix rows are 16-byte aligned
            for (int w = 0; w < 4; ++w) banks.insert((byte / 4 + w) % 32);
          }
          INFO("row stride " << ld << " bf16, matrix " << m);
          CHECK(banks.size() == 32);
        }
      }
    }
  }
  // without the padding the 8 rows of a BK = 32 tile (64 bytes apart) fall on 2 groups of 4 banks
  std::set<int> banks;
  for (int lane = 0; lane < 8; ++lane) banks.insert((2 * L::ldmatrix_x4_offset(lane, 0, 0, 32) / 4) % 32);
  CHECK(banks.size() == 2);
}

TEST_CASE("mma rung: block rasterization visits every output tile once", "[lab4][mma_layout]") {
  for (auto [tm, tn] : {std::pair{1, 1}, {9, 1}, {8, 3}, {17, 5}, {64, 32}, {3, 40}}) {
    for (int group : {1, 8}) {
      std::set<std::pair<int, int>> tiles;
      for (int id = 0; id < tm * tn; ++id) {
        const auto t = L::block_tile(id, tm, tn, group);
        REQUIRE((t.row >= 0 && t.row < tm && t.col >= 0 && t.col < tn));
        tiles.insert({t.row, t.col});
      }
      INFO(tm << " x " << tn << " tiles, panels of " << group);
      CHECK(tiles.size() == static_cast<size_t>(tm * tn));
    }
  }
  // consecutive blocks walk down a panel of 8 tile rows: ids 0..7 are rows 0..7 of column 0
  for (int id = 0; id < 8; ++id) CHECK((L::block_tile(id, 64, 32, 8).row == id && L::block_tile(id, 64, 32, 8).col == 0));
  CHECK((L::block_tile(8, 64, 32, 8).row == 0 && L::block_tile(8, 64, 32, 8).col == 1));
}
