// libFuzzer target for the OpenAI request parser of `lowrank serve`: any body
// must either parse into parameters inside their documented ranges, or be
// refused with ApiError 400 whose error body dumps as JSON.
#include <cstdint>
#include <string>

#include "server/openai.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace lr::server;
  const Api api = data[0] & 1 ? Api::Chat : Api::Completions;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const CompletionRequest r = parse_completion_request(api, body);
    const auto& s = r.gen.sampling;
    check(s.temperature >= 0 && s.temperature <= 2 && s.top_p > 0 && s.top_p <= 1);
    check(s.min_p >= 0 && s.min_p < 1 && s.top_k >= -1);
    check(r.gen.max_tokens >= 0 && r.gen.stop.size() <= 4);
    for (const std::string& x : r.gen.stop) check(!x.empty());
    check(r.gen.top_logprobs >= -1 && r.gen.top_logprobs <= 20);
    check(api == Api::Chat ? !r.messages.empty() : (!r.prompt.empty() || !r.prompt_ids.empty()));
    check(!r.include_usage || r.stream);
  } catch (const ApiError& e) {
    check(e.status == 400);
    check(!dump_json(error_body(e)).empty());
  }
  return 0;
}
