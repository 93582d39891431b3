#include <yara.h>

#include "modelgate/scanner.h"

namespace modelgate::scanner {

std::string YaraVersion() { return YR_VERSION; }

}  // namespace modelgate::scanner
