// Policy evaluation: a scan and a verification judged under a policy, plus
// the scanner/signer configuration a policy asks for and lint warnings.
#include <algorithm>
#include <set>
#include <utility>

#include "modelgate/policy.h"

namespace modelgate::policy {
namespace {

bool IsPickleFinding(const scanner::Finding& f) { return f.id.rfind("MG-PK-", 0) == 0; }

bool IsPickleFormat(scanner::Format f) {
  return f == scanner::Format::kPickle || f == scanner::Format::kPytorchZip ||
         f == scanner::Format::kPytorchTar || f == scanner::Format::kJoblib;
}

JudgedFinding PolicyFinding(std::string_view id, core::Severity severity, std::string message,
                            uint64_t offset = core::kNoOffset) {
  JudgedFinding j;
  j.finding = scanner::MakeFinding(std::string(id), severity, std::move(message), offset);
  j.original_severity = severity;
  j.blocking = true;
  return j;
}

std::string At(const Policy& p, const Location& w) {
  return p.source + ":" + std::to_string(w.line) + ":" + std::to_string(w.column);
}

}  // namespace

std::string_view DecisionName(Decision d) {
  switch (d) {
    case Decision::kPass: return "pass";
    case Decision::kReject: return "reject";
    case Decision::kError: return "error";
  }
  return "error";
}

std::vector<scanner::Finding> Verdict::ReportedFindings() const {
  std::vector<scanner::Finding> out;
  out.reserve(findings.size());
  for (const auto& j : findings) out.push_back(j.finding);
  return out;
}

core::Result<scanner::ScanOptions> ScanOptionsFor(const Policy& policy) {
  scanner::ScanOptions o;
  o.limits = policy.limits;
  o.containers = policy.container_limits;
  o.pickle.limits = policy.pickle_limits;
  o.pickle.extra_safe_globals = policy.extra_allowed_globals;
  auto rules = scanner::CompileYaraRules(policy.yara_rule_dirs, /*with_default=*/true);
  if (!rules.ok()) return rules.error();
  o.yara = std::move(rules).value();
  o.yara_scope = policy.yara_scope;
  return o;
}

signer::VerifyOptions VerifyOptionsFor(const Policy& policy) {
  signer::VerifyOptions o;
  o.limits = policy.limits;
  return o;
}

std::vector<signer::PublicKey> TrustedKeys(const Policy& policy) {
  std::vector<signer::PublicKey> out;
  for (const auto& k : policy.keys) {
    out.push_back(k.key);
    out.back().name = k.name;
  }
  return out;
}

bool NeedsFileSha256(const Policy& policy) { return !policy.exceptions.empty(); }

core::Result<core::Sha256Digest> FileSha256(const std::string& path, bool follow_symlink,
                                            const core::HashOptions& hash) {
  auto file = core::OpenRegularFile(path, follow_symlink);
  if (!file.ok()) return file.error();
  return FileSha256(file.value().fd, file.value().size, hash);
}

core::Result<core::Sha256Digest> FileSha256(int fd, uint64_t size_bytes,
                                            const core::HashOptions& hash) {
  core::ByteRange all{0, size_bytes};
  auto digests = core::HashRanges(fd, std::span<const core::ByteRange>(&all, 1), hash);
  if (!digests.ok()) return digests.error();
  return digests.value().at(0);
}

Verdict Evaluate(const Policy& policy, const scanner::FileScan& scan,
                 const std::optional<signer::VerifyResult>& verify,
                 const std::optional<core::Sha256Digest>& file_sha256, const Date& today) {
  Verdict v;
  if (verify) v.signature_status = std::string(signer::SigStatusName(verify->status));
  for (const auto& f : scan.findings) {
    JudgedFinding j;
    j.finding = f;
    j.original_severity = f.severity;
    // Rule 6 (failOn) and rule 3 (pickle report never blocks).
    j.blocking = f.severity <= policy.fail_on &&
                 !(policy.pickle_mode == PickleMode::kReport && IsPickleFinding(f));
    v.findings.push_back(std::move(j));
  }
  if (scan.io_error) {
    v.decision = Decision::kError;
    return v;
  }

  // Rule 2: formats.
  // Every reading a loader would make must be of an allowed format, not only
  // the reported one: a safetensors file that torch.load reads as a tar is
  // not "safetensors only".
  if (policy.allowed_formats) {
    const auto& allowed = *policy.allowed_formats;
    std::vector<std::pair<scanner::Format, std::string>> formats = {{scan.format, ""}};
    for (const auto& view : scan.views) formats.emplace_back(view.format, view.loader);
    for (const auto& [format, loader] : formats) {
      if (std::find(allowed.begin(), allowed.end(), format) != allowed.end()) continue;
      std::string list;
      for (auto f : allowed) list += (list.empty() ? "" : ", ") + std::string(scanner::FormatName(f));
      v.findings.push_back(PolicyFinding(
          kFindingFormat, core::Severity::kHigh,
          "format " + std::string(scanner::FormatName(format)) +
              (loader.empty() ? "" : " (as " + loader + " reads it)") +
              " is not allowed by the policy (allowed: " + (list.empty() ? "none" : list) + ")"));
      break;
    }
  }

  // Rule 3: pickle mode reject.
  if (policy.pickle_mode == PickleMode::kReject) {
    const scanner::Finding* first = nullptr;
    for (const auto& f : scan.findings) {
      if (IsPickleFinding(f)) {
        first = &f;
        break;
      }
    }
    if (first || !scan.imports.empty() || IsPickleFormat(scan.format)) {
      auto j = PolicyFinding(kFindingPickle, core::Severity::kCritical,
                             "the policy rejects pickle content (pickle.mode: reject)",
                             first ? first->offset : core::kNoOffset);
      if (first) {
        j.finding.member = first->member;
        j.finding.member_offset = first->member_offset;
      }
      v.findings.push_back(std::move(j));
    }
  }

  // Rule 4: signatures. Only the policy's own keys count, each once.
  std::set<std::string> policy_kids;
  for (const auto& k : policy.keys) policy_kids.insert(k.key.kid_hex());
  size_t trusted_count = 0;
  if (verify) {
    std::set<std::string> counted;
    for (const auto& kid : verify->verified_kids) {
      if (policy_kids.count(kid) && counted.insert(kid).second) {
        ++trusted_count;
        for (const auto& k : policy.keys) {
          if (k.key.kid_hex() == kid) v.signed_by.push_back(k.name);
        }
      }
    }
  }
  if (verify && verify->status == signer::SigStatus::kInvalid) {
    v.findings.push_back(PolicyFinding(kFindingSignature, core::Severity::kHigh,
                                       "invalid: " + verify->reason.message));
  } else if (policy.signatures_required) {
    std::string need = "the policy requires " + std::to_string(policy.threshold) +
                       (policy.threshold == 1 ? " trusted signature" : " trusted signatures");
    if (!verify) {
      v.signature_status = "missing";
      v.findings.push_back(PolicyFinding(
          kFindingSignature, core::Severity::kHigh,
          "missing: " + need + "; " + scanner::WithArticle(scanner::FormatName(scan.format)) +
              " file carries no embedded signature"));
    } else if (verify->status == signer::SigStatus::kMissing) {
      v.findings.push_back(PolicyFinding(kFindingSignature, core::Severity::kHigh,
                                         "missing: " + need + "; the file is not signed"));
    } else if (verify->status == signer::SigStatus::kUntrusted || trusted_count == 0) {
      v.signature_status = "untrusted";
      v.findings.push_back(PolicyFinding(kFindingSignature, core::Severity::kHigh,
                                         "untrusted: " + need +
                                             "; no signature is by a key the policy trusts"));
    } else if (trusted_count < policy.threshold) {
      v.signature_status = "untrusted";
      v.findings.push_back(PolicyFinding(
          kFindingSignature, core::Severity::kHigh,
          "untrusted: " + need + "; " + std::to_string(trusted_count) + " of " +
              std::to_string(policy.threshold) + " distinct trusted keys signed"));
    }
  }

  // Rule 5: exceptions.
  if (file_sha256) {
    for (const auto& e : policy.exceptions) {
      if (e.sha256 != *file_sha256) continue;
      if (today > e.expires) {
        v.findings.push_back(PolicyFinding(
            kFindingExceptionExpired, core::Severity::kInfo,
            "exception for " + e.id + " expired on " + FormatDate(e.expires) +
                " and no longer applies (" + e.reason + ")"));
        v.findings.back().blocking = false;
        continue;
      }
      for (auto& j : v.findings) {
        if (j.waived || j.finding.id != e.id) continue;
        j.waived = true;
        j.blocking = false;
        j.finding.message = "waived until " + FormatDate(e.expires) + " (" + e.reason +
                            "); was " + std::string(core::SeverityName(j.original_severity)) +
                            ": " + j.finding.message;
        j.finding.severity = core::Severity::kInfo;
      }
    }
  }

  // Rule 7.
  bool blocked = scan.unparseable;
  for (const auto& j : v.findings) blocked |= j.blocking;
  v.decision = blocked ? Decision::kReject : Decision::kPass;
  return v;
}

std::vector<Problem> LintParsed(const Policy& p, const Date& today) {
  std::vector<Problem> out;
  auto warn = [&](const Location& w, std::string message) {
    out.push_back(Problem{Problem::Level::kWarning, At(p, w) + ": " + std::move(message)});
  };
  for (const auto& e : p.exceptions) {
    int64_t days = DaysBetween(today, e.expires);
    if (days < 0) {
      warn(e.where, "exception for " + e.id + " expired on " + FormatDate(e.expires) +
                        " and no longer applies");
    } else if (days <= 30) {
      warn(e.where, "exception for " + e.id + " expires on " + FormatDate(e.expires) + " (in " +
                        std::to_string(days) + " day(s))");
    }
  }
  if (p.allowed_formats && p.allowed_formats->empty()) {
    warn(p.formats_where, "formats.allow is empty: every file is rejected");
  }
  if (!p.signatures_required && !p.keys.empty()) {
    warn(p.keys_where, "keys are listed but signatures.required is not true: an unsigned file "
                       "passes");
  }
  if (!p.signatures_required && p.threshold_where.line > 0) {
    warn(p.threshold_where, "signatures.threshold has no effect unless signatures.required is "
                            "true");
  }
  for (size_t i = 0; i < p.extra_allowed_globals.size(); ++i) {
    const auto& [module, qualname] = p.extra_allowed_globals[i];
    if (scanner::ClassifyGlobal(module, qualname) == scanner::GlobalClass::kSafe &&
        i < p.extra_globals_where.size()) {
      warn(p.extra_globals_where[i],
           core::Quoted(module + "." + qualname) + " is already allowed by the scanner");
    }
  }
  return out;
}

std::vector<Problem> LintPolicy(const std::string& path, const Date& today) {
  auto p = LoadPolicy(path);
  if (!p.ok()) return {Problem{Problem::Level::kError, p.error().message}};
  return LintParsed(p.value(), today);
}

}  // namespace modelgate::policy
