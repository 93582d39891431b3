#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ext/stdio_filebuf.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include <nlohmann/json.hpp>

#include "json_stream.h"

#include "cli.h"
#include "modelgate/atomic_file.h"

namespace modelgate::cli {

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kPass: return "pass";
    case Verdict::kReject: return "reject";
    case Verdict::kError: return "error";
  }
  return "error";
}

Verdict Judge(const scanner::FileScan& scan, core::Severity fail_on) {
  if (scan.io_error) return Verdict::kError;
  if (scan.unparseable) return Verdict::kReject;
  for (const auto& f : scan.findings) {
    if (f.severity <= fail_on) return Verdict::kReject;  // lower enum = more severe
  }
  return Verdict::kPass;
}

Summary Summarize(const std::vector<FileReport>& files) {
  Summary s;
  s.files = files.size();
  for (const auto& f : files) {
    if (f.verdict == Verdict::kPass) ++s.passed;
    if (f.verdict == Verdict::kReject) ++s.rejected;
    if (f.verdict == Verdict::kError) ++s.errors;
  }
  return s;
}

std::string SummaryLine(const Summary& s) {
  return std::to_string(s.files) + (s.files == 1 ? " file: " : " files: ") +
         std::to_string(s.passed) + " passed, " + std::to_string(s.rejected) + " rejected, " +
         std::to_string(s.errors) + (s.errors == 1 ? " error" : " errors");
}

std::string DisplayPath(const std::string& path) {
  std::string q = core::Quoted(path, SIZE_MAX);
  // Unchanged by quoting (no escapes were needed) and no spaces: print bare.
  if (q.size() == path.size() + 2 && path.find(' ') == std::string::npos) return path;
  return q;
}

std::string NameBytes(const std::string& name) {
  if (core::IsUtf8(name)) return "";
  return core::HexLower({reinterpret_cast<const uint8_t*>(name.data()), name.size()});
}

namespace {

// PutName sets o[key] to `name`; a name that is not UTF-8 goes in escaped,
// never as U+FFFD (two such paths would meet), with its exact bytes beside it.
void PutName(nlohmann::ordered_json& o, const std::string& key, const std::string& name) {
  o[key] = core::EscapeInvalidUtf8(name);
  if (std::string hex = NameBytes(name); !hex.empty()) o[key + "_bytes"] = std::move(hex);
}

}  // namespace

namespace {

// Head is the report's document fields before `files`.
nlohmann::ordered_json Head(const Report& report) {
  using nlohmann::ordered_json;
  ordered_json doc;
  doc["schema"] = "modelgate.report/v1";
  doc["tool"] = {{"name", "modelgate"}, {"version", std::string(core::kVersion)}};
  if (!report.policy_path.empty()) {
    // What the run was judged under, so a registry can record it with what
    // it admitted.
    ordered_json policy;
    PutName(policy, "path", report.policy_path);
    if (report.policy_sha256) policy["sha256"] = core::HexLower(*report.policy_sha256);
    doc["policy"] = std::move(policy);
  }
  return doc;
}

nlohmann::ordered_json SummaryJson(const Summary& s) {
  return {{"files", s.files}, {"passed", s.passed}, {"rejected", s.rejected}, {"errors", s.errors}};
}

}  // namespace

// FindingJson: one entry of a file's "findings" (json_stream.h).
nlohmann::ordered_json FindingJson(const scanner::Finding& fd) {
  using nlohmann::ordered_json;
  ordered_json x;
  x["id"] = fd.id;
  x["severity"] = std::string(core::SeverityName(fd.severity));
  x["message"] = fd.message;
  if (fd.offset != core::kNoOffset) x["offset"] = fd.offset;
  if (!fd.member.empty()) PutName(x, "member", fd.member);
  if (fd.member_offset != core::kNoOffset) x["member_offset"] = fd.member_offset;
  if (!fd.opcode.empty()) x["opcode"] = fd.opcode;
  if (!fd.global.empty()) x["global"] = fd.global;
  // YARA findings folded into this one (the same cause, seen twice).
  if (!fd.corroborated_by.empty()) x["corroborated_by"] = fd.corroborated_by;
  if (fd.line != 0) {  // a text-like file: where `offset` is, as SARIF's region
    x["line"] = fd.line;
    x["column"] = fd.column;
  }
  if (fd.waived) {  // a policy exception: reported, not counted
    x["waived"] = {{"reason", fd.waived->reason},
                   {"expires", fd.waived->expires},
                   {"severity", std::string(core::SeverityName(fd.waived->severity))}};
  }
  return x;
}

