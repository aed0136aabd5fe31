// ArgBinder: Python-style argument binding for the builtins.
#include <fmt/format.h>

#include "core/error.h"
#include "template/builtins.h"

namespace lr::jinja {

ArgBinder::ArgBinder(std::string what, const CallArgs& args,
                     std::initializer_list<const char*> names, bool extra_positional)
    : what_(std::move(what)), names_(names), values_(names.size()), given_(names.size(), false) {
  for (size_t k = 0; k < args.pos.size(); ++k) {
    if (k < names_.size()) {
      values_[k] = args.pos[k];
      given_[k] = true;
    } else if (extra_positional) {
      extra_.push_back(args.pos[k]);
    } else {
      lr::fail("{} takes at most {} argument(s) ({} given)", what_, names_.size(), args.pos.size());
    }
  }
  for (const auto& [key, value] : args.kw) {
    size_t k = 0;
    while (k < names_.size() && key != names_[k]) ++k;
    if (k == names_.size()) lr::fail("{} got an unexpected keyword argument '{}'", what_, key);
    if (given_[k]) lr::fail("{} got multiple values for argument '{}'", what_, key);
    values_[k] = value;
    given_[k] = true;
  }
}

const Value& ArgBinder::get(size_t k) const {
  static const Value undefined = Value();
  return given_[k] ? values_[k] : undefined;
}

int64_t ArgBinder::get_int(size_t k, int64_t def) const {
  if (!given_[k]) return def;
  return to_index(values_[k], fmt::format("{}: argument '{}'", what_, names_[k]));
}

std::string ArgBinder::get_str(size_t k, std::string def) const {
  if (!given_[k]) return def;
  if (!values_[k].is_string())
    lr::fail("{}: argument '{}' must be a string, not '{}'", what_, names_[k],
             type_name(values_[k]));
  return values_[k].str();
}

}  // namespace lr::jinja
