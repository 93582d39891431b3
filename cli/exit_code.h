// The one place outcomes become exit codes (the contract in README.md, "Using it").
#pragma once

namespace modelgate::cli {

enum ExitCode : int { kExitPass = 0, kExitRejected = 1, kExitCannotJudge = 2 };

}  // namespace modelgate::cli
