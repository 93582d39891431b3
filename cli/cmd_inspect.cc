#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

// The GGUF parser is a scanner internal (the loader models use it); inspect
// shows the header it parsed.
#include "../scanner/src/gguf.h"
#include "cli.h"
#include "json_stream.h"
#include "exit_code.h"
#include "options.h"
#include "stdin_spool.h"

namespace modelgate::cli {
namespace {

using scanner::internal::GgufInfo;

// One imported global per (member, name), first offset, times imported.
struct FoldedImport {
  std::string member, name, module, qualname, safety, opcode, reason;
  uint64_t offset = 0, count = 0;
};

std::vector<FoldedImport> FoldImports(const scanner::FileScan& s) {
  std::vector<FoldedImport> out;
  std::map<std::pair<std::string, std::string>, size_t> seen;
  for (const auto& i : s.imports) {
    const auto& p = i.pickle;
    auto key = std::make_pair(i.member, p.FullName());
    auto it = seen.find(key);
    if (it != seen.end()) {
      ++out[it->second].count;
      continue;
    }
    seen.emplace(key, out.size());
    out.push_back(FoldedImport{i.member, p.FullName(), p.module, p.qualname,
                               std::string(scanner::GlobalClassName(p.safety)), p.opcode,
                               p.reason, p.offset, 1});
  }
  return out;
}

struct DtypeStats {
  uint64_t tensors = 0, parameters = 0, bytes = 0;
};

std::string ShapeText(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// Groups digits: 1234567 -> "1,234,567".
std::string Grouped(uint64_t v) {
  std::string s = std::to_string(v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

std::string GgufTypeText(uint32_t type) {
  const std::string_view name = scanner::internal::GgmlTypeName(type);
  return name.empty() ? "type " + std::to_string(type) : std::string(name);
}

std::string RenderGgufText(const GgufInfo& g) {
  std::string out;
  out += "gguf:        version " + std::to_string(g.version) + ", " +
         (g.big_endian ? "big" : "little") + "-endian, alignment " +
         std::to_string(g.alignment) + "\n";
  out += "metadata:    " + Grouped(g.kv_count) + " keys\n";
  out += "header:      " + Grouped(g.data_start) + " bytes; data starts at " +
         std::to_string(g.data_start) + " (" + Grouped(g.data_bytes) +
         " bytes of tensor data)\n";
  out += "tensors:     " + Grouped(g.tensors.size()) + "\n";
  out += "tensors (name, type, shape, offset in the file, bytes):\n";
  for (const auto& t : g.tensors) {
    out += "  " + core::Quoted(t.name) + "  " + GgufTypeText(t.type) + "  " + ShapeText(t.dims) +
           "  " + std::to_string(g.data_start + t.offset) + "  " + std::to_string(t.bytes) + "\n";
  }
  return out;
}

std::string RenderInspectText(const scanner::FileScan& s, Verdict verdict,
                              const std::map<std::string, DtypeStats>& dtypes, uint64_t params,
                              bool color, const std::optional<GgufInfo>& gguf) {
  std::string out;
  const std::string path = DisplayPath(s.path);
  out += "file:        " + path + "\n";
  out += "format:      " + std::string(scanner::FormatName(s.format)) + "\n";
  out += "size:        " + Grouped(s.size) + " bytes\n";
  out += "verdict:     " + std::string(VerdictName(verdict)) + "\n";
  for (const auto& f : s.findings) out += FindingLine(path, f, color);
  if (!s.imports.empty()) {
    out += "imports (global, safety, member:offset, opcode; what loading would import):\n";
    for (const auto& g : FoldImports(s)) {
      out += "  " + core::Quoted(g.name) + "  " + g.safety + "  " +
             (g.member.empty() ? "" : core::Quoted(g.member) + ":") + std::to_string(g.offset) +
             "  " + g.opcode + (g.count > 1 ? "  (x" + std::to_string(g.count) + ")" : "") +
             (g.reason.empty() ? "" : "  " + core::EscapeControls(g.reason)) + "\n";
    }
  }
  if (gguf) out += RenderGgufText(*gguf);
  if (!s.safetensors) return out;
  const auto& st = *s.safetensors;
  out += "header:      " + Grouped(st.header_bytes) + " bytes; data starts at " +
         std::to_string(st.data_start) + "\n";
  out += "tensors:     " + Grouped(st.tensors.size()) + "\n";
  out += "parameters:  " + Grouped(params) + "\n";
  out += "dtypes:\n";
  for (const auto& [name, d] : dtypes) {
    out += "  " + name + ": " + Grouped(d.tensors) + " tensors, " + Grouped(d.parameters) +
           " parameters, " + Grouped(d.bytes) + " bytes\n";
  }
  out += "metadata:" + std::string(st.metadata.empty() ? " (none)\n" : "\n");
  for (const auto& [k, v] : st.metadata) {
    out += "  " + core::Quoted(k) + ": " + core::Quoted(v) + "\n";
  }
  out += "tensors (name, dtype, shape, data_offsets, bytes):\n";
  for (const auto& t : st.tensors) {
    out += "  " + core::Quoted(t.name) + "  " + std::string(core::DtypeName(t.dtype)) + "  " +
           ShapeText(t.shape) + "  [" + std::to_string(t.begin) + "," + std::to_string(t.end) +
           ")  " + std::to_string(t.size_bytes()) + "\n";
  }
  return out;
}

// RenderGgufJson writes the "gguf" object: the header's layout and every
// tensor, "offset" absolute as for safetensors, "data_offset" as written.
void RenderGgufJson(const GgufInfo& g, JsonStream& j) {
  j.Key("gguf");
  j.BeginObject();
  j.Member("version", g.version);
  j.Member("endianness", g.big_endian ? "big" : "little");
  j.Member("alignment", g.alignment);
  j.Member("kv_count", g.kv_count);
  j.Member("data_start", g.data_start);
  j.Member("data_bytes", g.data_bytes);
  j.Member("tensor_count", g.tensors.size());
  j.Key("tensors");
  j.BeginArray();
  for (const auto& t : g.tensors) {
    j.BeginObject();
    j.Name("name", t.name);
    j.Member("type", GgufTypeText(t.type));
    j.Member("type_id", t.type);
    j.Key("shape");
    j.BeginArray();
    for (uint64_t d : t.dims) j.Number(d);
    j.EndArray();
    j.Member("data_offset", t.offset);
    j.Member("offset", g.data_start + t.offset);
    j.Member("bytes", t.bytes);
    j.EndObject();
  }
  j.EndArray();
  j.EndObject();
}

void RenderInspectJson(const scanner::FileScan& s, Verdict verdict,
                       const std::map<std::string, DtypeStats>& dtypes, uint64_t params,
                       const std::optional<GgufInfo>& gguf, JsonStream& j) {
  j.BeginObject();
  j.Member("schema", "modelgate.inspect/v1");
  j.Key("tool");
  j.BeginObject();
  j.Member("name", "modelgate");
  j.Member("version", core::kVersion);
  j.EndObject();
  j.Name("path", s.path);
  j.Member("format", scanner::FormatName(s.format));
  j.Member("size", s.size);
  j.Member("verdict", VerdictName(verdict));
  j.Key("findings");
  j.BeginArray();
  for (const auto& f : s.findings) {
    j.BeginObject();
    j.Member("id", f.id);
    j.Member("severity", core::SeverityName(f.severity));
    j.Member("message", f.message);
    if (f.offset != core::kNoOffset) j.Member("offset", f.offset);
    j.EndObject();
  }
  j.EndArray();
  if (!s.imports.empty()) {
    j.Key("imports");
    j.BeginArray();
    for (const auto& g : FoldImports(s)) {
      j.BeginObject();
      j.Member("global", g.name);
      j.Member("module", g.module);
      j.Member("qualname", g.qualname);
      j.Member("safety", g.safety);
      j.Member("offset", g.offset);
      j.Member("opcode", g.opcode);
      j.Member("count", g.count);
      if (!g.member.empty()) j.Name("member", g.member);
      if (!g.reason.empty()) j.Member("reason", g.reason);
      j.EndObject();
    }
    j.EndArray();
  }
  if (gguf) RenderGgufJson(*gguf, j);
  if (s.safetensors) {
    const auto& st = *s.safetensors;
    j.Member("header_bytes", st.header_bytes);
    j.Member("data_start", st.data_start);
    j.Member("tensor_count", st.tensors.size());
    j.Member("parameters", params);
    j.Key("dtypes");
    j.BeginObject();
    for (const auto& [name, d] : dtypes) {
      j.Key(name);
      j.BeginObject();
      j.Member("tensors", d.tensors);
      j.Member("parameters", d.parameters);
      j.Member("bytes", d.bytes);
      j.EndObject();
    }
    j.EndObject();
    j.Key("metadata");  // keys unique and sorted: the parser rejects duplicates
    j.BeginObject();
    for (const auto& [k, v] : st.metadata) j.Member(k, v);
    j.EndObject();
    j.Key("tensors");
    j.BeginArray();
    for (const auto& t : st.tensors) {
      j.BeginObject();
      j.Member("name", t.name);
      j.Member("dtype", core::DtypeName(t.dtype));
      j.Key("shape");
      j.BeginArray();
      for (uint64_t d : t.shape) j.Number(d);
      j.EndArray();
      j.Key("data_offsets");
      j.BeginArray();
      j.Number(t.begin);
      j.Number(t.end);
      j.EndArray();
      j.Member("offset", t.file_begin());
      j.Member("bytes", t.size_bytes());
      j.EndObject();
    }
    j.EndArray();
  }
  j.EndObject();
}

// InspectGguf parses the GGUF header of the file the scan judged, from the
// same descriptor (a guarded mapping: a file that shrinks reads zeros, and
// then nothing is shown). Its findings are the scan's to report.
std::optional<GgufInfo> InspectGguf(const core::OpenedFile& file, const scanner::FileScan& s) {
  if (s.format != scanner::Format::kGguf || s.io_error) return std::nullopt;
  auto mapped = core::GuardedMapping::Map(file.fd, file.size);
  if (!mapped.ok()) return std::nullopt;
  std::vector<scanner::Finding> findings;
  auto info = scanner::internal::ParseGguf(mapped.value().bytes(), {}, &findings);
  if (mapped.value().faulted()) return std::nullopt;
  return info;
}

// InspectPath judges the file at `path` as ScanFile does, keeping the
// descriptor for the GGUF header.
scanner::FileScan InspectPath(const std::string& path, const scanner::ScanOptions& scan_options,
                              std::optional<GgufInfo>* gguf) {
  auto opened = core::OpenRegularFile(path, /*follow_symlink=*/true);
  if (!opened.ok()) {
    scanner::FileScan s;
    s.path = path;
    s.io_error = true;
    s.findings.push_back(scanner::FindingFromError(opened.error()));
    return s;
  }
  scanner::FileScan s = scanner::ScanOpened(opened.value(), path, scan_options);
  *gguf = InspectGguf(opened.value(), s);
  return s;
}

// InspectStdin judges standard input as ScanFile judges a named file: the
// spooled copy is the one descriptor every read uses.
scanner::FileScan InspectStdin(const scanner::ScanOptions& scan_options,
                               std::optional<GgufInfo>* gguf) {
  const std::string path(kStdinPath);
  auto spooled = SpoolToTempFile(STDIN_FILENO, kMaxStdinBytes);
  if (!spooled.ok()) {
    scanner::FileScan s;
    s.path = path;
    s.io_error = true;
    s.findings.push_back(scanner::FindingFromError(spooled.error()));
    return s;
  }
  scanner::FileScan s = scanner::ScanOpened(spooled.value(), path, scan_options);
  *gguf = InspectGguf(spooled.value(), s);
  if (auto same = core::CheckUnchanged(spooled.value()); !same.ok()) {
    s.io_error = true;
    s.findings.push_back(scanner::FindingFromError(same.error()));
  }
  return s;
}

}  // namespace

int RunInspect(const CommonOptions& opts) {
  if (opts.paths.size() != 1) return Usage("inspect", "takes exactly one FILE");

  scanner::ScanOptions scan_options;
  if (!ConfigureYara(opts, &scan_options)) return kExitCannotJudge;
  std::optional<GgufInfo> gguf;
  scanner::FileScan s = opts.paths[0] == kStdinPath
                            ? InspectStdin(scan_options, &gguf)
                            : InspectPath(opts.paths[0], scan_options, &gguf);
  const Verdict verdict = Judge(s, opts.fail_on);
  const bool color = UseColor(opts, ::isatty(STDOUT_FILENO) == 1, std::getenv("NO_COLOR"));

  std::map<std::string, DtypeStats> dtypes;
  uint64_t params = 0;
  if (s.safetensors) {
    for (const auto& t : s.safetensors->tensors) {
      auto& d = dtypes[std::string(core::DtypeName(t.dtype))];
      ++d.tensors;
      d.parameters += t.ElementCount();  // each <= 2 x file size: no overflow
      d.bytes += t.size_bytes();
      params += t.ElementCount();
    }
  }
  if (opts.format == "json") {
    // Streamed: the document of a million tensors never sits in memory.
    const bool written = StreamOutput(opts.out_path, [&](std::ostream& out) {
      JsonStream j(out);
      RenderInspectJson(s, verdict, dtypes, params, gguf, j);
      return j.Finish();
    });
    if (!written) return kExitCannotJudge;
  } else if (!WriteOutput(opts.out_path, RenderInspectText(s, verdict, dtypes, params, color, gguf))) {
    return kExitCannotJudge;
  }
  if (verdict == Verdict::kError) return kExitCannotJudge;
  return verdict == Verdict::kReject ? kExitRejected : kExitPass;
}

}  // namespace modelgate::cli
