// JSON Schema minimum / maximum / exclusiveMinimum / exclusiveMaximum for
// integer and number -> GBNF, exact on the decimal value of the text.
//
// Bounds are kept as exact decimals (a double bound as its shortest
// round-trip form, i.e. what the schema's author wrote), so 0.1 means 0.1.
// A value is written as a sign and a magnitude; each sign gets a range of
// magnitudes [A, B] (either end possibly exclusive, B possibly infinite),
// which splits into the integer part I and the fraction digits D:
//   I == floor(A): D must satisfy 0.D >= frac(A) (or >),
//   floor(A) < I < floor(B): any D (the integer-range rules, as llama.cpp's
//     _generate_min_max_int: digit-by-digit classes, one length at a time),
//   I == floor(B): D must satisfy 0.D <= frac(B) (or <);
// the fraction constraints are automata over D's digits (FracLang).
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <optional>
#include <utility>

#include "core/error.h"
#include "grammar/schema_internal.h"

namespace lr::grammar {
namespace {

using Json = nlohmann::ordered_json;

// An exact decimal: i has no leading zeros ("0" for zero), f no trailing
// zeros; zero is never negative.
struct Dec {
  bool neg = false;
  std::string i = "0";
  std::string f;
  bool zero() const { return i == "0" && f.empty(); }
};

int cmp_digits(const std::string& a, const std::string& b) {  // canonical integers
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a.compare(b) < 0 ? -1 : a.compare(b) > 0 ? 1 : 0;
}

int cmp(const Dec& a, const Dec& b) {
  if (a.neg != b.neg) return a.neg ? -1 : 1;
  int m = cmp_digits(a.i, b.i);
  // Without trailing zeros, comparing fraction strings compares their values.
  if (m == 0) m = a.f.compare(b.f) < 0 ? -1 : a.f.compare(b.f) > 0 ? 1 : 0;
  return a.neg ? -m : m;
}

std::string inc(std::string s) {
  size_t k = s.size();
  while (k > 0 && s[k - 1] == '9') s[--k] = '0';
  if (k == 0) return "1" + s;
  ++s[k - 1];
  return s;
}

std::string dec(std::string s) {  // s > 0
  size_t k = s.size();
  while (s[k - 1] == '0') s[--k] = '9';
  --s[k - 1];
  if (s.size() > 1 && s[0] == '0') s.erase(0, 1);
  return s;
}

Dec normalized(Dec d) {
  size_t nz = d.i.find_first_not_of('0');
  d.i = nz == std::string::npos ? "0" : d.i.substr(nz);
  d.f.erase(d.f.find_last_not_of('0') + 1);
  if (d.zero()) d.neg = false;
  return d;
}

// A JSON number's text (as fmt writes a double: "1.5", "1e+20", "1e-07").
Dec parse_decimal(const std::string& t) {
  Dec d;
  size_t p = 0;
  if (t[p] == '-') d.neg = true, ++p;
  std::string digits;
  long point = -1;
  for (; p < t.size() && t[p] != 'e' && t[p] != 'E'; ++p) {
    if (t[p] == '.')
      point = static_cast<long>(digits.size());
    else
      digits += t[p];
  }
  if (point < 0) point = static_cast<long>(digits.size());
  if (p < t.size()) point += std::stol(t.substr(p + 1));
  if (point <= 0) {
    d.i = "0";
    d.f = std::string(static_cast<size_t>(-point), '0') + digits;
  } else {
    if (static_cast<size_t>(point) > digits.size()) digits.resize(static_cast<size_t>(point), '0');
    d.i = digits.substr(0, static_cast<size_t>(point));
    d.f = digits.substr(static_cast<size_t>(point));
  }
  return normalized(d);
}

Dec to_dec(const Json& v) {
  if (v.is_number_unsigned()) return normalized({false, std::to_string(v.get<uint64_t>()), ""});
  if (v.is_number_integer()) return parse_decimal(std::to_string(v.get<int64_t>()));
  double d = v.get<double>();
  // The parser reads an out-of-range number such as 1e400 as infinity.
  if (!std::isfinite(d)) fail("json schema: the number {} is out of a double's range", v.dump());
  return parse_decimal(fmt::format("{}", d));
}

// Integer neighbours of a decimal.
Dec ceil_int(const Dec& x) {
  if (x.f.empty()) return x;
  return normalized(x.neg ? Dec{true, x.i, ""} : Dec{false, inc(x.i), ""});
}
Dec floor_int(const Dec& x) {
  if (x.f.empty()) return x;
  return x.neg ? Dec{true, inc(x.i), ""} : Dec{false, x.i, ""};
}
Dec plus_one(const Dec& x) {  // x an integer
  return x.neg ? normalized({true, dec(x.i), ""}) : Dec{false, inc(x.i), ""};
}
Dec minus_one(const Dec& x) {
  if (x.neg) return {true, inc(x.i), ""};
  return x.zero() ? Dec{true, "1", ""} : Dec{false, dec(x.i), ""};
}

struct Bound {
  Dec v;
  bool strict = false;
  std::string key;
};

struct Bounds {
  std::optional<Bound> lo, hi;
};

Bounds read_bounds(const Json& s, const std::string& path) {
  Bounds b;
  for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
    if (!s.contains(key)) continue;
    const Json& v = s[key];
    if (!v.is_number())
      fail("json schema: '{}' must be a number (draft 4's boolean form is not supported) at {}",
           key, path);
    Bound nb{to_dec(v), key[0] == 'e', key};
    bool lower = std::string(key).find("inimum") != std::string::npos;
    auto& cur = lower ? b.lo : b.hi;
    int c = cur ? cmp(nb.v, cur->v) : 0;
    // Keep the tighter bound; at equal values the exclusive one.
    if (!cur || (lower ? c > 0 : c < 0) || (c == 0 && nb.strict)) cur = nb;
  }
  return b;
}

std::string lit(const std::string& s) {
  return s.empty() ? "" : "\"" + s + "\"";
}
std::string cls(char lo, char hi) {
  return lo == hi ? lit(std::string(1, lo)) : fmt::format("[{}-{}]", lo, hi);
}
std::string any_digits(size_t n) {
  return n == 0 ? "" : n == 1 ? "[0-9]" : fmt::format("[0-9]{{{}}}", n);
}
std::string join(const std::vector<std::string>& alts) {
  std::string out;
  for (const auto& a : alts) out += (out.empty() ? "" : " | ") + a;
  return alts.size() > 1 ? "( " + out + " )" : out;
}
bool is_lit(const std::string& x) {  // a literal of digits only
  return x.size() > 2 && x.front() == '"' && x.back() == '"' &&
         x.find_first_not_of("0123456789", 1) == x.size() - 1;
}
std::string seq(const std::string& a, const std::string& b) {
  if (is_lit(a) && is_lit(b)) return a.substr(0, a.size() - 1) + b.substr(1);
  return a.empty() ? b : b.empty() ? a : a + " " + b;
}
bool all_of(const std::string& s, char c) {
  return s.find_first_not_of(c) == std::string::npos;
}

// Digit strings of length |s| that are >= s (s not all zeros) or <= s.
std::string ge_suffix(const std::string& s) {
  std::vector<std::string> alts;
  for (size_t k = 0; k < s.size(); ++k) {
    if (all_of(s.substr(k + 1), '0')) {
      alts.push_back(seq(seq(lit(s.substr(0, k)), cls(s[k], '9')), any_digits(s.size() - k - 1)));
      break;
    }
    if (s[k] < '9')
      alts.push_back(
          seq(seq(lit(s.substr(0, k)), cls(s[k] + 1, '9')), any_digits(s.size() - k - 1)));
  }
  return join(alts);
}
std::string le_suffix(const std::string& s) {
  std::vector<std::string> alts;
  for (size_t k = 0; k < s.size(); ++k) {
    if (all_of(s.substr(k + 1), '9')) {
      alts.push_back(seq(seq(lit(s.substr(0, k)), cls('0', s[k])), any_digits(s.size() - k - 1)));
      break;
    }
    if (s[k] > '0')
      alts.push_back(
          seq(seq(lit(s.substr(0, k)), cls('0', s[k] - 1)), any_digits(s.size() - k - 1)));
  }
  return join(alts);
}

// Canonical integers in [a, b], a and b of the same length.
std::string same_len(const std::string& a, const std::string& b) {
  size_t p = 0;
  while (p < a.size() && a[p] == b[p]) ++p;
  if (p == a.size()) return lit(a);
  std::string ra = a.substr(p + 1), rb = b.substr(p + 1);
  bool a_low = all_of(ra, '0'), b_high = all_of(rb, '9');
  char from = a_low ? a[p] : static_cast<char>(a[p] + 1),
       to = b_high ? b[p] : static_cast<char>(b[p] - 1);
  std::vector<std::string> alts;
  if (!a_low) alts.push_back(seq(lit(std::string(1, a[p])), ge_suffix(ra)));
  if (from <= to) alts.push_back(seq(cls(from, to), any_digits(ra.size())));
  if (!b_high) alts.push_back(seq(lit(std::string(1, b[p])), le_suffix(rb)));
  return seq(lit(a.substr(0, p)), join(alts));
}

// Canonical integers in [a, b] (b empty: unbounded), a <= b.
std::string int_range(const std::string& a, const std::optional<std::string>& b) {
  size_t la = a.size();
  if (b && b->size() == la) return same_len(a, *b);
  std::vector<std::string> alts{same_len(a, std::string(la, '9'))};
  if (!b) {
    alts.push_back(fmt::format("[1-9] [0-9]{{{},}}", la));
  } else {
    if (la + 1 < b->size()) alts.push_back(fmt::format("[1-9] [0-9]{{{},{}}}", la, b->size() - 2));
    alts.push_back(same_len("1" + std::string(b->size() - 1, '0'), *b));
  }
  return join(alts);
}

// The fraction digits D (possibly none) with lo <(=) 0.D <(=) hi, where lo /
// hi are fraction digit strings without trailing zeros, or absent. A state
// is how much of each bound D has matched so far: kFree once D has left it
// (then it holds whatever follows), else an index; past its end, the bound's
// digits read as zeros. Every step advances an index or reaches a terminal
// state, so the rules are not recursive.
class FracLang {
 public:
  static constexpr long kFree = -1;
  struct Lang {
    bool empty_ok = false;  // D may be absent
    std::string more;       // D of one or more digits; "" when none
    bool none() const { return !empty_ok && more.empty(); }
  };

