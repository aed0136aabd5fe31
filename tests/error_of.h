// Test helper shared by the test executables: the message of the lr::Error a
// call throws (a test failure, and "", when it throws none).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace lr::test {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const lr::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no lr::Error thrown";
  return "";
}

}  // namespace lr::test

// EXPECT that the message `text` contains `part`, printing the message otherwise.
#define LR_EXPECT_ERROR_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)
