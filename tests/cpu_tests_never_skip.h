// Compiled into every test area except gpu (tests/CMakeLists.txt force-includes it): there GTEST_SKIP() fails the
// test instead of skipping it. Everything a CPU test needs is in this repository (tests/fixtures/), so a CPU test
// that does not run checks nothing and must be reported as a failure, never counted as passed or skipped. Only GPU
// tests skip (without a CUDA device), and scripts/test.sh says how many and why.
#pragma once

#include <gtest/gtest.h>

#undef GTEST_SKIP
#define GTEST_SKIP() GTEST_FAIL() << "a CPU test may not skip (tests/cpu_tests_never_skip.h): "
