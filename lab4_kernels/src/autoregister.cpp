// Makes lab 4's kernels reachable by name (MLS_MATMUL=lab4_packed, set_sgemm_kernel) in every
// program linked with lab 4, without any `main` calling register_kernels(). CMake links this
// object file into each consumer directly (a static library would drop an unreferenced object).
// The kernels are registered at priority - 100, so the default kernel stays what it was; an
// explicit register_kernels() (lab 4's priorities) wins, whichever runs first.
#include "mls/common/kernels.hpp"
#include "mls/kernels/sgemm.hpp"

namespace {

void provide() { mls::kernels::detail::register_implemented(-100, /*keep_existing=*/true); }

[[maybe_unused]] const bool added = (mls::add_sgemm_provider(&provide), true);

}  // namespace
