#pragma once
// The error check of lab 4's part-2 tests: an expression throws an mls::Error naming something.
#include <string>

#include "mls/testing.hpp"

/// `expr` throws an mls::Error whose message contains `needle` (a std::string or literal). The
/// check is observed for mls-grader (mls::testing::require_error: "names '<needle>'" or the
/// message itself); a function that is not written yet throws "not implemented", which passes
/// through, so the test says so.
#define LAB4_REQUIRE_ERROR(expr, needle) ::mls::testing::require_error([&] { (void)(expr); }, std::string(needle))
