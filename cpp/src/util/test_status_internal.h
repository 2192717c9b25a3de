// Test-only: gtest assertions on arrow::Status and arrow::Result, the one set shared by every
// C++ test (include from *_test.cc files and test helpers only). Arrow's own testing macros are
// not in the wheel.
#pragma once

#include <arrow/result.h>
#include <arrow/status.h>
#include <gtest/gtest.h>

#include <utility>

/// Fails the test (and returns) when `expr` is not OK, printing the expression and the status.
#define ASSERT_OK(expr)                                    \
  do {                                                     \
    const ::arrow::Status _st = (expr);                    \
    ASSERT_TRUE(_st.ok()) << #expr ": " << _st.ToString(); \
  } while (false)

#define STOKER_TEST_CONCAT_INNER(a, b) a##b
#define STOKER_TEST_CONCAT(a, b) STOKER_TEST_CONCAT_INNER(a, b)
#define STOKER_ASSERT_OK_AND_ASSIGN_IMPL(result, lhs, rexpr)             \
  auto result = (rexpr);                                                 \
  ASSERT_TRUE(result.ok()) << #rexpr ": " << result.status().ToString(); \
  lhs = std::move(result).ValueUnsafe();

/// `lhs = *rexpr` (`lhs` may declare: `auto x`), after failing the test (and returning) when the
/// Result is an error.
#define ASSERT_OK_AND_ASSIGN(lhs, rexpr) \
  STOKER_ASSERT_OK_AND_ASSIGN_IMPL(STOKER_TEST_CONCAT(_result_, __LINE__), lhs, rexpr)
