#include "kv/key_config.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lr::kv {

namespace {
struct Named {
  const char* name;
  KeyType type;
};
constexpr Named kTypes[] = {{"f32", KeyType::F32},     {"f16", KeyType::F16},
                            {"q8_0", KeyType::Q8_0},   {"q4_0", KeyType::Q4_0},
                            {"kivi2", KeyType::Kivi2}, {"svdq", KeyType::Svdq}};
}  // namespace

KeyType parse_key_type(const std::string& name) {
  for (const Named& n : kTypes)
    if (name == n.name) return n.type;
  fail("--cache-type-k: unknown key cache type '{}' (expected f32, f16, q8_0, q4_0, kivi2 or svdq)", name);
}

const char* key_type_name(KeyType t) {
  for (const Named& n : kTypes)
    if (n.type == t) return n.name;
  return "?";
}

void SvdqConfig::validate() const {
  if (schedule.empty()) fail("svdq_bit_schedule: the schedule is empty (give widths like 8,4,2,1,1,0,0,0)");
  for (int w : schedule)
    if (w < 0 || w > 8) fail("svdq_bit_schedule: width {} is outside [0, 8]", w);
  if (std::all_of(schedule.begin(), schedule.end(), [](int w) { return w == 0; }))
    fail("svdq_bit_schedule: every width is 0, nothing would be stored");
  if (group_size <= 0 || group_size > 256)
    fail("svdq: group_size must be in [1, 256], got {}", group_size);
  if (!(energy > 0 && energy <= 1)) fail("svdq: energy must be in (0, 1], got {}", energy);
  if (rank < 0) fail("svdq: rank must be >= 0 (0 = by energy), got {}", rank);
  if (min_fit_tokens < 2) fail("svdq: min_fit_tokens must be >= 2, got {}", min_fit_tokens);
  const bool truncating = std::find(schedule.begin(), schedule.end(), 0) != schedule.end();
  if (rank > 0 && truncating && rank < min_safe_rank())
    fail("svdq: rank {} is too small for the schedule's 0-bit groups: below rank {} (4 channels "
         "per group of {}) they drop channels that still carry signal; use --svdq-rank >= {} or a "
         "schedule without zeros",
         rank, min_safe_rank(), schedule.size(), min_safe_rank());
}

void KeyCacheConfig::validate(int head_dim) const {
  switch (type) {
    case KeyType::Q8_0:
    case KeyType::Q4_0:
      if (head_dim % 32 != 0)
        fail("--cache-type-k {}: blocks of 32 along head_dim, but head_dim is {}", key_type_name(type), head_dim);
      break;
    case KeyType::Kivi2:
      if (kivi_group <= 0 || kivi_group > 256) fail("kivi: group must be in [1, 256], got {}", kivi_group);
      if (kivi_window < kivi_group || kivi_window % kivi_group != 0)
        fail("kivi: window {} must be a positive multiple of the group {}", kivi_window, kivi_group);
      break;
    case KeyType::Svdq: svdq.validate(); break;
    default: break;
  }
}

std::vector<int> parse_schedule(const std::string& s) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= s.size()) {
    size_t comma = s.find(',', at);
    std::string part = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size())
      fail("svdq_bit_schedule: '{}' is not a list of integer widths (e.g. 8,4,2,1,1,0,0,0)", s);
    out.push_back(v);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

}  // namespace lr::kv
