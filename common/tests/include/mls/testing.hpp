#pragma once
/// Helpers shared by the test programs of every lab (linked through mls_catch_main).
#include <catch2/catch.hpp>

#include <string>

#include "mls/common/error.hpp"
#include "mls/observe.hpp"

namespace mls::testing {

/// Runs `f` and requires an mls::Error whose message contains `needle`. A student function not
/// written yet throws mls::NotImplemented, which is not an mls::Error: it passes through, so the
/// test fails with "not implemented".
template <class F>
void require_error(F&& f, const std::string& needle) {
  try {
    f();
  } catch (const mls::Error& e) {
    INFO("message: " << e.what());
    const bool named = std::string(e.what()).find(needle) != std::string::npos;
    observe("mls::Error naming '" + needle + "'", named);
    CHECK(named);
    return;
  }
  observe("mls::Error naming '" + needle + "'", false);
  FAIL("expected an mls::Error containing '" << needle << "'");
}

}  // namespace mls::testing
