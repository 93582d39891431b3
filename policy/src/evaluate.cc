// Policy evaluation: a scan and a verification judged under a policy, plus
// the scanner/signer configuration a policy asks for and lint warnings.
#include <algorithm>
#include <functional>
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

bool Accepts(const Policy& p, SignatureKind k) {
  return std::find(p.accept.begin(), p.accept.end(), k) != p.accept.end();
}

// Mismatch is why a signature by a trusted key for (`model`, `version`)
// does not meet signatures.model / minVersion; "" when it does.
std::string Mismatch(const Policy& p, std::string_view model, std::optional<uint64_t> version) {
  if (p.model && model != *p.model) {
    return (model.empty() ? std::string("signed with no model")
                          : "signed for model " + core::Quoted(model)) +
           ", the policy requires " + core::Quoted(*p.model);
  }
  if (p.min_version && (!version || *version < *p.min_version)) {
    return (version ? "signed version " + std::to_string(*version) + ", below"
                    : std::string("signed with no version; the policy requires")) +
           " minVersion " + std::to_string(*p.min_version) +
           (version ? " (an older release)" : "");
  }
  return "";
}

// KindResult is how one kind of signature stands against signatures:.
struct KindResult {
  bool satisfied = false;
  // A signature of this kind exists but does not satisfy (a key the policy
  // does not trust, too few keys, a wrong model or version, a kind the
  // policy does not accept): the status is then "untrusted", not "missing".
  bool present = false;
  std::string why;  // why it does not satisfy, a phrase for the message
  std::vector<std::string> names, kids;  // distinct policy keys that count
  std::string model;
  std::optional<uint64_t> version;
};

std::string CountWhy(size_t have, uint32_t need) {
  return std::to_string(have) + " of " + std::to_string(need) + " distinct trusted keys signed";
}

// Count judges signatures by `kids` (hex, any order, repeats allowed) whose
// (model, version) `signed_as` gives: the distinct policy keys among them
// whose signature meets model/minVersion, against the threshold.
void Count(const Policy& p, const std::vector<std::string>& kids,
           const std::function<std::vector<std::pair<std::string, std::optional<uint64_t>>>(
               const std::string& kid)>& signed_as,
           KindResult* r) {
  std::set<std::string> counted;
  size_t trusted = 0;
  std::string mismatch;
  for (const auto& kid : kids) {
    const TrustedKey* key = nullptr;
    for (const auto& k : p.keys) {
      if (k.key.kid_hex() == kid) key = &k;
    }
    if (!key || !counted.insert(kid).second) continue;
    ++trusted;
    auto options = signed_as(kid);
    if (options.empty()) options.emplace_back("", std::nullopt);
    bool met = false;
    for (const auto& [model, version] : options) {
      std::string why = Mismatch(p, model, version);
      if (why.empty()) {
        met = true;
        if (r->names.empty()) {
          r->model = model;
          r->version = version;
        }
        break;
      }
      if (mismatch.empty()) mismatch = why;
    }
    if (!met) continue;
    r->names.push_back(key->name);
    r->kids.push_back(kid);
  }
  r->present = !kids.empty();
  r->satisfied = trusted > 0 && r->names.size() >= p.threshold;
  if (r->satisfied) return;
  if (trusted == 0) {
    r->why = "no signature is by a key the policy trusts";
  } else if (r->names.empty() && !mismatch.empty()) {
    r->why = "a trusted key " + mismatch;
  } else {
    r->why = CountWhy(r->names.size(), p.threshold);
  }
}

KindResult EmbeddedResult(const Policy& p, const scanner::FileScan& scan,
                          const std::optional<signer::VerifyResult>& verify) {
  KindResult r;
  if (!verify) {
    r.why = scanner::WithArticle(scanner::FormatName(scan.format)) +
            " file carries no embedded signature";
    return r;
  }
  switch (verify->status) {
    case signer::SigStatus::kMissing: r.why = "the file is not signed"; return r;
    case signer::SigStatus::kInvalid:
      r.present = true;
      r.why = "invalid: " + verify->reason.message;
      return r;
    case signer::SigStatus::kUntrusted:
      r.present = true;
      r.why = "no signature is by a key the policy trusts";
      return r;
    case signer::SigStatus::kValid: break;
  }
  Count(p, verify->verified_kids,
        [&](const std::string& kid) {
          std::vector<std::pair<std::string, std::optional<uint64_t>>> out;
          for (const auto& rc : verify->records) {
            if (rc.outcome != signer::RecordCheck::Outcome::kVerified ||
                core::HexLower(rc.record.kid) != kid) {
              continue;
            }
            // STSIG's version 0 means "not given".
            out.emplace_back(rc.record.model, rc.record.version == 0
                                                  ? std::nullopt
                                                  : std::optional<uint64_t>(rc.record.version));
          }
          return out;
        },
        &r);
  if (verify->verified_kids.empty()) {
    r.present = true;
    r.why = "no signature is by a key the policy trusts";
  }
  return r;
}

