#include "mls/common/kernels.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "mls/common/error.hpp"

namespace mls {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<SgemmKernel> kernels;
  std::string chosen;       // "" means: MLS_MATMUL if set, else highest priority
  bool env_read = false;
  std::vector<void (*)()> providers;  // not yet called
};

Registry& registry() {
  static Registry r;
  return r;
}

std::string names(const std::vector<SgemmKernel>& ks) {
  std::string s;
  for (const auto& k : ks) s += (s.empty() ? "" : ", ") + k.name;
  return s.empty() ? "(none)" : s;
}

/// Calls the providers added so far (outside the lock: they call register_sgemm).
void run_providers() {
  auto& r = registry();
  for (;;) {
    void (*p)() = nullptr;
    {
      std::lock_guard<std::mutex> lock(r.mutex);
      if (r.providers.empty()) return;
      p = r.providers.front();
      r.providers.erase(r.providers.begin());
    }
    p();
  }
}

}  // namespace

void add_sgemm_provider(void (*provider)()) {
  MLS_CHECK(provider != nullptr, "add_sgemm_provider: the provider is null");
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.providers.push_back(provider);
}

void register_sgemm(SgemmKernel kernel) {
  MLS_CHECK(kernel.fn != nullptr && !kernel.name.empty(),
            "register_sgemm: a kernel needs a name and a function");
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = std::find_if(r.kernels.begin(), r.kernels.end(),
                         [&](const SgemmKernel& k) { return k.name == kernel.name; });
  if (it != r.kernels.end()) {
    *it = std::move(kernel);
  } else {
    r.kernels.push_back(std::move(kernel));
  }
  std::stable_sort(r.kernels.begin(), r.kernels.end(),
                   [](const SgemmKernel& a, const SgemmKernel& b) { return a.priority > b.priority; });
}

std::vector<SgemmKernel> sgemm_kernels() {
  run_providers();
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.kernels;
}

SgemmKernel sgemm_kernel() {
  run_providers();
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.env_read) {
    r.env_read = true;
    if (const char* env = std::getenv("MLS_MATMUL"); env && *env && r.chosen.empty()) r.chosen = env;
  }
  MLS_CHECK(!r.kernels.empty(), "matmul: no sgemm kernel is registered");
  if (r.chosen.empty()) return r.kernels.front();
  for (const auto& k : r.kernels) {
    if (k.name == r.chosen) return k;
  }
  fail("matmul: unknown kernel '", r.chosen, "' (from MLS_MATMUL or set_sgemm_kernel); registered: ",
       names(r.kernels));
}

void set_sgemm_kernel(const std::string& name) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.env_read = true;
  r.chosen = name;
}

}  // namespace mls
