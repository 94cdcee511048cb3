// Makes the autotuner's `tuned` SGEMM kernel reachable by name (MLS_MATMUL=tuned, set_sgemm_kernel)
// in every program linked with lab 4, like src/autoregister.cpp does for the ladder: CMake links
// this object file into each consumer of mls_kernels. Priority -100: never the default kernel.
#include "mls/common/kernels.hpp"

namespace mls::kernels::tune {
void register_tuned_kernel();  // mls/kernels/tune.hpp (not included: this object sees only common)
}  // namespace mls::kernels::tune

namespace {

void provide() { mls::kernels::tune::register_tuned_kernel(); }

[[maybe_unused]] const bool added = (mls::add_sgemm_provider(&provide), true);

}  // namespace
