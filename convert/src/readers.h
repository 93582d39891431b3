// One reader per source format: each reads the file open as `in` (already
// scanned and passed) into a Checkpoint, or refuses it with an MG-CONV-*
// (or I/O) error. Convert() picks the reader by the scan's format.
#pragma once

#include "modelgate/convert.h"

namespace modelgate::convert {

// PyTorch zip checkpoints (torch.save since 1.6): read_torch_zip.cc.
core::Result<Checkpoint> ReadTorchZip(const core::OpenedFile& in, const ConvertOptions& options);

}  // namespace modelgate::convert
