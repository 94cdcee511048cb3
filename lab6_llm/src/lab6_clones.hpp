#pragma once
// Lab 6's hot loops are compiled for AVX-512, AVX2/FMA and baseline x86-64 (as lab 4's fused
// kernels); the loader picks the best one for this CPU, so the build needs no -march flag. Two
// functions that must give the same bits (forward_cached's attention and forward_paged's) carry
// it both, so both run the same instruction set's code.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MLS_LAB6_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MLS_LAB6_CLONES
#endif