KindResult DetachedResult(const Policy& p, const std::optional<DetachedEvidence>& d) {
  KindResult r;
  if (!d || d->bundle_status == signer::SigStatus::kMissing) {
    r.why = "no detached bundle covers it";
    return r;
  }
  switch (d->bundle_status) {
    case signer::SigStatus::kMissing: break;
    case signer::SigStatus::kInvalid:
      r.present = true;
      r.why = "the detached bundle is invalid" + (d->reason.empty() ? "" : ": " + d->reason);
      return r;
    case signer::SigStatus::kUntrusted:
      r.present = true;
      r.why = "the detached bundle is signed by no key the policy trusts";
      return r;
    case signer::SigStatus::kValid: break;
  }
  switch (d->state) {
    case DetachedState::kSigned: break;
    case DetachedState::kChanged:
      r.present = true;
      r.why = "the file changed since the detached bundle signed it";
      return r;
    case DetachedState::kAdded: r.why = "the file is not in the detached bundle"; return r;
    case DetachedState::kIgnored: r.why = "the detached bundle ignores the file"; return r;
  }
  Count(p, d->kids,
        [&](const std::string&) {
          return std::vector<std::pair<std::string, std::optional<uint64_t>>>{
              {d->model, d->version}};
        },
        &r);
  if (d->kids.empty()) {
    r.present = true;
    r.why = "the detached bundle is signed by no key the policy trusts";
  }
  return r;
}

