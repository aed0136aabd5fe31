#include "template/template.h"

#include "core/error.h"
#include "template/ast.h"
#include "template/builtins.h"
#include "template/interp.h"
#include "template/parser.h"

namespace lr::jinja {

namespace {

// Installs one render's limits for the thread and restores the previous ones;
// clears the namespaces the render made on the way out.
class RenderScope {
 public:
  explicit RenderScope(const RenderOptions& o) : saved_(limits()) {
    Limits l;
    l.max_string = o.max_output_bytes;
    l.max_steps = o.max_steps;
    limits() = l;
  }
  ~RenderScope() {
    clear_namespaces();
    limits() = saved_;
  }
  RenderScope(const RenderScope&) = delete;
  RenderScope& operator=(const RenderScope&) = delete;

 private:
  Limits saved_;
};

}  // namespace

Template::Template(const std::string& source) {
  const RenderScope scope{RenderOptions{}};  // bounds for the literals the parser builds
  program_ = parse(source);
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& context,
                             const RenderOptions& options) const {
  LR_ASSERT(program_ != nullptr);
  if (!context.is_object()) lr::fail("chat template context must be a JSON object");
  const RenderScope scope(options);
  const Value ctx = from_json(context);
  Interp interp(ctx.dict(), options);
  try {
    return interp.render(program_->body);
  } catch (const LocatedError& e) {
    throw lr::Error(e.what());  // plain lr::Error for callers
  }
}

}  // namespace lr::jinja
