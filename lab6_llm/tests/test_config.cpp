// Lab 6 GPT configuration: named configs, validation, the llm.c parameter order and shapes, and
// the parameter count's closed form against the sum of the shapes.
#include "lab6_helpers.hpp"
#include "mls/llm/config.hpp"

using namespace mls::llm;
using llm_test::require_error;

namespace {
void observe_config(const char* label, const GPTConfig& c) {
  mls::testing::observe(label, std::vector<std::int64_t>{c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size});
}
}  // namespace

TEST_CASE("config: named configs", "[lab6][config]") {
  const GPTConfig nano = config_by_name("nano");
  observe_config("nano", nano);
  MLS_CHECK_EQ(nano.n_layer, 3);
  MLS_CHECK_EQ(nano.n_head, 3);
  MLS_CHECK_EQ(nano.n_embd, 48);
  MLS_CHECK_EQ(nano.block_size, 32);
  MLS_CHECK_EQ(nano.vocab_size, 0);
  const GPTConfig small = config_by_name("small");
  observe_config("small", small);
  MLS_CHECK_EQ(small.n_layer, 4);
  MLS_CHECK_EQ(small.n_head, 4);
  MLS_CHECK_EQ(small.n_embd, 128);
  MLS_CHECK_EQ(small.block_size, 64);
  require_error([] { config_by_name("gpt5"); }, "unknown config 'gpt5', expected one of: nano, small");
}

TEST_CASE("config: validate names the field", "[lab6][config]") {
  GPTConfig c = config_by_name("nano");
  require_error([&] { c.validate(); }, "vocab_size = 0");
  c.vocab_size = 65;
  CHECK_NOTHROW(c.validate());
  GPTConfig d = c;
  d.n_embd = 50;
  require_error([&] { d.validate(); }, "n_embd = 50 is not divisible by n_head = 3");
  d = c, d.n_layer = 0;
  require_error([&] { d.validate(); }, "n_layer = 0");
  d = c, d.n_head = -1;
  require_error([&] { d.validate(); }, "n_head = -1");
  d = c, d.block_size = 0;
  require_error([&] { d.validate(); }, "block_size = 0");
  d = c, d.n_embd = 0;
  require_error([&] { d.validate(); }, "n_embd = 0");
  observe_config("nano", config_by_name("nano"));
  CHECK_FALSE(c == config_by_name("nano"));  // vocab_size differs
}

TEST_CASE("config: llm.c parameter order, shapes and count", "[lab6][config]") {
  const auto& names = param_names();
  for (const char* n : names) mls::testing::observe("name", n);
  MLS_CHECK_EQ(std::string(names[0]), std::string("wte"));
  MLS_CHECK_EQ(std::string(names[4]), std::string("qkvw"));
  MLS_CHECK_EQ(std::string(names[12]), std::string("fcprojw"));
  MLS_CHECK_EQ(std::string(names[15]), std::string("lnfb"));
  GPTConfig c{2, 2, 8, 16, 11};
  const auto shapes = param_shapes(c);
  for (const auto& s : shapes) mls::testing::observe("shape", s);
  MLS_CHECK_EQ(shapes[0], (mls::Shape{11, 8}));
  MLS_CHECK_EQ(shapes[1], (mls::Shape{16, 8}));
  MLS_CHECK_EQ(shapes[4], (mls::Shape{2, 24, 8}));
  MLS_CHECK_EQ(shapes[5], (mls::Shape{2, 24}));
  MLS_CHECK_EQ(shapes[6], (mls::Shape{2, 8, 8}));
  MLS_CHECK_EQ(shapes[10], (mls::Shape{2, 32, 8}));
  MLS_CHECK_EQ(shapes[12], (mls::Shape{2, 8, 32}));
  MLS_CHECK_EQ(shapes[14], (mls::Shape{8}));
  for (const char* name : {"nano", "small"}) {
    for (std::int64_t V : {1, 65, 512, 50257}) {
      GPTConfig g = config_by_name(name);
      g.vocab_size = V;
      MLS_OBSERVE(num_params(g));
      // The oracle: the sum of the shapes, after the code ran.
      MLS_ORACLE(std::int64_t sum = 0; for (const auto& s : param_shapes(g)) sum += mls::checked_numel(s);)
      MLS_ORACLE_CHECK(CHECK(num_params(g) == sum));
    }
  }
  // GPT-2 small (124M): 124,439,808 parameters with the 50257-token vocabulary and 1024 positions.
  MLS_CHECK_EQ(num_params(GPTConfig{12, 12, 768, 1024, 50257}), 124439808);
}
