#pragma once
/// Lab 6: llm.c's model file format (`gpt2_*.bin`, float32), so a model moves between mls-gpt and
/// llm.c in both directions.
///
/// Layout (little endian): a header of 256 int32 — [0] magic 20240326, [1] version 3 (float32
/// parameters), [2] max sequence length T, [3] vocabulary size V, [4] layers L, [5] heads H,
/// [6] channels C, [7] padded vocabulary size Vp >= V (llm.c rounds V up to a multiple of 128 so
/// its matmuls tile evenly), the rest 0 — then every parameter as float32 in the order of
/// config.hpp, except that wte has Vp rows: the V real rows, then Vp - V padding rows.
///
/// On our side a model is a GPTConfig and a flat vector in config.hpp order with V rows of wte
/// (no padding): reading drops the padding rows, writing adds zero rows.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mls/llm/config.hpp"

namespace mls::llm {

constexpr std::int32_t kLlmcMagic = 20240326;
constexpr std::int32_t kLlmcVersionF32 = 3;
constexpr int kLlmcHeaderInts = 256;

struct LlmcModel {
  GPTConfig config;                    // vocab_size = V (unpadded)
  std::int64_t padded_vocab_size = 0;  // Vp as the file had it
  std::vector<float> params;           // num_params(config) values, config.hpp order, V rows of wte
};

/// V rounded up to a multiple of 128, as llm.c pads it.
std::int64_t llmc_padded_vocab(std::int64_t vocab_size);

/// The file's bytes for `cfg` and `params` (num_params(cfg) values); padded_vocab_size 0 means
/// llmc_padded_vocab(V); a value below V is an mls::Error.
std::string serialize_llmc(const GPTConfig& cfg, const std::vector<float>& params, std::int64_t padded_vocab_size = 0);
/// Parses a model file; a bad magic, an unsupported version (e.g. 5, bfloat16), a bad header or a
/// size that does not match the header is an mls::Error naming `source` and the problem.
LlmcModel parse_llmc(std::string_view bytes, const std::string& source);

/// mls::write_file_atomic(path, serialize_llmc(...)).
void write_llmc(const std::string& path, const GPTConfig& cfg, const std::vector<float>& params,
                std::int64_t padded_vocab_size = 0);
LlmcModel read_llmc(const std::string& path);

/// An llm.c model file carries no tokenizer: export_llmc writes ours next to it, in
/// `<path>.tokenizer` (Tokenizer::serialize bytes), and load_init_from reads it back from there.
std::string llmc_tokenizer_path(const std::string& model_path);
/// write_llmc(path, ...) and, when `tokenizer` is not empty, the tokenizer beside it.
void export_llmc(const std::string& path, const GPTConfig& cfg, const std::vector<float>& params,
                 const std::string& tokenizer);

/// What --init-from needs from either kind of file.
struct InitFrom {
  std::string format;         // "mls" (an mls-gpt checkpoint) or "llmc" (a gpt2_*.bin model file)
  GPTConfig config;
  std::vector<float> params;  // num_params(config) values, config.hpp order
  std::string tokenizer;      // serialized tokenizer; empty for an llm.c file without one beside it
};
/// Reads an mls-gpt checkpoint (its weights "wte".."lnfb" and tokenizer) or an llm.c model file
/// (and `<path>.tokenizer` where it exists; its vocabulary must match the model's, else an
/// mls::Error naming both sizes).
InitFrom load_init_from(const std::string& path);

/// Whether the file starts with llm.c's magic (false for a missing or short file): lets
/// --init-from accept either an mls-gpt checkpoint or an llm.c model file.
bool is_llmc_file(const std::string& path);

}  // namespace mls::llm
