// Lab 6 llm.c interop: gpt2_*.bin model files (256-int header, padded vocabulary, llm.c's
// parameter order), by round trip and by a file written here by hand in that layout.
#include <cstring>

#include "lab6_helpers.hpp"
#include "mls/common/rng.hpp"
#include "mls/llm/checkpoint.hpp"
#include "mls/llm/llmc.hpp"

using namespace mls::llm;
using llm_test::require_error;

namespace {

std::vector<float> random_params(const GPTConfig& cfg, std::uint64_t seed) {
  mls::Rng rng(seed, "lab6-test-llmc");
  std::vector<float> v(static_cast<std::size_t>(num_params(cfg)));
  for (auto& x : v) x = static_cast<float>(rng.normal());
  return v;
}

/// Writes a model file the way llm.c lays it out, without the library: header ints, then each
/// tensor in order with its own shape; wte has Vp rows, the padding rows hold `pad`.
std::string hand_written(std::int32_t T, std::int32_t V, std::int32_t L, std::int32_t H, std::int32_t C,
                         std::int32_t Vp, float pad) {
  std::vector<std::int32_t> header(256, 0);
  header[0] = 20240326;
  header[1] = 3;
  header[2] = T, header[3] = V, header[4] = L, header[5] = H, header[6] = C, header[7] = Vp;
  std::string out(reinterpret_cast<const char*>(header.data()), 1024);
  // Tensor k holds values 1000 * k + i (i its flat index), so a misplaced tensor shows.
  const std::int64_t sizes[16] = {static_cast<std::int64_t>(Vp) * C, static_cast<std::int64_t>(T) * C,
                                  L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
                                  L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
  for (int k = 0; k < 16; ++k) {
    for (std::int64_t i = 0; i < sizes[k]; ++i) {
      float x = static_cast<float>(1000 * k) + static_cast<float>(i) * 0.5f;
      if (k == 0 && i >= static_cast<std::int64_t>(V) * C) x = pad;
      out.append(reinterpret_cast<const char*>(&x), 4);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("llm.c: a hand-written file reads back exactly", "[lab6][interop]") {
  const std::string bytes = hand_written(8, 5, 2, 2, 4, 8, 777.0f);
  const LlmcModel m = parse_llmc(bytes, "hand.bin");
  llm_test::observe_config("config", m.config);
  MLS_OBSERVE(m.padded_vocab_size);
  MLS_OBSERVE(m.params);
  // The oracles (the file's own layout, written out), after the code ran.
  MLS_ORACLE_CHECK(
      CHECK(m.config == GPTConfig{2, 2, 4, 8, 5}); CHECK(m.padded_vocab_size == 8);
      REQUIRE(static_cast<std::int64_t>(m.params.size()) == num_params(m.config));
      // Walk the tensors in config.hpp order: each holds 1000 * k + i / 2, and wte has only V rows.
      const auto shapes = param_shapes(m.config);
      std::size_t off = 0;
      for (int k = 0; k < 16; ++k) {
        const auto n = static_cast<std::size_t>(mls::checked_numel(shapes[static_cast<std::size_t>(k)]));
        for (std::size_t i = 0; i < n; ++i)
          REQUIRE(m.params[off + i] == static_cast<float>(1000 * k) + static_cast<float>(i) * 0.5f);
        off += n;
      }
      for (float x : m.params) CHECK(x != 777.0f));  // no padding row came through
  // Writing it back with the same padded size gives the same bytes, except the padding (zeros).
  const std::string again = serialize_llmc(m.config, m.params, 8);
  mls::testing::observe("written back", again);
  MLS_ORACLE_CHECK(CHECK(again == hand_written(8, 5, 2, 2, 4, 8, 0.0f)));
}

TEST_CASE("llm.c: round trip through a file, padding to 128", "[lab6][interop]") {
  llm_test::TempDir dir("llmc");
  const GPTConfig cfg{3, 3, 48, 32, 65};
  const std::vector<float> params = random_params(cfg, 1);
  write_llmc(dir.file("gpt2_nano.bin"), cfg, params);
  CHECK(is_llmc_file(dir.file("gpt2_nano.bin")));
  const LlmcModel m = read_llmc(dir.file("gpt2_nano.bin"));
  llm_test::observe_config("config", m.config);
  MLS_OBSERVE(m.padded_vocab_size);
  MLS_OBSERVE(m.params);
  MLS_OBSERVE(llm_test::slurp(dir.file("gpt2_nano.bin")).size());
  MLS_OBSERVE(llmc_padded_vocab(50257));
  CHECK(m.config == cfg);
  MLS_ORACLE_CHECK(CHECK(m.padded_vocab_size == 128));
  CHECK(std::memcmp(m.params.data(), params.data(), params.size() * 4) == 0);
  // Size: header + every parameter with wte padded to 128 rows, padding rows zero.
  const std::string bytes = llm_test::slurp(dir.file("gpt2_nano.bin"));
  mls::testing::observe("the file's bytes", bytes);
  MLS_ORACLE_CHECK(CHECK(bytes.size() == 1024 + 4 * static_cast<std::size_t>(num_params(cfg) + (128 - 65) * 48));
                   for (std::size_t i = 1024 + 4 * 65 * 48; i < 1024 + 4 * 128 * 48; ++i) REQUIRE(bytes[i] == 0);
                   CHECK(llmc_padded_vocab(50257) == 50304));
  MLS_CHECK_EQ(llmc_padded_vocab(128), 128);
  MLS_CHECK_EQ(llmc_padded_vocab(1), 128);
  // An exact multiple has no padding rows.
  const GPTConfig c2{1, 2, 8, 4, 128};
  const auto p2 = random_params(c2, 2);
  const LlmcModel m2 = parse_llmc(serialize_llmc(c2, p2), "m2");
  MLS_CHECK_EQ(m2.padded_vocab_size, 128);
  CHECK(m2.params == p2);
}

TEST_CASE("llm.c: bad files and bad exports", "[lab6][interop]") {
  const std::string good = hand_written(8, 5, 2, 2, 4, 8, 0.0f);
  std::string bad = good;
  bad[0] = 1;
  MLS_OBSERVE(parse_llmc(good, "m.bin").params);  // the good file, as read
  require_error([&] { parse_llmc(bad, "m.bin"); }, "llm.c model 'm.bin': bad magic");
  bad = good;
  bad[4] = 5;
  require_error([&] { parse_llmc(bad, "m.bin"); }, "version 5 is not supported, expected 3 (version 5 holds bfloat16");
  require_error([&] { parse_llmc(good.substr(0, 1000), "m.bin"); }, "is truncated: 1000 bytes, the header alone is 1024");
  require_error([&] { parse_llmc(good.substr(0, good.size() - 4), "m.bin"); }, "is truncated");
  require_error([&] { parse_llmc(good + "abcd", "m.bin"); }, "4 bytes more than its header needs");
  require_error([&] { parse_llmc(hand_written(8, 5, 2, 3, 4, 8, 0.0f), "m.bin"); }, "bad header: GPTConfig: n_embd = 4 is not divisible by n_head = 3");
  require_error([&] { parse_llmc(hand_written(8, 9, 2, 2, 4, 8, 0.0f), "m.bin"); }, "padded vocabulary 8 is smaller than the vocabulary 9");
  const GPTConfig cfg{2, 2, 4, 8, 5};
  require_error([&] { serialize_llmc(cfg, std::vector<float>(3)); }, "export llm.c: 3 parameter values, the config has");
  require_error([&] { serialize_llmc(cfg, random_params(cfg, 0), 4); }, "padded vocabulary 4 is smaller than the vocabulary 5");
  llm_test::TempDir dir("llmc");
  require_error([&] { read_llmc(dir.file("missing.bin")); }, "cannot open");
  CHECK_FALSE(is_llmc_file(dir.file("missing.bin")));
  llm_test::write_file(dir.file("ck.bin"), serialize_checkpoint([] {
    Checkpoint ck;
    ck.config = GPTConfig{1, 1, 4, 4, 3};
    return ck;
  }()));
  CHECK_FALSE(is_llmc_file(dir.file("ck.bin")));
  require_error([&] { read_llmc(dir.file("ck.bin")); }, "bad magic");
}

TEST_CASE("llm.c: init-from either format, with the tokenizer beside the model", "[lab6][interop]") {
  llm_test::TempDir dir("llmc");
  const GPTConfig cfg{2, 2, 8, 16, 3};
  const std::vector<float> params = random_params(cfg, 5);
  const std::string tok = "mls-tokenizer 1 char\nabc";
  export_llmc(dir.file("m.bin"), cfg, params, tok);
  CHECK(llm_test::slurp(dir.file("m.bin.tokenizer")) == tok);
  InitFrom a = load_init_from(dir.file("m.bin"));
  MLS_OBSERVE(a.format);
  llm_test::observe_config("config", a.config);
  MLS_OBSERVE(a.params);
  MLS_OBSERVE(a.tokenizer);
  MLS_ORACLE_CHECK(CHECK(a.format == "llmc"));
  CHECK(a.config == cfg);
  CHECK(a.params == params);
  CHECK(a.tokenizer == tok);
  // An mls-gpt checkpoint.
  Checkpoint ck;
  ck.config = cfg;
  ck.tokenizer = tok;
  add_params(ck, "", params);
  save_checkpoint(dir.file("run.ckpt"), ck);
  InitFrom b = load_init_from(dir.file("run.ckpt"));
  MLS_OBSERVE(b.format);
  MLS_OBSERVE(b.params);
  MLS_ORACLE_CHECK(CHECK(b.format == "mls"));
  CHECK(b.params == params);
  CHECK(b.tokenizer == tok);
  // Without a tokenizer file: no tokenizer; with a mismatched one: an error.
  write_llmc(dir.file("bare.bin"), cfg, params);
  CHECK(load_init_from(dir.file("bare.bin")).tokenizer.empty());
  llm_test::write_file(dir.file("bare.bin.tokenizer"), "mls-tokenizer 1 char\nabcd");
  require_error([&] { load_init_from(dir.file("bare.bin")); }, "has 4 tokens, the model");
  require_error([&] { export_llmc(dir.file("x.bin"), cfg, params, "mls-tokenizer 1 char\nab"); }, "the tokenizer has 2 tokens, the model 3");
  require_error([&] { load_init_from(dir.file("missing.ckpt")); }, "cannot open");
}