  FracLang(std::optional<std::pair<std::string, bool>> lo,
           std::optional<std::pair<std::string, bool>> hi, const AddRule& add, std::string hint)
      : lo_(std::move(lo)), hi_(std::move(hi)), add_(add), hint_(std::move(hint)) {}

  Lang top() { return at(lo_ ? norm_lo(0) : kFree, hi_ ? 0 : kFree); }

  // A text suffix: nothing, or "." and D.
  std::string suffix(const Lang& l) const {
    if (l.more.empty()) return "";
    return l.empty_ok ? fmt::format("( \".\" {} )?", l.more) : fmt::format("\".\" {}", l.more);
  }

 private:
  // An exhausted inclusive lower bound holds for every D.
  long norm_lo(long li) const {
    return static_cast<size_t>(li) == lo_->first.size() && !lo_->second ? kFree : li;
  }

  Lang at(long li, long hj) {
    auto key = std::make_pair(li, hj);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    Lang l = build(li, hj);
    if (l.more.find(' ') != std::string::npos) l.more = add_(hint_ + "-frac", l.more);
    memo_[key] = l;
    return l;
  }

  Lang build(long li, long hj) {
    bool lo_done = li != kFree &&
                   static_cast<size_t>(li) == lo_->first.size();  // only when strict: D > 0 needed
    bool hi_done = hj != kFree && static_cast<size_t>(hj) == hi_->first.size();
    if (hi_done && hi_->second) return {};  // 0.D < 0
    if ((li == kFree || lo_done) && (hj == kFree || hi_done)) {
      if (li == kFree) return hj == kFree ? Lang{true, "[0-9]+"} : Lang{true, "\"0\"+"};
      return hj == kFree ? Lang{false, "\"0\"* [1-9] [0-9]*"} : Lang{};
    }
    char l0 = li == kFree || lo_done ? '0' : lo_->first[static_cast<size_t>(li)];
    char h0 = hj == kFree ? '9' : hi_done ? '0' : hi_->first[static_cast<size_t>(hj)];
    Lang out;
    out.empty_ok = (li == kFree) && (hj == kFree || !hi_done || !hi_->second);
    std::vector<std::string> alts;
    for (char d = l0; d <= h0; ++d) {
      long nl = li == kFree || d != l0 ? kFree : lo_done ? li : norm_lo(li + 1);
      long nh = hj == kFree || d != h0 ? kFree : hi_done ? hj : hj + 1;
      if (nl == kFree && nh == kFree) {  // a run of free digits
        char e = d;
        while (e < h0 && !(hj != kFree && e + 1 == h0)) ++e;
        alts.push_back(cls(d, e) + " [0-9]*");
        d = e;
        continue;
      }
      Lang next = at(nl, nh);
      if (next.none()) continue;
      std::string rest = next.more.empty() ? ""
                         : next.empty_ok   ? "( " + next.more + " )?"
                                           : next.more;
      alts.push_back(seq(lit(std::string(1, d)), rest));
    }
    for (const auto& a : alts) out.more += (out.more.empty() ? "" : " | ") + a;
    return out;
  }

