// Builds the AST from the tokens, with jinja2's grammar and precedence.
#pragma once

#include <memory>
#include <string_view>

#include "template/ast.h"

namespace lr::jinja {

// Nesting deeper than this (brackets, operators, blocks) is refused, so that
// no input can exhaust the stack.
constexpr int kMaxNesting = 100;

// Throws lr::Error "chat template line N: ..." for anything jinja2 would not
// compile, and for the constructs this engine does not implement.
std::unique_ptr<Program> parse(std::string_view source);

}  // namespace lr::jinja
