// The C API's scanner: mg_scan runs what `modelgate scan -f json PATH` (or
// `modelgate check --policy P -f json PATH`) runs, with the report kept in
// memory instead of written, so the document is the program's byte for byte.
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "exit_code.h"
#include "options.h"
#include "api_internal.h"

using modelgate::api::Argument;
using modelgate::api::Clear;
using modelgate::api::Fill;
using modelgate::api::Guard;
using modelgate::api::Make;

namespace {

// StatusOfId is the category of a finding that kept a file from being
// judged (a report's "error" verdict).
mg_status StatusOfId(const std::string& id) {
  auto starts = [&](const char* p) { return id.rfind(p, 0) == 0; };
  if (starts("MG-IO-") || starts("MG-FS-")) return MG_ERR_IO;
  if (starts("MG-SIG-") || starts("MG-SET-") || starts("MG-OMS-")) return MG_ERR_VERIFY;
  return MG_ERR_FORMAT;
}

// FirstError is the first finding of the first file the report could not
// judge: why the program would exit 2.
modelgate::api::ApiError FirstError(const std::string& report) {
  const auto doc = nlohmann::json::parse(report, nullptr, false);
  if (doc.is_object() && doc.contains("files") && doc["files"].is_array()) {
    for (const auto& f : doc["files"]) {
      if (!f.is_object() || f.value("verdict", "") != "error") continue;
      const std::string path = f.value("path", "");
      if (f.contains("findings") && f["findings"].is_array() && !f["findings"].empty() &&
          f["findings"][0].is_object()) {
        const auto& finding = f["findings"][0];
        const std::string id = finding.value("id", "");
        uint64_t offset = MG_NO_OFFSET;
        if (finding.contains("offset") && finding["offset"].is_number_unsigned()) {
          offset = finding["offset"].get<uint64_t>();
        }
        return Make(StatusOfId(id), id, path + ": " + finding.value("message", ""), path, offset);
      }
      return Make(MG_ERR_IO, "", path + ": could not be judged", path);
    }
  }
  return Make(MG_ERR_INTERNAL, "MG-API-INTERNAL", "the scan could not judge a file");
}

}  // namespace

MG_EXPORT mg_status mg_scan(const char* path, const char* policy_path, char** report_json,
                            int* verdict, mg_error* err) {
  if (report_json != nullptr) *report_json = nullptr;
  if (verdict != nullptr) *verdict = 2;
  return Guard(err, [&]() -> mg_status {
    if (path == nullptr) return Fill(err, Argument("mg_scan: path is NULL"));
    if (*path == '\0') return Fill(err, Argument("mg_scan: path is empty"));
    if (report_json == nullptr || verdict == nullptr) {
      return Fill(err, Argument("mg_scan: report_json or verdict is NULL"));
    }
    if (policy_path != nullptr && *policy_path == '\0') {
      return Fill(err, Argument("mg_scan: policy_path is empty (NULL: no policy)"));
    }
    namespace cli = modelgate::cli;
    cli::CommonOptions opts;
    opts.format = "json";
    opts.quiet = true;
    opts.color = "never";
    // "-" is the program's standard input; to a library caller it is the
    // file named "-" (the process's stdin is not the caller's to read).
    opts.paths = {std::string(path) == cli::kStdinPath ? std::string("./-") : std::string(path)};
    std::string report;
    std::ostringstream diagnostics;
    opts.report_text = &report;
    opts.diagnostics = &diagnostics;
    int code = 0;
    if (policy_path != nullptr) {
      opts.policy = policy_path;
      code = cli::RunChecked(opts, opts.policy);
    } else {
      code = cli::RunScan(opts);
    }
    if (code == cli::kExitCannotJudge) {
      if (report.empty()) {
        std::string message = diagnostics.str();
        while (!message.empty() && message.back() == '\n') message.pop_back();
        const std::string prefix = "modelgate: ";
        if (message.rfind(prefix, 0) == 0) message = message.substr(prefix.size());
        if (message.empty()) message = "the scan could not run";
        return Fill(err, Make(MG_ERR_ARGUMENT, "MG-API-POLICY", message,
                              policy_path != nullptr ? policy_path : ""));
      }
      return Fill(err, FirstError(report));
    }
    if (code != cli::kExitPass && code != cli::kExitRejected) {
      return Fill(err, Make(MG_ERR_INTERNAL, "MG-API-INTERNAL",
                            "unexpected exit code " + std::to_string(code)));
    }
    char* out = static_cast<char*>(std::malloc(report.size() + 1));
    if (out == nullptr) throw std::bad_alloc();
    std::memcpy(out, report.data(), report.size());
    out[report.size()] = '\0';
    *report_json = out;
    *verdict = code;
    Clear(err);
    return MG_OK;
  });
}
