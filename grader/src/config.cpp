// Paths fixed at configure time: where the harness main and mls_common archives are built.
#include "mls/grader/util.hpp"

#ifndef MLS_GRADER_HARNESS_LIB
#define MLS_GRADER_HARNESS_LIB ""
#endif
#ifndef MLS_GRADER_COMMON_LIB
#define MLS_GRADER_COMMON_LIB ""
#endif
#ifndef MLS_GRADER_BINARY_DIR
#define MLS_GRADER_BINARY_DIR ""
#endif

namespace mls::grader {
fs::path default_harness_lib() { return MLS_GRADER_HARNESS_LIB; }
fs::path default_common_lib() { return MLS_GRADER_COMMON_LIB; }
fs::path default_binary_dir() { return MLS_GRADER_BINARY_DIR; }
}  // namespace mls::grader
