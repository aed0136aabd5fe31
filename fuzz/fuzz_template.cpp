// libFuzzer target for the chat template engine: any template, rendered
// against any context, must either render or throw lr::Error, within the
// render's bounds (no crash, no hang, no unbounded memory).
//
// Input: the template; optionally a NUL and then a JSON object to render it
// with (a fixed chat context otherwise).
#include <cstdint>
#include <cstring>
#include <string>

#include "core/error.h"
#include "template/template.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

const nlohmann::ordered_json& default_context() {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Hi \u00e9 \"x\"\n{{ y }}"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "call00001", "type": "function",
        "function": {"name": "f", "arguments": {"a": 1, "b": [1.5, null, true]}}}]},
      {"role": "tool", "tool_call_id": "call00001", "content": "42"}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
      "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "documents": null, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"
  })");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* text = reinterpret_cast<const char*>(data);
  const char* nul = static_cast<const char*>(std::memchr(text, '\0', size));
  const std::string source(text, nul ? static_cast<size_t>(nul - text) : size);
  nlohmann::ordered_json context = default_context();
  if (nul) {
    context = nlohmann::ordered_json::parse(nul + 1, text + size, nullptr, false);
    if (!context.is_object()) return 0;
  }
  lr::jinja::RenderOptions options;
  options.now = 1796472000;  // 2026-12-05
  options.max_steps = 200'000;
  options.max_output_bytes = size_t{1} << 20;
  try {
    const lr::jinja::Template t(source);
    const std::string out = t.render(context, options);
    check(out.size() <= options.max_output_bytes);
  } catch (const lr::Error& e) {
    check(std::strlen(e.what()) > 0);
  }
  return 0;
}
