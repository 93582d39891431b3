// modelgate signer: Ed25519 keys, STSIG v1 embedded signatures, detached
// signatures, verification and the verify-before-mmap loader.
// Public header only until the signer issue lands; see ../shared/DESIGN.md.
#pragma once

#include "modelgate/core.h"

namespace modelgate::signer {}  // namespace modelgate::signer
