// libFuzzer target for the tool-call parser of `lowrank serve`
// (server/tool_calls.h): for every format, the text streamed in pieces must
// give exactly what the whole-text parse gives, and neither may throw. The
// first byte seeds the piece sizes (1..8 bytes each, from a small generator),
// so the fuzzer explores the splits too.
#include <cstdint>
#include <string>
#include <string_view>

#include "server/tool_calls.h"

namespace {

using namespace lr::server::tools;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  for (ToolFormat f :
       {ToolFormat::Generic, ToolFormat::Hermes, ToolFormat::Llama3, ToolFormat::Mistral,
        ToolFormat::Granite, ToolFormat::FuncTools, ToolFormat::Apriel}) {
    IdSource whole_ids(1), stream_ids(1);
    const ParsedOutput whole = parse_tool_calls(f, text, whole_ids);

    ToolStreamParser p(f, stream_ids);
    ParsedOutput got;
    auto take = [&](const std::vector<ToolEvent>& events) {
      for (const ToolEvent& e : events) {
        if (e.kind == ToolEvent::Kind::Content) {
          got.content += e.text;
        } else if (e.kind == ToolEvent::Kind::CallStart) {
          check(e.index == static_cast<int>(got.calls.size()));
          got.calls.push_back({e.id, e.name, "", true});
        } else {
          check(e.index >= 0 && e.index + 1 == static_cast<int>(got.calls.size()));
          got.calls[e.index].arguments += e.text;
        }
      }
    };
    uint32_t state = data[0] * 2654435761u + 1;
    for (size_t at = 0; at < text.size();) {
      state = state * 1103515245u + 12345u;
      const size_t n = 1 + (state >> 16) % 8;
      take(p.feed(text.substr(at, n)));
      at += n;
    }
    take(p.finish());

    check(got.content == whole.content);
    check(got.calls.size() == whole.calls.size());
    for (size_t i = 0; i < got.calls.size(); ++i) {
      check(got.calls[i].id == whole.calls[i].id && got.calls[i].name == whole.calls[i].name);
      check(got.calls[i].arguments == whole.calls[i].arguments);
      check(p.result().calls[i].complete == whole.calls[i].complete);
      check(!whole.calls[i].name.empty() && !whole.calls[i].id.empty());
    }
  }
  return 0;
}
