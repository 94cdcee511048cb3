#pragma once
/// Lab 4 internal: the instruction set the packed SGEMM picked at run time (MLS_LAB4_ISA,
/// set_packed_isa), shared with the fused kernels so one switch selects both.
namespace mls::kernels::detail {

/// True when the AVX-512 kernels are in use (the CPU has AVX-512F and nothing chose otherwise).
bool use_avx512();

}  // namespace mls::kernels::detail
