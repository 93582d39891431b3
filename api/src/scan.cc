// The C API's scanner: mg_scan renders the report `modelgate scan -f json`
// (or `check --policy P -f json`) writes.
#include "api_internal.h"

using modelgate::api::Fill;
using modelgate::api::Make;

MG_EXPORT mg_status mg_scan(const char*, const char*, char** report, int* verdict, mg_error* err) {
  if (report) *report = nullptr;
  if (verdict) *verdict = 2;
  return Fill(err, Make(MG_ERR_UNSUPPORTED, "", "not implemented yet"));
}
