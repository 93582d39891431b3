// -f text: a table with one row per file, each file's findings under its
// row, and a one-line summary. Colour only when the caller asks (UseColor).
#include <array>
#include <string>
#include <vector>

#include "cli.h"
#include "progress.h"

namespace modelgate::cli {
namespace {

const char* Paint(bool color, core::Severity s) {
  if (!color) return "";
  switch (s) {
    case core::Severity::kCritical: return "\033[1;31m";
    case core::Severity::kHigh: return "\033[31m";
    case core::Severity::kMedium: return "\033[33m";
    default: return "\033[2m";
  }
}

// FindingCounts is "1 critical, 2 medium, 1 waived" (most severe first,
// waived findings apart from the info they were turned into), or "-".
std::string FindingCounts(const std::vector<scanner::Finding>& findings) {
  std::array<size_t, 5> n{};  // indexed by Severity (kCritical = 0 ... kInfo)
  size_t waived = 0;
  for (const auto& f : findings) {
    const auto i = static_cast<size_t>(f.severity);
    if (f.waived) {
      ++waived;
    } else if (i < n.size()) {
      ++n[i];
    }
  }
  std::string out;
  for (size_t i = 0; i < n.size(); ++i) {
    if (n[i] == 0) continue;
    if (!out.empty()) out += ", ";
    out += std::to_string(n[i]) + " " +
           std::string(core::SeverityName(static_cast<core::Severity>(i)));
  }
  if (waived > 0) out += (out.empty() ? "" : ", ") + std::to_string(waived) + " waived";
  return out.empty() ? "-" : out;
}

// SignatureCell says exactly what the verification established: the key
// only for a valid signature, never a signer on an invalid or untrusted row.
std::string SignatureCell(const SignatureReport& sig) {
  const auto& st = sig.status;
  if (st == "not-checked") return "-";
  if (st == "valid") {
    std::string keys;
    for (size_t k = 0; k < sig.key_ids.size(); ++k) {
      const std::string& name = k < sig.key_names.size() ? sig.key_names[k] : "";
      keys += (keys.empty() ? "" : ", ") + (name.empty() ? sig.key_ids[k] : DisplayPath(name));
    }
    // A detached bundle says so; embedded records are the default reading.
    const std::string kind = sig.kind == "detached" ? "detached" : "";
    if (keys.empty()) return kind.empty() ? "valid" : "valid (" + kind + ")";
    return "valid (" + (kind.empty() ? "" : kind + ", ") +
           std::string(sig.key_ids.size() == 1 ? "key " : "keys ") + keys + ")";
  }
  if (st == "untrusted") {
    if (!sig.untrusted_key_ids.empty()) {
      std::string ids;
      for (const auto& id : sig.untrusted_key_ids) ids += (ids.empty() ? "" : ", ") + id;
      return "untrusted (key id" + std::string(sig.untrusted_key_ids.size() == 1 ? " " : "s ") +
             ids + " not trusted)";
    }
    // The policy's reading: records verified, but too few distinct trusted
    // keys, another model, an older version or a kind it does not accept
    // (the MG-POLICY-SIGNATURE finding says which).
    if (!sig.key_ids.empty()) return "untrusted (does not meet the policy's signatures rule)";
    return "untrusted";
  }
  return core::EscapeControls(st);  // invalid, missing
}

enum Column { kVerdict, kFormat, kSize, kTensors, kSignature, kFindings, kPath, kColumns };

struct Row {
  std::array<std::string, kColumns> cells;
  Verdict verdict = Verdict::kPass;
};

}  // namespace

std::string FindingLine(const std::string& path, const scanner::Finding& fd, bool color) {
  const char* reset = color ? "\033[0m" : "";
  std::string out = "  " + path;
  if (!fd.member.empty()) {
    out += "!" + core::Quoted(fd.member);
    if (fd.member_offset != core::kNoOffset) out += ":" + std::to_string(fd.member_offset);
  } else if (fd.offset != core::kNoOffset) {
    out += ":" + std::to_string(fd.offset);
  }
  // Messages hold names the scanner may not have quoted (and YARA ids come
  // from rule files): nothing in them may reach the terminal raw.
  // A waived finding says so where the severity would be: it is not an
  // open problem (its message keeps the reason, expiry and old severity).
  const std::string label = fd.waived ? "waived" : std::string(core::SeverityName(fd.severity));
  out += std::string(": ") + Paint(color, fd.severity) + core::EscapeControls(fd.id) + " (" +
         label + ")" + reset + ": " + core::EscapeControls(fd.message);
  // YARA rules folded into this finding (one finding per cause): named as
  // evidence, not counted again.
  if (!fd.corroborated_by.empty()) {
    out += " [also ";
    for (size_t i = 0; i < fd.corroborated_by.size(); ++i) {
      if (i > 0) out += ", ";
      out += core::EscapeControls(fd.corroborated_by[i]);
    }
    out += "]";
  }
  return out + "\n";
}

std::string RenderText(const Report& report, bool color) {
  const char* reset = color ? "\033[0m" : "";
  bool any_signature = false;
  for (const auto& f : report.files) any_signature |= f.signature.status != "not-checked";

  std::vector<Row> rows;
  rows.push_back({{"VERDICT", "FORMAT", "SIZE", "TENSORS", "SIGNATURE", "FINDINGS", "PATH"}});
  for (const auto& f : report.files) {
    const auto& s = f.scan;
    Row r;
    r.verdict = f.verdict;
    r.cells[kVerdict] = f.verdict == Verdict::kPass     ? "PASS"
                        : f.verdict == Verdict::kReject ? "REJECT"
                                                        : "ERROR";
    r.cells[kFormat] = std::string(scanner::FormatName(s.format));
    r.cells[kSize] = HumanBytes(s.size);
    r.cells[kTensors] = s.safetensors ? std::to_string(s.safetensors->tensors.size()) : "-";
    r.cells[kSignature] = SignatureCell(f.signature);
    r.cells[kFindings] = FindingCounts(s.findings);
    r.cells[kPath] = DisplayPath(s.path);
    rows.push_back(std::move(r));
  }
  std::array<size_t, kColumns> width{};
  for (const auto& r : rows) {
    for (size_t c = 0; c < kColumns; ++c) width[c] = std::max(width[c], r.cells[c].size());
  }

  std::string out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    if (i > 0 || !report.files.empty()) {
      std::string line;
      for (size_t c = 0; c < kColumns; ++c) {
        if (c == kSignature && !any_signature) continue;
        const std::string& cell = r.cells[c];
        if (c == kPath) {
          line += cell;
          break;
        }
        const std::string pad(width[c] - cell.size(), ' ');
        if (c == kSize || c == kTensors) {
          line += pad + cell;  // numbers align right
        } else if (c == kVerdict && i > 0 && color) {
          line += (r.verdict == Verdict::kPass ? "\033[32m" : "\033[1;31m") + cell + reset + pad;
        } else {
          line += cell + pad;
        }
        line += "  ";
      }
      out += line + "\n";
    }
    if (i == 0) continue;
    const FileReport& f = report.files[i - 1];
    // Which key signed is stated only where the signature holds.
    const size_t signers = f.signature.status == "valid" ? f.signature.key_ids.size() : 0;
    for (size_t k = 0; k < signers; ++k) {
      out += "  signed by key " + f.signature.key_ids[k];
      if (k < f.signature.key_names.size() && !f.signature.key_names[k].empty()) {
        out += " (" + core::Quoted(f.signature.key_names[k]) + ")";
      }
      // What was signed, for the record: the identity and version a policy
      // can require, and a detached bundle named as such.
      if (!f.signature.model.empty()) out += " for model " + core::Quoted(f.signature.model);
      if (f.signature.version) out += " version " + std::to_string(*f.signature.version);
      if (f.signature.kind == "detached") out += " in a detached bundle";
      out += "\n";
    }
    for (const auto& fd : f.scan.findings) out += FindingLine(r.cells[kPath], fd, color);
  }
  const auto& sm = report.summary;
  if (!report.files.empty()) out += "\n";
  out += SummaryLine(sm) + "\n";
  return out;
}

}  // namespace modelgate::cli
