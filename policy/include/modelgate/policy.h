// modelgate policy: the operator's rules (trusted keys, required signatures,
// formats, limits, exceptions) turned into a pass/fail verdict.
// Public header only until the policy issue lands; see ../shared/DESIGN.md.
#pragma once

#include "modelgate/core.h"

namespace modelgate::policy {}  // namespace modelgate::policy
