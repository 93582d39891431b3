// The shipped YARA rules, compiled at build time (scanner/rules/precompile.cc)
// and embedded in libyara's saved-rules format.
#pragma once

#include <cstdint>
#include <span>

namespace modelgate::scanner {

std::span<const uint8_t> DefaultCompiledRules();

}  // namespace modelgate::scanner
