// mls-attention-bench: lab 4's tiled (flash) attention against lab 6's naive attention (the
// kernel it replaces in mls-gpt train --attention), forward and backward, and what each keeps for
// the backward pass, counted by the memory tracker (issue 32, part 1).
//
//   mls-attention-bench                                   (T = 1024, 2048; B·H = 16; hs = 64; 1 and 2 threads)
//   mls-attention-bench --contexts 256,512 --threads 1,4 --heads 16 --head-size 64
//
// Prints, per context T and thread count t, lines
//   ratio flash_vs_naive_fwd_T<T>_t<t> <naive seconds / flash seconds>   (> 1: flash faster)
//   ratio flash_vs_naive_bwd_T<T>_t<t> <naive seconds / flash seconds>
// both kernels timed in alternating batches in this process (mls/common/interleaved_timing.hpp),
// and per --mem-contexts T a line
//   memory attention_T<T> naive <bytes> flash <bytes>
// the activation bytes (mem::Tag::Activation) that one layer's forward + backward buffers
// (GPTActivations and their gradients' scratch, B·H = 16 as above) hold with each kernel: the
// naive kernel's (B, H, T, T) probabilities and scores' gradient grow as T², flash's (B, H, T)
// log-sum-exp as T. The figures are only meaningful on a quiet machine.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "mls/common/error.hpp"
#include "mls/common/interleaved_timing.hpp"
#include "mls/common/memory.hpp"
#include "mls/common/parallel.hpp"
#include "mls/common/rng.hpp"
#include "mls/llm/model.hpp"

using namespace mls;
using namespace mls::llm;

namespace {

/// Activation bytes of one layer's forward buffers and their gradients for (B, T), per kernel.
std::int64_t layer_activation_bytes(std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t hs,
                                    Attention kind) {
  GPTConfig cfg;
  cfg.n_layer = 1;
  cfg.n_head = H;
  cfg.n_embd = H * hs;
  cfg.block_size = T;
  cfg.vocab_size = 64;
  mem::Tracker& t = mem::global();
  t.reset();
  {
    GPTActivations acts(cfg, B, T, kind), dacts(cfg, B, T, kind);
    return t.current(mem::Tag::Activation);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mls-attention-bench: tiled (flash) vs naive attention, time and activation memory"};
  std::vector<std::int64_t> contexts{1024, 2048}, mem_contexts{256, 1024, 2048};
  std::vector<int> threads{1, 2};
  std::int64_t batch = 4, heads = 4, head_size = 64;
  app.add_option("--contexts", contexts, "context lengths T to time")->delimiter(',')->capture_default_str();
  app.add_option("--mem-contexts", mem_contexts, "context lengths T of the memory lines")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--threads", threads, "thread counts")->delimiter(',')->capture_default_str();
  app.add_option("--batch", batch, "B")->capture_default_str();
  app.add_option("--heads", heads, "H (B·H heads are computed)")->capture_default_str();
  app.add_option("--head-size", head_size, "hs = C / H")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    MLS_CHECK(batch >= 1 && heads >= 1 && head_size >= 1, "mls-attention-bench: --batch ", batch,
              ", --heads ", heads, ", --head-size ", head_size, ", expected all >= 1");
    for (auto T : contexts)
      MLS_CHECK(T >= 1 && T <= 16384, "mls-attention-bench: --contexts ", T, ", expected 1..16384");
    for (auto T : mem_contexts)
      MLS_CHECK(T >= 1 && T <= 16384, "mls-attention-bench: --mem-contexts ", T, ", expected 1..16384");
    for (int t : threads)
      MLS_CHECK(t >= 1 && t <= 1024, "mls-attention-bench: --threads ", t, ", expected 1..1024");
    const std::int64_t B = batch, H = heads, C = H * head_size;
    std::printf("attention: B = %lld, H = %lld, hs = %lld (B·H = %lld), causal\n", (long long)B,
                (long long)H, (long long)head_size, (long long)(B * H));
    for (auto T : contexts) {
      Rng rng(1, "attention-bench");
      std::vector<float> inp(B * T * 3 * C), dout(B * T * C);
      for (auto& x : inp) x = static_cast<float>(rng.uniform(-1.0, 1.0));
      for (auto& x : dout) x = static_cast<float>(rng.uniform(-1.0, 1.0));
      std::vector<float> out_n(B * T * C), att(B * H * T * T), datt(B * H * T * T), dinp_n(B * T * 3 * C);
      std::vector<float> out_f(B * T * C), lse(B * H * T), dinp_f(B * T * 3 * C);
      for (int t : threads) {
        set_num_threads(t);
        auto naive_fwd = [&] { attention_forward(out_n.data(), att.data(), inp.data(), B, T, C, H); };
        auto flash_fwd = [&] {
          attention_forward(out_f.data(), lse.data(), inp.data(), B, T, C, H, Attention::Flash);
        };
        const double fwd = bench::interleaved_ratio(flash_fwd, naive_fwd);
        std::printf("ratio flash_vs_naive_fwd_T%lld_t%d %.4f\n", (long long)T, t, fwd);
        std::fflush(stdout);
        naive_fwd();
        flash_fwd();
        auto naive_bwd = [&] {
          attention_backward(dinp_n.data(), datt.data(), dout.data(), inp.data(), att.data(), B, T, C, H);
        };
        auto flash_bwd = [&] {
          attention_backward(dinp_f.data(), nullptr, dout.data(), inp.data(), lse.data(), B, T, C, H,
                             Attention::Flash, out_f.data());
        };
        const double bwd = bench::interleaved_ratio(flash_bwd, naive_bwd);
        std::printf("ratio flash_vs_naive_bwd_T%lld_t%d %.4f\n", (long long)T, t, bwd);
        std::fflush(stdout);
      }
    }
    mem::global().set_enabled(true);
    for (auto T : mem_contexts) {
      const std::int64_t naive = layer_activation_bytes(B, T, H, head_size, Attention::Naive);
      const std::int64_t flash = layer_activation_bytes(B, T, H, head_size, Attention::Flash);
      std::printf("memory attention_T%lld naive %lld flash %lld (one layer's activations and their "
                  "gradients, bytes; of which attention keeps naive %lld = 2·4·B·H·T², flash %lld = "
                  "2·4·B·H·T)\n",
                  (long long)T, (long long)naive, (long long)flash, (long long)(8 * B * H * T * T),
                  (long long)(8 * B * H * T));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mls-attention-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
