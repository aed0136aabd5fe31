#include "kv/key_config.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace lr::kv {

namespace {
template <typename T>
struct Named {
  const char* name;
  T type;
};
constexpr Named<KeyType> kTypes[] = {{"f32", KeyType::F32},          {"f16", KeyType::F16},
                                     {"q8_0", KeyType::Q8_0},        {"q4_0", KeyType::Q4_0},
                                     {"q8_0-rot", KeyType::Q8_0Rot}, {"q4_0-rot", KeyType::Q4_0Rot},
                                     {"kivi2", KeyType::Kivi2},      {"svdq", KeyType::Svdq}};
constexpr Named<ValueType> kValueTypes[] = {
    {"f32", ValueType::F32},   {"f16", ValueType::F16},          {"q8_0", ValueType::Q8_0},
    {"q4_0", ValueType::Q4_0}, {"q8_0-rot", ValueType::Q8_0Rot}, {"q4_0-rot", ValueType::Q4_0Rot}};

// The type named `name` in table t; lr::Error listing the names otherwise.
template <typename T, size_t N>
T parse(const Named<T> (&t)[N], const std::string& name, const char* flag, const char* what) {
  std::string names;
  for (const Named<T>& n : t) {
    if (name == n.name) return n.type;
    names += (names.empty() ? "" : ", ") + std::string(n.name);
  }
  fail("{}: unknown {} cache type '{}' (expected {})", flag, what, name, names);
}

template <typename T, size_t N>
const char* name_of(const Named<T> (&t)[N], T type) {
  for (const Named<T>& n : t)
    if (n.type == type) return n.name;
  return "?";
}

// Blocks of 32 along head_dim (a rotation's too).
void check_blocks(const char* flag, const char* name, bool blocks, int head_dim) {
  if (blocks && head_dim % 32 != 0)
    fail("{} {}: blocks of 32 along head_dim, but head_dim is {}", flag, name, head_dim);
}
}  // namespace

KeyType parse_key_type(const std::string& name) {
  return parse(kTypes, name, "--cache-type-k", "key");
}
const char* key_type_name(KeyType t) {
  return name_of(kTypes, t);
}
ValueType parse_value_type(const std::string& name) {
  return parse(kValueTypes, name, "--cache-type-v", "value");
}
const char* value_type_name(ValueType t) {
  return name_of(kValueTypes, t);
}

RowFormat key_row_format(KeyType t, int head_dim) {
  switch (t) {
    case KeyType::F32:
      return {DType::F32, 0};
    case KeyType::F16:
      return {DType::F16, 0};
    case KeyType::Q8_0:
      return {DType::Q8_0, 0};
    case KeyType::Q4_0:
      return {DType::Q4_0, 0};
    case KeyType::Q8_0Rot:
      return {DType::Q8_0, key_rotation(head_dim)};
    case KeyType::Q4_0Rot:
      return {DType::Q4_0, key_rotation(head_dim)};
    default:
      LR_ASSERT(false);  // kivi2 and svdq encode blocks of tokens
  }
  return {};
}

RowFormat value_row_format(ValueType t, int head_dim) {
  // The key type of the same name's row, rotated over the values' blocks.
  constexpr KeyType kSameName[] = {KeyType::F32,  KeyType::F16,     KeyType::Q8_0,
                                   KeyType::Q4_0, KeyType::Q8_0Rot, KeyType::Q4_0Rot};
  RowFormat f = key_row_format(kSameName[size_t(t)], head_dim);
  if (f.rot) f.rot = value_rotation(head_dim);
  return f;
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
  const ValueType v = values();
  check_blocks("--cache-type-v", value_type_name(v), v != ValueType::F32 && v != ValueType::F16,
               head_dim);
  switch (type) {
    case KeyType::Q8_0:
    case KeyType::Q4_0:
    case KeyType::Q8_0Rot:
    case KeyType::Q4_0Rot:
      check_blocks("--cache-type-k", key_type_name(type), true, head_dim);
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
