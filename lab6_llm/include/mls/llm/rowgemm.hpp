#pragma once
/// Lab 6: the decode GEMM — out (N, OC) = inp (N, C) · W (OC, C)^T + bias, with every output
/// element computed by the same operations in the same order whatever N is:
///
///   acc = 0;  for c = 0 .. C-1: acc += inp[n, c] * W[o, c]   (in order, one FMA each)
///   out[n, o] = acc + bias[o]
///
/// The vector lanes run over 16 output columns (never over c), so a row's numbers never depend on
/// the rows beside it nor on how many there are: a batch of 32 decode tokens, a prefill chunk of a
/// whole prompt (one GEMM per layer) and one token at a time (forward_cached) all give the same
/// bits. The weights are packed once into panels of 16 output columns, (C, 16) each, contiguous:
/// one token (a GEMV) streams them front to back, and a batch reads each panel once per step for
/// all its rows (register tiles of up to 4 rows x 32 columns: each weight load feeds 4 FMAs).
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace mls::llm {

/// Output columns per panel (one AVX-512 register of floats).
constexpr std::int64_t kRowGemmPanel = 16;

/// W (OC, C) packed into ceil(OC / 16) panels of (C, 16): panel p holds columns 16p .. 16p + 15
/// (zeros past OC), element [c][j] = W[16p + j, c].
struct PackedMatrix {
  std::int64_t C = 0, OC = 0;
  const float* source = nullptr;  // the W it was packed from (PackedScope finds it by this)
  std::vector<float> data;        // (panels, C, 16)
  std::int64_t panels() const { return (OC + kRowGemmPanel - 1) / kRowGemmPanel; }
};

/// Packs W (OC, C). C, OC >= 1 (an mls::Error otherwise).
PackedMatrix pack_matrix(const float* weight, std::int64_t OC, std::int64_t C);

/// What the decode GEMM does with an output element y = acc + bias (acc its sum over c) while it
/// is still in a register: Store writes it (out = y); AddTo adds it to what out holds
/// (out = out + y: a residual add fused into the GEMM, the bits of residual_forward(x, x, y), one
/// pass over the (N, OC) output fewer).
enum class RowGemmOut { Store, AddTo };

/// out (N, OC) = inp (N, C) · W^T + bias (may be null), W packed by pack_matrix (`mode` AddTo:
/// out += that). The numbers of matmul_rows_forward (model.hpp) on the unpacked W, bit for bit.
/// Threaded over panels. While it computes, each panel group's first tile prefetches the next
/// group toward L2, and the last group prefetches the first panels of `then` (the matrix the
/// caller multiplies next; may be null): a model's weights stream in while the FMAs run.
void matmul_packed_forward(float* out, const float* inp, const PackedMatrix& w, const float* bias,
                           std::int64_t N, const PackedMatrix* then = nullptr,
                           RowGemmOut mode = RowGemmOut::Store);

/// The output columns [first, second) of part `part` of `parts` of a product with w: those of panels
/// [P * part / parts, P * (part + 1) / parts) (P = w.panels()), at most OC (first == second: none).
inline std::pair<std::int64_t, std::int64_t> part_columns(const PackedMatrix& w, int part, int parts) {
  const std::int64_t P = w.panels(), q0 = P * part / parts, q1 = P * (part + 1) / parts;
  return {std::min(w.OC, q0 * kRowGemmPanel), std::min(w.OC, q1 * kRowGemmPanel)};
}

/// Part `part` of `parts` of that product, on the calling thread alone (no pool): output columns
/// of panels [P * part / parts, P * (part + 1) / parts) (P = w.panels()) for all N rows, the same
/// bits as matmul_packed_forward gives them. For a team of threads that splits one GEMM's output
/// columns (forward_paged at threads > 1): each streams only its share of the weights. `then`: the
/// matrix the caller multiplies next; the end of this part prefetches the first panels of the
/// same part of it. 0 <= part < parts (an mls::Error otherwise).
void matmul_packed_part(float* out, const float* inp, const PackedMatrix& w, const float* bias, std::int64_t N,
                        int part, int parts, const PackedMatrix* then = nullptr,
                        RowGemmOut mode = RowGemmOut::Store);

/// While alive, matmul_rows_forward on this thread finds these matrices by their source pointer
/// and shape and runs on them instead of packing W again: the same bits, only faster (the
/// single-sequence sampler, generate, packs its model once this way). The matrices must outlive
/// the scope and their sources must not change while it lives. Scopes nest (the innermost first).
class PackedScope {
 public:
  explicit PackedScope(std::vector<const PackedMatrix*> matrices);
  ~PackedScope();
  PackedScope(const PackedScope&) = delete;
  PackedScope& operator=(const PackedScope&) = delete;
  /// The matrix packed from `weight` (OC, C) in this thread's scopes, or null.
  static const PackedMatrix* find(const float* weight, std::int64_t OC, std::int64_t C);

 private:
  std::vector<const PackedMatrix*> matrices_;
  PackedScope* outer_;
};

}  // namespace mls::llm
