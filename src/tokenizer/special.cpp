#include "tokenizer/special.h"

namespace lr {

std::vector<Fragment> partition_specials(const Vocab& v, std::string_view text,
                                         bool parse_special) {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back(Fragment{-1, 0, text.size()});
  std::vector<Fragment> next;
  for (int32_t id : v.specials) {
    if (!parse_special && v.type[id] != TokenType::UserDefined) continue;
    const std::string& tok = v.text[id];
    bool changed = false;
    next.clear();
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      const std::string_view raw = text.substr(f.off, f.len);
      size_t pos = 0;
      for (size_t hit; (hit = raw.find(tok, pos)) != std::string_view::npos; pos = hit + tok.size()) {
        if (hit > pos) next.push_back(Fragment{-1, f.off + pos, hit - pos});
        next.push_back(Fragment{id, f.off + hit, tok.size()});
        changed = true;
      }
      if (pos < raw.size()) next.push_back(Fragment{-1, f.off + pos, raw.size() - pos});
    }
    if (changed) frags.swap(next);
  }
  return frags;
}

}  // namespace lr
