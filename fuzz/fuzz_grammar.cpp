// libFuzzer: the input's first line-free part is GBNF; if it parses, the
// bytes after a NUL separator (or the grammar text itself) are fed to a
// matcher in small pieces and masked over a tiny vocabulary. Errors are
// lr::Error; anything else (a crash, a hang, a sanitizer report) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t nul = in.find('\0');
  std::string_view gbnf = in.substr(0, nul);
  std::string_view text = nul == std::string_view::npos ? gbnf : in.substr(nul + 1);
  try {
    auto g = lr::grammar::Grammar::parse_shared(gbnf);
    lr::grammar::Matcher m(g);
    static const lr::grammar::TokenMask mask(
        {"", "a", "ab", "\"", "{", "}", " ", "\xC3", "\xA9", "0", "x", "(", ")"}, {0});
    std::vector<uint8_t> allowed;
    for (size_t i = 0; i < text.size() && i < 256; i += 3) {
      mask.fill(m, allowed);
      m.accept_bytes(text.substr(i, 3));
    }
    (void)m.can_end();
  } catch (const lr::Error&) {
  }
  return 0;
}