  std::optional<std::pair<std::string, bool>> lo_, hi_;
  const AddRule& add_;
  std::string hint_;
  std::map<std::pair<long, long>, Lang> memo_;
};

// Magnitudes m (non-negative) with a <(=) m <(=) b, b absent: unbounded.
struct Side {
  Dec a;
  bool a_strict = false;
  std::optional<Dec> b;
  bool b_strict = false;
};

std::optional<std::string> number_side(const Side& s, const AddRule& add, const std::string& hint) {
  if (s.b && cmp_digits(s.a.i, s.b->i) > 0) return std::nullopt;
  std::optional<std::pair<std::string, bool>> flo, fhi;
  if (!s.a.f.empty() || s.a_strict) flo = std::make_pair(s.a.f, s.a_strict);
  if (s.b) fhi = std::make_pair(s.b->f, s.b_strict);
  if (s.b && s.a.i == s.b->i) {  // one integer part: both fraction bounds at once
    FracLang f(flo, fhi, add, hint);
    auto l = f.top();
    if (l.none()) return std::nullopt;
    return seq(lit(s.a.i), f.suffix(l));
  }
  std::vector<std::string> alts;
  std::string first = s.a.i;  // the first integer part with any fraction
  if (flo) {
    FracLang f(flo, std::nullopt, add, hint);
    alts.push_back(seq(lit(s.a.i), f.suffix(f.top())));  // 0.D > x always has solutions
    first = inc(s.a.i);
  }
  std::optional<std::string> last;  // the last one
  if (s.b) last = dec(s.b->i);
  if (!last || cmp_digits(first, *last) <= 0)
    alts.push_back(seq(int_range(first, last), "( \".\" [0-9]+ )?"));
  if (s.b) {
    FracLang f(std::nullopt, fhi, add, hint);
    auto l = f.top();
    if (!l.none()) alts.push_back(seq(lit(s.b->i), f.suffix(l)));
  }
  if (alts.empty()) return std::nullopt;
  return join(alts);
}

std::optional<std::string> integer_side(const Dec& a, const std::optional<Dec>& b) {
  if (b && cmp_digits(a.i, b->i) > 0) return std::nullopt;
  return int_range(a.i, b ? std::optional<std::string>(b->i) : std::nullopt);
}

Dec magnitude(Dec d) {
  d.neg = false;
  return d;
}

std::string either(const std::optional<std::string>& pos, const std::optional<std::string>& neg) {
  std::vector<std::string> alts;
  if (pos) alts.push_back(*pos);
  if (neg) alts.push_back("\"-\" " + *neg);  // no expression here has an unparenthesized '|'
  return join(alts);
}

std::optional<std::string> integer_gbnf(const Bounds& b) {
  // Integer bounds: exclusive ones move by one, fractional ones round inward.
  std::optional<Dec> lo, hi;
  if (b.lo) lo = b.lo->strict ? plus_one(floor_int(b.lo->v)) : ceil_int(b.lo->v);
  if (b.hi) hi = b.hi->strict ? minus_one(ceil_int(b.hi->v)) : floor_int(b.hi->v);
  if (lo && hi && cmp(*lo, *hi) > 0) return std::nullopt;
  std::optional<std::string> pos, neg;  // "-0" is 0, so it belongs wherever 0 does
  if (!hi || !hi->neg) pos = integer_side(lo && !lo->neg ? *lo : Dec{}, hi);
  if (!lo || lo->neg || lo->zero())
    neg = integer_side(hi && hi->neg ? magnitude(*hi) : Dec{},
                       lo ? std::optional<Dec>(magnitude(*lo)) : std::nullopt);
  if (!pos && !neg) return std::nullopt;
  return either(pos, neg);
}

std::optional<std::string> number_gbnf(const Bounds& b, const AddRule& add,
                                       const std::string& hint) {
  std::optional<std::string> pos, neg;
  if (!b.hi || !b.hi->v.neg) {
    Side s;
    if (b.lo && !b.lo->v.neg) s.a = b.lo->v, s.a_strict = b.lo->strict;
    if (b.hi) s.b = b.hi->v, s.b_strict = b.hi->strict;
    pos = number_side(s, add, hint + "-pos");
  }
  if (!b.lo || b.lo->v.neg || b.lo->v.zero()) {
    Side s;  // magnitudes of the negative values (and of "-0")
    if (b.hi && (b.hi->v.neg || b.hi->v.zero()))
      s.a = magnitude(b.hi->v), s.a_strict = b.hi->strict;
    if (b.lo) s.b = magnitude(b.lo->v), s.b_strict = b.lo->strict;
    neg = number_side(s, add, hint + "-neg");
  }
  if (!pos && !neg) return std::nullopt;
  return either(pos, neg);
}

}  // namespace

