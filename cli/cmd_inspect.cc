#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "exit_code.h"
#include "options.h"

namespace modelgate::cli {
namespace {

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

std::string RenderInspectText(const scanner::FileScan& s, Verdict verdict,
                              const std::map<std::string, DtypeStats>& dtypes, uint64_t params) {
  std::string out;
  const std::string path = DisplayPath(s.path);
  out += "file:        " + path + "\n";
  out += "format:      " + std::string(scanner::FormatName(s.format)) + "\n";
  out += "size:        " + Grouped(s.size) + " bytes\n";
  out += "verdict:     " + std::string(VerdictName(verdict)) + "\n";
  for (const auto& f : s.findings) out += FindingLine(path, f, /*color=*/false);
  if (!s.imports.empty()) {
    out += "imports (global, safety, member:offset, opcode; what loading would import):\n";
    for (const auto& g : FoldImports(s)) {
      out += "  " + core::Quoted(g.name) + "  " + g.safety + "  " +
             (g.member.empty() ? "" : core::Quoted(g.member) + ":") + std::to_string(g.offset) +
             "  " + g.opcode + (g.count > 1 ? "  (x" + std::to_string(g.count) + ")" : "") +
             (g.reason.empty() ? "" : "  " + g.reason) + "\n";
    }
  }
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

std::string RenderInspectJson(const scanner::FileScan& s, Verdict verdict,
                              const std::map<std::string, DtypeStats>& dtypes, uint64_t params) {
  using nlohmann::ordered_json;
  ordered_json doc;
  doc["schema"] = "modelgate.inspect/v1";
  doc["tool"] = {{"name", "modelgate"}, {"version", std::string(core::kVersion)}};
  doc["path"] = s.path;
  doc["format"] = std::string(scanner::FormatName(s.format));
  doc["size"] = s.size;
  doc["verdict"] = VerdictName(verdict);
  ordered_json findings = ordered_json::array();
  for (const auto& f : s.findings) {
    ordered_json x{{"id", f.id}, {"severity", std::string(core::SeverityName(f.severity))},
                   {"message", f.message}};
    if (f.offset != core::kNoOffset) x["offset"] = f.offset;
    findings.push_back(std::move(x));
  }
  doc["findings"] = std::move(findings);
  if (!s.imports.empty()) {
    ordered_json imports = ordered_json::array();
    for (const auto& g : FoldImports(s)) {
      ordered_json x{{"global", g.name}, {"module", g.module}, {"qualname", g.qualname},
                     {"safety", g.safety}, {"offset", g.offset}, {"opcode", g.opcode},
                     {"count", g.count}};
      if (!g.member.empty()) x["member"] = g.member;
      if (!g.reason.empty()) x["reason"] = g.reason;
      imports.push_back(std::move(x));
    }
    doc["imports"] = std::move(imports);
  }
  if (s.safetensors) {
    const auto& st = *s.safetensors;
    doc["header_bytes"] = st.header_bytes;
    doc["data_start"] = st.data_start;
    doc["tensor_count"] = st.tensors.size();
    doc["parameters"] = params;
    ordered_json dj = ordered_json::object();
    for (const auto& [name, d] : dtypes) {
      dj[name] = {{"tensors", d.tensors}, {"parameters", d.parameters}, {"bytes", d.bytes}};
    }
    doc["dtypes"] = std::move(dj);
    ordered_json meta = ordered_json::object();
    for (const auto& [k, v] : st.metadata) meta[k] = v;
    doc["metadata"] = std::move(meta);
    ordered_json tensors = ordered_json::array();
    for (const auto& t : st.tensors) {
      tensors.push_back({{"name", t.name},
                         {"dtype", std::string(core::DtypeName(t.dtype))},
                         {"shape", t.shape},
                         {"data_offsets", {t.begin, t.end}},
                         {"offset", t.file_begin()},
                         {"bytes", t.size_bytes()}});
    }
    doc["tensors"] = std::move(tensors);
  }
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace

int RunInspect(const std::vector<std::string>& args) {
  CommonOptions opts;
  std::string error;
  if (!ParseOptions(args, {"-f", "-o", "-q", "--fail-on", "--yara-rules", "--yara-scope", "--no-yara"},
                    &opts, &error)) {
    return Usage(error);
  }
  if (opts.paths.size() != 1) return Usage("inspect takes exactly one FILE");
  if (opts.format == "sarif") return Usage("inspect writes text or json, not sarif");

  scanner::ScanOptions scan_options;
  if (!ConfigureYara(opts, &scan_options)) return kExitCannotJudge;
  scanner::FileScan s = scanner::ScanFile(opts.paths[0], /*follow_symlink=*/true, scan_options);
  const Verdict verdict = Judge(s, opts.fail_on);

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
  const std::string text = opts.format == "json" ? RenderInspectJson(s, verdict, dtypes, params)
                                                 : RenderInspectText(s, verdict, dtypes, params);
  if (!WriteOutput(opts.out_path, text)) return kExitCannotJudge;
  if (verdict == Verdict::kError) return kExitCannotJudge;
  return verdict == Verdict::kReject ? kExitRejected : kExitPass;
}

}  // namespace modelgate::cli
