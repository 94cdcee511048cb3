#include "mls/llm/llmc.hpp"

#include <array>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "mls/common/error.hpp"
#include "mls/common/file.hpp"
#include "mls/llm/checkpoint.hpp"  // load_init_from reads mls checkpoints too
#include "mls/llm/tokenizer.hpp"

namespace mls::llm {

static_assert(std::endian::native == std::endian::little, "llm.c files are little endian");

namespace {
constexpr std::size_t kHeaderBytes = kLlmcHeaderInts * sizeof(std::int32_t);
}

std::int64_t llmc_padded_vocab(std::int64_t vocab_size) { return (vocab_size + 127) / 128 * 128; }

std::string serialize_llmc(const GPTConfig& cfg, const std::vector<float>& params, std::int64_t padded_vocab_size) {
  cfg.validate();
  MLS_CHECK(!is_moe(cfg), "export llm.c: an MoE model (moe_experts = ", cfg.moe_experts,
            ") has no llm.c layout, expected a dense model");
  const std::int64_t V = cfg.vocab_size, C = cfg.n_embd;
  const std::int64_t Vp = padded_vocab_size == 0 ? llmc_padded_vocab(V) : padded_vocab_size;
  MLS_CHECK(Vp >= V, "export llm.c: padded vocabulary ", Vp, " is smaller than the vocabulary ", V);
  const std::int64_t n = num_params(cfg);
  MLS_CHECK(static_cast<std::int64_t>(params.size()) == n, "export llm.c: ", params.size(),
            " parameter values, the config has ", n);
  for (std::int64_t v : {cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size, Vp})
    MLS_CHECK(v <= INT32_MAX, "export llm.c: ", v, " does not fit the int32 header");
  std::array<std::int32_t, kLlmcHeaderInts> header{};
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersionF32;
  header[2] = static_cast<std::int32_t>(cfg.block_size);
  header[3] = static_cast<std::int32_t>(V);
  header[4] = static_cast<std::int32_t>(cfg.n_layer);
  header[5] = static_cast<std::int32_t>(cfg.n_head);
  header[6] = static_cast<std::int32_t>(C);
  header[7] = static_cast<std::int32_t>(Vp);
  std::string out(reinterpret_cast<const char*>(header.data()), kHeaderBytes);
  const std::size_t wte = static_cast<std::size_t>(V * C);
  out.reserve(out.size() + (params.size() + static_cast<std::size_t>((Vp - V) * C)) * sizeof(float));
  out.append(reinterpret_cast<const char*>(params.data()), wte * sizeof(float));   // wte, V rows
  out.append(static_cast<std::size_t>((Vp - V) * C) * sizeof(float), '\0');         // padding rows: zeros
  out.append(reinterpret_cast<const char*>(params.data() + wte), (params.size() - wte) * sizeof(float));
  return out;
}

LlmcModel parse_llmc(std::string_view bytes, const std::string& source) {
  const std::string where = "llm.c model '" + source + "'";
  if (bytes.size() >= 4) {
    std::int32_t magic = 0;
    std::memcpy(&magic, bytes.data(), 4);
    MLS_CHECK(magic == kLlmcMagic, where, ": bad magic ", magic, ", expected ", kLlmcMagic,
              " (not an llm.c model file)");
  }
  MLS_CHECK(bytes.size() >= kHeaderBytes, where, " is truncated: ", bytes.size(), " bytes, the header alone is ",
            kHeaderBytes);
  std::array<std::int32_t, kLlmcHeaderInts> h{};
  std::memcpy(h.data(), bytes.data(), kHeaderBytes);
  MLS_CHECK(h[0] == kLlmcMagic, where, ": bad magic ", h[0], ", expected ", kLlmcMagic, " (not an llm.c model file)");
  MLS_CHECK(h[1] == kLlmcVersionF32, where, ": version ", h[1], " is not supported, expected ", kLlmcVersionF32,
            h[1] == 5 ? " (version 5 holds bfloat16 parameters; export a float32 model)" : " (float32 parameters)");
  LlmcModel m;
  m.config.block_size = h[2];
  m.config.vocab_size = h[3];
  m.config.n_layer = h[4];
  m.config.n_head = h[5];
  m.config.n_embd = h[6];
  m.padded_vocab_size = h[7];
  try {
    m.config.validate();
  } catch (const Error& e) {
    fail(where, ": bad header: ", e.what());
  }
  MLS_CHECK(m.padded_vocab_size >= m.config.vocab_size, where, ": padded vocabulary ", m.padded_vocab_size,
            " is smaller than the vocabulary ", m.config.vocab_size);
  const std::int64_t C = m.config.n_embd, V = m.config.vocab_size, Vp = m.padded_vocab_size;
  const std::int64_t n = num_params(m.config);
  const std::uint64_t expect = kHeaderBytes + static_cast<std::uint64_t>(n + (Vp - V) * C) * sizeof(float);
  MLS_CHECK(bytes.size() >= expect, where, " is truncated: ", bytes.size(), " bytes, the header (L=", h[4], " H=", h[5],
            " C=", C, " T=", h[2], " V=", V, " Vp=", Vp, ") needs ", expect);
  MLS_CHECK(bytes.size() == expect, where, " has ", bytes.size() - expect, " bytes more than its header needs (",
            expect, ")");
  m.params.resize(static_cast<std::size_t>(n));
  const char* p = bytes.data() + kHeaderBytes;
  const std::size_t wte = static_cast<std::size_t>(V * C);
  std::memcpy(m.params.data(), p, wte * sizeof(float));
  p += static_cast<std::size_t>(Vp * C) * sizeof(float);  // skip the padding rows
  std::memcpy(m.params.data() + wte, p, (m.params.size() - wte) * sizeof(float));
  return m;
}

void write_llmc(const std::string& path, const GPTConfig& cfg, const std::vector<float>& params,
                std::int64_t padded_vocab_size) {
  write_file_atomic(path, serialize_llmc(cfg, params, padded_vocab_size), "export llm.c");
}

LlmcModel read_llmc(const std::string& path) { return parse_llmc(read_file(path, "read llm.c model"), path); }

std::string llmc_tokenizer_path(const std::string& model_path) { return model_path + ".tokenizer"; }

void export_llmc(const std::string& path, const GPTConfig& cfg, const std::vector<float>& params,
                 const std::string& tokenizer) {
  if (!tokenizer.empty()) {
    const auto tok = load_tokenizer(tokenizer);
    MLS_CHECK(tok->vocab_size() == cfg.vocab_size, "export llm.c: the tokenizer has ", tok->vocab_size(),
              " tokens, the model ", cfg.vocab_size);
  }
  write_llmc(path, cfg, params);
  if (!tokenizer.empty()) write_file_atomic(llmc_tokenizer_path(path), tokenizer, "export llm.c tokenizer");
}

InitFrom load_init_from(const std::string& path) {
  InitFrom init;
  if (is_llmc_file(path)) {
    LlmcModel m = read_llmc(path);
    init.format = "llmc";
    init.config = m.config;
    init.params = std::move(m.params);
    const std::string tok_path = llmc_tokenizer_path(path);
    std::error_code ec;
    if (std::filesystem::exists(tok_path, ec)) {
      init.tokenizer = read_file(tok_path, "init-from");
      const auto tok = load_tokenizer(init.tokenizer);
      MLS_CHECK(tok->vocab_size() == init.config.vocab_size, "init-from: the tokenizer '", tok_path, "' has ",
                tok->vocab_size(), " tokens, the model '", path, "' has a vocabulary of ", init.config.vocab_size);
    }
    return init;
  }
  Checkpoint ck = load_checkpoint(path);
  init.format = "mls";
  init.config = ck.config;
  init.params = get_params(ck, "");
  init.tokenizer = std::move(ck.tokenizer);
  return init;
}

bool is_llmc_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::int32_t magic = 0;
  if (!in.read(reinterpret_cast<char*>(&magic), sizeof magic)) return false;
  return magic == kLlmcMagic;
}

}  // namespace mls::llm
