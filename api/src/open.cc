// The C API's mg_open: finds a model's files and signature and verifies
// them through the signer's loader.
#include "api_internal.h"
