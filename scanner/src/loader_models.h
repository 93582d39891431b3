// Loader models: what each loader in the threat model would deserialize from
// a file (docs/loader-models.md). Internal to the scanner.
#pragma once

#include <span>
#include <string_view>

#include "judge.h"

namespace modelgate::scanner::internal {

// JudgeLoaderViews asks the model of every loader what it would read from
// `file` (all of it, mapped; `src` reads the same descriptor with pread),
// judges every view a loader would accept with `judge`, and decides the
// reported format, the polyglot finding and whether the file fails closed.
// `name` is the file's base name: a claim about which loaders read it.
// `mapping`, when `file` is its bytes, lets the safetensors view drop the
// header's pages once it has read them (GuardedMapping::ReleasePages).
void JudgeLoaderViews(Scanner& judge, const Source& src, std::span<const uint8_t> file,
                      std::string_view name, const ScanOptions& options, FileScan& out,
                      const core::GuardedMapping* mapping = nullptr);

}  // namespace modelgate::scanner::internal
