// A Jinja2 chat template, rendered as HuggingFace transformers renders it:
// jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks,
// the loopcontrols extension ({% break %}, {% continue %}), the
// {% generation %} tag, tojson as json.dumps (non-ASCII kept) and the globals
// raise_exception and strftime_now. Output is Python's: values print with
// str(), lists and dicts with repr(), numbers as Python formats them.
//
// Anything the engine does not implement is refused with an lr::Error naming
// it ("chat template line 12: unsupported filter 'wordwrap'"), when the
// template is parsed or, where jinja2 too would only fail then, when the
// construct runs; it never renders something jinja2 would not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace lr::jinja {

struct Program;

struct RenderOptions {
  // The time strftime_now() formats (local time); the current time when unset.
  std::optional<std::time_t> now;
  // Bounds, so that no template can run away: a string (the output included)
  // longer than max_output_bytes, or more than max_steps steps of work
  // (statements, loop iterations, items filtered or printed, 16 bytes of
  // string built or scanned), fail the render with an lr::Error. Renders of
  // real chat templates take a few hundred steps per message; at the default
  // bounds, the worst template stops within about a second.
  size_t max_output_bytes = size_t{64} << 20;
  uint64_t max_steps = 10'000'000;
};

class Template {
 public:
  // Parses; throws lr::Error naming the line and the problem or the
  // unsupported construct.
  explicit Template(const std::string& source);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with the context's keys as variables (messages, tools,
  // add_generation_prompt, bos_token, ...; an object, its key order kept as
  // Python keeps a dict's). Throws lr::Error for a runtime failure, and
  // "chat template raised: <message>" for the template's raise_exception().
  std::string render(const nlohmann::ordered_json& context,
                     const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const Program> program_;
};

}  // namespace lr::jinja
