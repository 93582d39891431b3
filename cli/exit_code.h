// The one place outcomes become exit codes (../shared/DESIGN.md contract).
#pragma once

namespace modelgate::cli {

enum ExitCode : int { kExitPass = 0, kExitRejected = 1, kExitCannotJudge = 2 };

}  // namespace modelgate::cli
