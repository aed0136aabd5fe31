// Two error channels (DEVELOPERS.md):
//  * bad input (files, flags, requests)  -> throw lr::Error with a message naming
//    the file / field and what was expected vs found;
//  * broken internal invariants           -> LR_ASSERT, which prints file:line and aborts.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace lr {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void assert_failed(const char* expr, const char* file, int line);

}  // namespace lr

#define LR_ASSERT(cond) \
  ((cond) ? (void)0 : ::lr::assert_failed(#cond, __FILE__, __LINE__))
