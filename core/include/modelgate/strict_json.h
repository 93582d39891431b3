// strict_json: JSON text parsed so that nothing is silently dropped. Used for
// every JSON document a verdict depends on besides the safetensors header
// (which has its own SAX reader in safetensors.cc): STSIG values, OMS
// bundles and their statements, shard index files.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string_view>

#include "modelgate/core.h"

namespace modelgate::core {

// ParseStrictJson parses `text` as one JSON value (RFC 8259, UTF-8) into a
// DOM, with these errors (code `code`, message starting with `what`):
//  - a duplicate key in any object, compared after unescaping ("\u0061" and
//    "a" are the same key): nlohmann's DOM parser keeps the last one, a
//    second reader may keep the first -- a differential;
//  - objects and arrays nested deeper than `max_depth`;
//  - anything nlohmann's strict parser rejects (syntax, invalid UTF-8,
//    trailing bytes after the value).
// The message names the byte offset of a syntax error. Never throws.
Result<nlohmann::json> ParseStrictJson(std::string_view text, size_t max_depth, Code code,
                                       std::string_view what);

}  // namespace modelgate::core
