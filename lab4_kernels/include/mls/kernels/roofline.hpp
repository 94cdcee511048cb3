#pragma once
/// Lab 4: this machine's compute roof, shared by mls-roofline and the tools that report a
/// model-FLOP utilisation (lab 6's mls-gpt).
namespace mls::kernels {

/// Peak float32 FMA GFLOP/s of `threads` threads (each runs 12 independent FMA chains, 2 flops
/// per lane), with AVX-512 or AVX2 vectors; best of 3 runs. `iters` sets the loop length.
double peak_gflops(bool avx512, int threads, long iters = 20'000'000);
/// peak_gflops with the widest vectors this CPU has.
double peak_gflops_best(int threads, long iters = 20'000'000);

}  // namespace mls::kernels
