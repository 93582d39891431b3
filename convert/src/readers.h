// One reader per source format: each reads the file open as `in` (already
// scanned and passed) into a Checkpoint, or refuses it with an MG-CONV-*
// (or I/O) error. Convert() picks the reader by the scan's format.
#pragma once

#include "modelgate/convert.h"

namespace modelgate::convert {

// PyTorch zip checkpoints (torch.save since 1.6): read_torch_zip.cc.
core::Result<Checkpoint> ReadTorchZip(const core::OpenedFile& in, const ConvertOptions& options);

// torch's legacy checkpoints, a file of pickles then raw storages
// (ReadTorchLegacy) and the tar of torch < 0.4 (ReadTorchTar): read_torch_legacy.cc.
core::Result<Checkpoint> ReadTorchLegacy(const core::OpenedFile& in, const ConvertOptions& options);
core::Result<Checkpoint> ReadTorchTar(const core::OpenedFile& in, const ConvertOptions& options);

}  // namespace modelgate::convert
