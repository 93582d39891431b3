/* c_callers.c: what only a C caller can do. C lets any int be stored in an
 * enum-typed field or argument; in C++ forming such a value is undefined,
 * so api_test.cc reaches the library with out-of-range values through
 * these C functions. */
#include "modelgate.h"

const char* c_status_name(int status) { return mg_status_name((mg_status)status); }

void c_set_mode(mg_open_options* opts, int mode) { opts->mode = (mg_mode)mode; }

void c_set_signature(mg_open_options* opts, int kind) {
  opts->signature = (mg_signature_kind)kind;
}
