// Makes lab 4's kernels reachable by name (MLS_MATMUL=lab4_packed, set_sgemm_kernel) in every
// program linked with lab 4, without any `main` calling register_kernels(). CMake links this
// object file into each consumer directly (a static library would drop an unreferenced object).
// The kernels are registered at priority - 100, so the default kernel stays what it was; an
// explicit register_kernels() (lab 4's priorities) wins, whichever runs first. The autotuner's
// `tuned` kernel (mls/kernels/tune.hpp, library mls_kernels_tune) is registered here too, at -100,
// and its `tuned` row operators (softmax, layernorm; MLS_ROWOPS=tuned, mls/kernels/tune_ops.hpp),
// which are never chosen by default.
#include "mls/common/kernels.hpp"
#include "mls/kernels/sgemm.hpp"

namespace mls::kernels::tune {
void register_tuned_kernel();  // mls/kernels/tune.hpp (not included: this object sees only common and sgemm.hpp)
void register_tuned_rowops();  // mls/kernels/tune_ops.hpp
}  // namespace mls::kernels::tune

namespace {

void provide() {
  mls::kernels::detail::register_implemented(-100, /*keep_existing=*/true);
  mls::kernels::tune::register_tuned_kernel();
}

[[maybe_unused]] const bool added = (mls::add_sgemm_provider(&provide), true);
// The row operator registry has no providers: registering is safe from a static initialiser.
[[maybe_unused]] const bool rowops_added = (mls::kernels::tune::register_tuned_rowops(), true);

}  // namespace