// JudgeSignatures is Evaluate's rule 4 (policy.h).
void JudgeSignatures(const Policy& policy, const scanner::FileScan& scan,
                     const std::optional<signer::VerifyResult>& verify,
                     const std::optional<DetachedEvidence>& detached, Verdict* v) {
  const KindResult embedded = EmbeddedResult(policy, scan, verify);
  const KindResult bundle = DetachedResult(policy, detached);
  const bool bundle_valid = detached && detached->bundle_status == signer::SigStatus::kValid;
  const bool ignored = bundle_valid && detached->state == DetachedState::kIgnored;

  // What the report shows when nothing below decides otherwise: the
  // embedded verification as it is, or a valid bundle's coverage.
  if (verify && verify->status != signer::SigStatus::kMissing) {
    v->signature_kind = std::string(SignatureKindName(SignatureKind::kEmbedded));
    v->signed_by = embedded.names;
    v->signed_kids = embedded.kids;
  } else if (bundle_valid && detached->state == DetachedState::kSigned) {
    // Valid means by a key this policy trusts, as VerifyFd's status does.
    bool trusted = false;
    for (const auto& k : policy.keys) {
      trusted |= std::find(detached->kids.begin(), detached->kids.end(), k.key.kid_hex()) !=
                 detached->kids.end();
    }
    v->signature_status = std::string(signer::SigStatusName(
        trusted ? signer::SigStatus::kValid : signer::SigStatus::kUntrusted));
    v->signature_kind = std::string(SignatureKindName(SignatureKind::kDetached));
    v->signed_by = bundle.names;
    v->signed_kids = bundle.kids;
  }
  if (!embedded.satisfied && verify && verify->status == signer::SigStatus::kValid) {
    // Under a threshold or a model/version rule: the trusted keys that did
    // sign, as before those rules existed.
    v->signed_by.clear();
    v->signed_kids.clear();
    std::set<std::string> seen;
    for (const auto& kid : verify->verified_kids) {
      for (const auto& k : policy.keys) {
        if (k.key.kid_hex() == kid && seen.insert(kid).second) {
          v->signed_by.push_back(k.name);
          v->signed_kids.push_back(kid);
        }
      }
    }
  }

  // A failed signature blocks whatever accept and required say.
  bool failed = false;
  if (verify && verify->status == signer::SigStatus::kInvalid) {
    v->findings.push_back(PolicyFinding(kFindingSignature, core::Severity::kHigh,
                                        "invalid: " + verify->reason.message));
    failed = true;
  }
  if (detached && (detached->bundle_status == signer::SigStatus::kInvalid ||
                   (bundle_valid && detached->state == DetachedState::kChanged))) {
    v->findings.push_back(PolicyFinding(kFindingSignature, core::Severity::kHigh,
                                        "invalid: " + bundle.why));
    if (!failed) v->signature_kind = std::string(SignatureKindName(SignatureKind::kDetached));
    failed = true;
  }
  if (failed) {
    v->signature_status = std::string(signer::SigStatusName(signer::SigStatus::kInvalid));
    v->signed_model.clear();
    v->signed_version.reset();
    return;
  }

  for (SignatureKind kind : policy.accept) {
    const KindResult& r = kind == SignatureKind::kEmbedded ? embedded : bundle;
    if (!r.satisfied) continue;
    v->signature_status = std::string(signer::SigStatusName(signer::SigStatus::kValid));
    v->signature_kind = std::string(SignatureKindName(kind));
    v->signed_by = r.names;
    v->signed_kids = r.kids;
    v->signed_model = r.model;
    v->signed_version = r.version;
    return;
  }
  if (!policy.signatures_required) return;
  if (ignored) {
    // The bundle's ignore paths (.git*, --ignore) name files that need no
    // signature; an embedded one still shows as it is.
    if (!verify || verify->status == signer::SigStatus::kMissing) {
      v->signature_status = "not-checked";
      v->signature_kind.clear();
    }
    return;
  }

  // Not satisfied: say why for each kind worth naming, in accept order.
  // Without a verification the file is not safetensors, which says why it
  // has no embedded signature; a bundle not looked for (no evidence) is
  // named only when detached is the one kind accepted.
  struct Why {
    SignatureKind kind;
    const KindResult* result;
    bool accepted;
  };
  std::vector<Why> whys;
  const bool detached_looked = detached.has_value() || !Accepts(policy, SignatureKind::kEmbedded);
  for (SignatureKind kind : {SignatureKind::kDetached, SignatureKind::kEmbedded}) {
    const bool accepted = Accepts(policy, kind);
    const KindResult& r = kind == SignatureKind::kEmbedded ? embedded : bundle;
    const bool looked = kind == SignatureKind::kEmbedded || detached_looked;
    if (accepted && looked) whys.push_back({kind, &r, true});
    // A signature the policy does not accept is named, or a user would
    // wonder why a valid signature does not count.
    if (!accepted && r.satisfied) whys.push_back({kind, &r, false});
  }
  std::stable_sort(whys.begin(), whys.end(), [&](const Why& a, const Why& b) {
    auto rank = [&](SignatureKind k) {
      auto it = std::find(policy.accept.begin(), policy.accept.end(), k);
      return it == policy.accept.end() ? policy.accept.size() : it - policy.accept.begin();
    };
    return rank(a.kind) < rank(b.kind);
  });
  bool untrusted = false;
  std::string untrusted_kind;
  std::string because;
  for (const auto& w : whys) {
    const bool present = w.result->present || !w.accepted;
    if (present && !untrusted) {
      untrusted = true;
      untrusted_kind = std::string(SignatureKindName(w.kind));
    }
    std::string why = w.accepted ? w.result->why
                                 : std::string(SignatureKindName(w.kind)) +
                                       " signatures are not accepted (signatures.accept)";
    // The detached phrases name the bundle; an embedded one needs its kind
    // beside them.
    if (whys.size() > 1 && w.accepted && w.kind == SignatureKind::kEmbedded) why = "embedded: " + why;
    because += "; " + why;
  }
  std::string need = "the policy requires " + std::to_string(policy.threshold) +
                     (policy.threshold == 1 ? " trusted signature" : " trusted signatures");
  const std::string status = untrusted ? "untrusted" : "missing";
  v->signature_status = status;
  v->signature_kind = untrusted_kind;
  v->signed_model.clear();
  v->signed_version.reset();
  v->findings.push_back(
      PolicyFinding(kFindingSignature, core::Severity::kHigh, status + ": " + need + because));
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
                 const std::optional<core::Sha256Digest>& file_sha256, const Date& today,
                 const std::optional<DetachedEvidence>& detached) {
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
    // `unknown` also admits the text a repository carries next to its
    // weights (json, jinja, python): reported as unknown until their
    // formats were named, so a policy written then keeps its meaning; their
    // own rules (MG-CFG-*, MG-TMPL-*, MG-CODE-*) still judge them.
    const bool unknown_ok = std::find(allowed.begin(), allowed.end(), scanner::Format::kUnknown) !=
                            allowed.end();
    for (const auto& [format, loader] : formats) {
      if (std::find(allowed.begin(), allowed.end(), format) != allowed.end()) continue;
      if (unknown_ok && (format == scanner::Format::kJson || format == scanner::Format::kJinja ||
                         format == scanner::Format::kPython)) {
        continue;
      }
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

  // Rule 4: signatures.
  JudgeSignatures(policy, scan, verify, detached, &v);

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
        j.finding.waived = scanner::Waiver{e.reason, FormatDate(e.expires), j.original_severity};
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
  if (!p.signatures_required) {
    for (const auto& [where, key] : {std::pair{p.accept_where, "accept"},
                                     std::pair{p.model_where, "model"},
                                     std::pair{p.min_version_where, "minVersion"}}) {
      if (where.line > 0) {
        warn(where, std::string("signatures.") + key +
                        " has no effect unless signatures.required is true");
      }
    }
  } else {
    if (p.min_version && !p.model) {
      warn(p.min_version_where,
           "signatures.minVersion without signatures.model: a trusted key's signature of another "
           "model with a higher version passes");
    }
    if (!Accepts(p, SignatureKind::kDetached) && p.allowed_formats) {
      for (auto f : *p.allowed_formats) {
        if (f == scanner::Format::kSafetensors) continue;
        warn(p.accept_where, "signatures.accept is [embedded] but formats.allow lists " +
                                 std::string(scanner::FormatName(f)) +
                                 ", which carries no embedded signature: every such file is "
                                 "rejected");
        break;
      }
    }
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