bool has_numeric_bounds(const nlohmann::ordered_json& s) {
  for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"})
    if (s.contains(key)) return true;
  return false;
}

std::string bounded_numeric_gbnf(const nlohmann::ordered_json& s, bool integer, const AddRule& add,
                                 const std::string& hint, const std::string& path) {
  Bounds b = read_bounds(s, path);
  auto body = integer ? integer_gbnf(b) : number_gbnf(b, add, hint);
  if (!body) {
    std::string keys;
    for (const auto* x : {&b.lo, &b.hi})
      if (*x) keys += (keys.empty() ? "'" : " and '") + (*x)->key + "'";
    fail("json schema: unsatisfiable schema: no {} satisfies {} at {}",
         integer ? "integer" : "number", keys, path);
  }
  return *body;
}

bool numeric_in_bounds(const nlohmann::ordered_json& s, const nlohmann::ordered_json& value,
                       const std::string& path) {
  Bounds b = read_bounds(s, path);
  Dec v = to_dec(value);
  if (b.lo && (b.lo->strict ? cmp(v, b.lo->v) <= 0 : cmp(v, b.lo->v) < 0)) return false;
  if (b.hi && (b.hi->strict ? cmp(v, b.hi->v) >= 0 : cmp(v, b.hi->v) > 0)) return false;
  return true;
}

}  // namespace lr::grammar
