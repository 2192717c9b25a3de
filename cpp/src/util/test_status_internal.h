// Test-only: gtest assertions on arrow::Status, shared by the C++ tests (include from *_test.cc
// files only).
#pragma once

#include <arrow/status.h>
#include <gtest/gtest.h>

/// Fails the test (and returns) when `expr` is not OK, printing the expression and the status.
#define ASSERT_STATUS_OK(expr)                             \
  do {                                                     \
    const ::arrow::Status _st = (expr);                    \
    ASSERT_TRUE(_st.ok()) << #expr ": " << _st.ToString(); \
  } while (false)
