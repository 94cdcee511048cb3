// The one Catch2 main shared by every test program of mlsys-labs.
#define CATCH_CONFIG_MAIN
// Wide enough that --list-test-names-only never wraps a long test name (CTest discovery and the
// grader read that list line by line).
#define CATCH_CONFIG_CONSOLE_WIDTH 400
#include <catch2/catch.hpp>

// mls-grader's harness listener: inert unless mls-grader runs the program (MLS_GRADER_FD set).
#include "mls_grader_listener.hpp"
