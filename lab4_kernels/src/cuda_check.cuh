// The CUDA error checks of lab 4's .cu files: a failed call becomes an mls::Error naming the call,
// the place and CUDA's own words for the error.
#pragma once

#include <cuda_runtime.h>

#include "mls/common/error.hpp"

#define MLS_CUDA_CHECK(call)                                                                  \
  do {                                                                                        \
    const cudaError_t err_ = (call);                                                          \
    if (err_ != cudaSuccess) {                                                                \
      ::mls::fail("cuda: ", #call, " failed at ", __FILE__, ":", __LINE__, ": ",              \
                  cudaGetErrorName(err_), " (", cudaGetErrorString(err_), ")");               \
    }                                                                                         \
  } while (0)

/// Checks the launch itself (bad configuration, no device image for this GPU, ...).
#define MLS_CUDA_CHECK_LAUNCH(what) MLS_CUDA_CHECK(cudaGetLastError())