namespace {

// FileJson is one entry of `files`.
nlohmann::ordered_json FileJson(const FileReport& f) {
  using nlohmann::ordered_json;
  {
    const auto& s = f.scan;
    ordered_json j;
    PutName(j, "path", s.path);
    if (!f.target.empty()) PutName(j, "target", f.target);  // the HF cache blob judged under `path`
    j["format"] = std::string(scanner::FormatName(s.format));
    j["size"] = s.size;
    if (f.sha256) j["sha256"] = core::HexLower(*f.sha256);
    j["verdict"] = VerdictName(f.verdict);
    ordered_json findings = ordered_json::array();
    for (const auto& fd : s.findings) findings.push_back(FindingJson(fd));
    j["findings"] = std::move(findings);
    // Every reading a loader would make of the file (docs/loader-models.md).
    ordered_json views = ordered_json::array();
    for (const auto& view : s.views) {
      views.push_back({{"loader", view.loader},
                       {"format", std::string(scanner::FormatName(view.format))}});
    }
    j["views"] = std::move(views);
    ordered_json sig{{"status", f.signature.status}};
    if (!f.signature.key_ids.empty()) {
      sig["key_id"] = f.signature.key_ids.front();  // the contract's single id
      sig["key_ids"] = f.signature.key_ids;
      sig["key_names"] = f.signature.key_names;
    }
    if (!f.signature.kind.empty()) sig["kind"] = f.signature.kind;
    if (!f.signature.model.empty()) sig["model"] = f.signature.model;
    if (f.signature.version) sig["version"] = *f.signature.version;
    if (!f.signature.detached_state.empty()) sig["detached_state"] = f.signature.detached_state;
    j["signature"] = std::move(sig);
    if (s.safetensors) j["tensors"] = s.safetensors->tensors.size();
    return j;
  }
}

// Dump: invalid UTF-8 left in a message or global becomes U+FFFD rather
// than an exception.
std::string Dump(const nlohmann::ordered_json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace

std::string RenderJsonLine(const FileReport& file) { return Dump(FileJson(file), -1); }

std::string RenderJsonlEnd(const Report& report) {
  nlohmann::ordered_json doc = Head(report);
  doc["summary"] = SummaryJson(report.summary);
  return Dump(doc, -1);
}

std::string RenderJson(const Report& report) {
  using nlohmann::ordered_json;
  ordered_json doc = Head(report);
  ordered_json files = ordered_json::array();
  for (const auto& f : report.files) files.push_back(FileJson(f));
  doc["files"] = std::move(files);
  doc["summary"] = SummaryJson(report.summary);
  // Invalid UTF-8 left in a message or global becomes U+FFFD rather than an
  // exception.
  return Dump(doc, 2);
}

bool WriteOutput(const std::string& out_path, const std::string& text) {
  if (out_path.empty()) {
    std::cout << text << std::flush;
    if (!std::cout) {
      std::cerr << "modelgate: cannot write the report to stdout\n";
      return false;
    }
    return true;
  }
  auto s = core::WriteFileAtomic(
      out_path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()}, 0644);
  if (!s.ok()) {
    std::cerr << "modelgate: " << s.error().message << "\n";
    return false;
  }
  return true;
}

bool StreamOutput(const std::string& out_path, const std::function<bool(std::ostream&)>& write) {
  if (out_path.empty()) {
    if (!write(std::cout) || !(std::cout << std::flush)) {
      std::cerr << "modelgate: cannot write the report to stdout\n";
      return false;
    }
    return true;
  }
  // Through a core::AtomicOutput, as core::WriteFileAtomic: the existing
  // file's mode kept, no temp file outlives a kill; the document never sits
  // in memory.
  unsigned mode = 0644;
  struct stat old {};
  if (::stat(out_path.c_str(), &old) == 0) mode = old.st_mode & 07777;
  auto created = core::AtomicOutput::Create(out_path, static_cast<mode_t>(mode));
  if (!created.ok()) {
    std::cerr << "modelgate: " << created.error().message << "\n";
    return false;
  }
  core::AtomicOutput file = std::move(created).value();
  const int fd = ::dup(file.fd());  // the stream's own descriptor of the same file (it closes it)
  bool ok = fd >= 0;
  if (ok) {
    __gnu_cxx::stdio_filebuf<char> buf(fd, std::ios::out | std::ios::binary);
    std::ostream out(&buf);
    ok = write(out) && static_cast<bool>(out.flush());
    ok = buf.close() != nullptr && ok;
  }
  if (!ok) {
    std::cerr << "modelgate: cannot write " << DisplayPath(out_path) << ": " << std::strerror(errno)
              << "\n";
    return false;
  }
  if (auto s = file.Commit(); !s.ok()) {
    std::cerr << "modelgate: " << s.error().message << "\n";
    return false;
  }
  return true;
}

}  // namespace modelgate::cli
