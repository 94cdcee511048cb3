#include "mls/common/kernels.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "mls/common/error.hpp"

namespace mls {
namespace {

/// One registry of named kernels (K: SgemmKernel, Conv2dKernel or RowOpsKernel), shared by the seams.
template <class K>
struct Registry {
  std::mutex mutex;
  std::vector<K> kernels;   // highest priority first
  std::string chosen;       // "" means: the environment variable if set, else highest priority
  bool env_read = false;
  std::vector<void (*)()> providers;  // not yet called

  /// Adds or replaces (by name), then re-sorts by priority.
  void add(K kernel) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = std::find_if(kernels.begin(), kernels.end(), [&](const K& k) { return k.name == kernel.name; });
    if (it != kernels.end()) {
      *it = std::move(kernel);
    } else {
      kernels.push_back(std::move(kernel));
    }
    std::stable_sort(kernels.begin(), kernels.end(), [](const K& a, const K& b) { return a.priority > b.priority; });
  }
  /// Calls the providers added so far (outside the lock: they register kernels).
  void run_providers() {
    for (;;) {
      void (*p)() = nullptr;
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (providers.empty()) return;
        p = providers.front();
        providers.erase(providers.begin());
      }
      p();
    }
  }
  std::vector<K> list() {
    run_providers();
    std::lock_guard<std::mutex> lock(mutex);
    return kernels;
  }
  /// The name chosen by `choose` or by the environment variable `env` (read once), "" if none.
  /// Call with the lock held.
  const std::string& choice(const char* env) {
    if (!env_read) {
      env_read = true;
      if (const char* e = std::getenv(env); e && *e && chosen.empty()) chosen = e;
    }
    return chosen;
  }
  void choose(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex);
    env_read = true;
    chosen = name;
  }
  std::string names() const {
    std::string s;
    for (const auto& k : kernels) s += (s.empty() ? "" : ", ") + k.name;
    return s.empty() ? "(none)" : s;
  }
};

Registry<SgemmKernel>& sgemm_registry() {
  static Registry<SgemmKernel> r;
  return r;
}
Registry<Conv2dKernel>& conv2d_registry() {
  static Registry<Conv2dKernel> r;
  return r;
}
Registry<RowOpsKernel>& rowops_registry() {
  static Registry<RowOpsKernel> r;
  return r;
}

}  // namespace

// ---- SGEMM ---------------------------------------------------------------------------------------

void add_sgemm_provider(void (*provider)()) {
  MLS_CHECK(provider != nullptr, "add_sgemm_provider: the provider is null");
  auto& r = sgemm_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.providers.push_back(provider);
}

void register_sgemm(SgemmKernel kernel) {
  MLS_CHECK(kernel.fn != nullptr && !kernel.name.empty(),
            "register_sgemm: a kernel needs a name and a function");
  sgemm_registry().add(std::move(kernel));
}

std::vector<SgemmKernel> sgemm_kernels() { return sgemm_registry().list(); }

SgemmKernel sgemm_kernel() {
  auto& r = sgemm_registry();
  r.run_providers();
  std::lock_guard<std::mutex> lock(r.mutex);
  const std::string& chosen = r.choice("MLS_MATMUL");
  MLS_CHECK(!r.kernels.empty(), "matmul: no sgemm kernel is registered");
  if (chosen.empty()) return r.kernels.front();
  for (const auto& k : r.kernels) {
    if (k.name == chosen) return k;
  }
  fail("matmul: unknown kernel '", chosen, "' (from MLS_MATMUL or set_sgemm_kernel); registered: ", r.names());
}

void set_sgemm_kernel(const std::string& name) { sgemm_registry().choose(name); }

// ---- conv2d --------------------------------------------------------------------------------------

void register_conv2d(Conv2dKernel kernel) {
  MLS_CHECK(kernel.fn != nullptr && !kernel.name.empty(),
            "register_conv2d: a kernel needs a name and a function, got name '", kernel.name, "'",
            kernel.fn ? "" : " and no function");
  MLS_CHECK(kernel.name != kConv2dFallback, "register_conv2d: the name '", kConv2dFallback,
            "' is reserved for the caller's own path (MLS_CONV2D=", kConv2dFallback, ")");
  conv2d_registry().add(std::move(kernel));
}

bool unregister_conv2d(const std::string& name) {
  auto& r = conv2d_registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return std::erase_if(r.kernels, [&](const Conv2dKernel& k) { return k.name == name; }) > 0;
}

std::vector<Conv2dKernel> conv2d_kernels() { return conv2d_registry().list(); }

Conv2dKernel conv2d_kernel() {
  auto& r = conv2d_registry();
  r.run_providers();
  std::lock_guard<std::mutex> lock(r.mutex);
  const std::string& chosen = r.choice("MLS_CONV2D");
  const Conv2dKernel fallback{kConv2dFallback, nullptr, 0, "the caller's own path"};
  if (chosen.empty()) return r.kernels.empty() ? fallback : r.kernels.front();
  if (chosen == kConv2dFallback) return fallback;
  for (const auto& k : r.kernels) {
    if (k.name == chosen) return k;
  }
  fail("conv2d: unknown kernel '", chosen, "' (from MLS_CONV2D or set_conv2d_kernel); registered: ", r.names(),
       ", or '", kConv2dFallback, "' for lab 2's own path");
}

void set_conv2d_kernel(const std::string& name) { conv2d_registry().choose(name); }

// ---- row operators ---------------------------------------------------------------------------------

void register_rowops(RowOpsKernel kernel) {
  MLS_CHECK(!kernel.name.empty() && (kernel.softmax || kernel.layernorm_forward || kernel.layernorm_backward),
            "register_rowops: a kernel needs a name and at least one function, got name '", kernel.name, "'");
  MLS_CHECK(kernel.name != kRowOpsFallback, "register_rowops: the name '", kRowOpsFallback,
            "' is reserved for the caller's own path (MLS_ROWOPS=", kRowOpsFallback, ")");
  rowops_registry().add(std::move(kernel));
}

std::vector<RowOpsKernel> rowops_kernels() { return rowops_registry().list(); }

RowOpsKernel rowops_kernel() {
  auto& r = rowops_registry();
  r.run_providers();
  std::lock_guard<std::mutex> lock(r.mutex);
  const std::string& chosen = r.choice("MLS_ROWOPS");
  if (chosen.empty() || chosen == kRowOpsFallback) return RowOpsKernel{kRowOpsFallback, {}, {}, {}, 0, "the caller's own path"};
  for (const auto& k : r.kernels) {
    if (k.name == chosen) return k;
  }
  fail("rowops: unknown kernel '", chosen, "' (from MLS_ROWOPS or set_rowops_kernel); registered: ", r.names(),
       ", or '", kRowOpsFallback, "' for the hand-written kernels");
}

void set_rowops_kernel(const std::string& name) { rowops_registry().choose(name); }

}  // namespace mls
