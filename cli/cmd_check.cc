// check (and scan --policy): scan + verify under an operator's policy; and
// `policy lint`. The policy comes only from the command line, never from the
// tree being scanned: an uploader cannot waive their own findings.
#include <iostream>

#include "checker.h"
#include "cli.h"
#include "exit_code.h"
#include "model_dir.h"
#include "modelgate/policy.h"
#include "modelgate/signer.h"
#include "options.h"
#include "progress.h"

namespace modelgate::cli {
namespace {

Verdict FromDecision(policy::Decision d) {
  switch (d) {
    case policy::Decision::kPass: return Verdict::kPass;
    case policy::Decision::kReject: return Verdict::kReject;
    case policy::Decision::kError: return Verdict::kError;
  }
  return Verdict::kError;
}

// CheckOne judges one target under the policy. The scan, the signature,
// the detached bundle's digests and the file SHA-256 all read `file` (null
// when the walk judged the target): a file swapped between them cannot lend
// one file's signature or exception to another's findings.
FileReport CheckOne(const Target& target, const core::OpenedFile* file, const policy::Policy& p,
                    const scanner::ScanOptions& scan_options,
                    std::span<const signer::PublicKey> keys, const DetachedScope& scope,
                    const policy::Date& today, Progress* progress) {
  FileReport fr;
  core::HashOptions hash;
  if (progress) hash.progress = progress->Hashed();
  if (file && scope.present && !scope.bundle_rel.empty() && target.rel == scope.bundle_rel) {
    // The bundle is the signature, not a file of the model: it was judged
    // as a bundle (strictly parsed, its signatures verified) before the
    // walk; FinishModels adds its findings. No loader reads it.
    fr.scan.path = target.path;
    fr.scan.size = file->size;
    fr.signature.kind = "detached";
    fr.signature.status = std::string(signer::SigStatusName(scope.verdict.status));
    fr.signature.detached_state = "ignored";
    if (scope.verdict.status == signer::SigStatus::kValid) {
      fr.signature.key_ids = scope.verdict.kids;
      fr.signature.key_names = scope.verdict.key_names;
    }
    auto sha = policy::FileSha256(file->fd, file->size, hash);
    if (!sha.ok() || sha.value() != scope.bundle_sha256) {
      // Not the bytes that were judged as the bundle: no verdict on them.
      fr.scan.io_error = true;
      fr.scan.findings.push_back(scanner::FindingFromError(
          sha.ok() ? core::Error{core::Code::kIoChanged, core::kNoOffset,
                                 "the bundle changed while the model was judged"}
                   : sha.error()));
      fr.verdict = Verdict::kError;
      return fr;
    }
    fr.sha256 = sha.value();
    return fr;
  }
  if (!WalkFindings(target, &fr)) fr.scan = scanner::ScanOpened(*file, target.path, scan_options);
  std::optional<signer::VerifyResult> verify;
  if (file && !fr.scan.io_error && fr.scan.format == scanner::Format::kSafetensors) {
    signer::VerifyOptions vo = policy::VerifyOptionsFor(p);
    vo.hash = hash;
    if (progress) progress->Phase("hashing");
    auto v = signer::VerifyFd(file->fd, file->size, keys, vo);
    if (!v.ok()) {
      fr.scan.io_error = true;
      fr.scan.findings.push_back(scanner::FindingFromError(v.error()));
    } else {
      verify = std::move(v).value();
    }
  }
  // The whole file's SHA-256 (the report's, an exception's) and, with a
  // bundle, the digests it lists for this file: one pass over the fd.
  std::optional<policy::DetachedEvidence> detached;
  std::string detached_state;
  if (file && !fr.scan.io_error) {
    if (progress) progress->Phase("sha-256");
    auto j = JudgeDetached(scope, target, *file, hash);
    if (j.ok()) {
      fr.sha256 = j.value().sha256;
      if (scope.present) detached = j.value().evidence;
      detached_state = j.value().state;
    } else {
      // An exception or the bundle may hinge on this digest: no verdict.
      fr.scan.io_error = true;
      fr.scan.findings.push_back(scanner::FindingFromError(j.error()));
    }
  }
  if (file) {
    // Before the policy decides: what was read is still this file.
    if (auto same = TargetUnchanged(target, *file); !same.ok()) {
      fr.scan.io_error = true;
      fr.scan.findings.push_back(scanner::FindingFromError(same.error()));
    }
  }
  policy::Verdict v = policy::Evaluate(p, fr.scan, verify, fr.sha256, today, detached);
  fr.verdict = FromDecision(v.decision);
  fr.scan.findings = v.ReportedFindings();
  if (verify) fr.signature = SignatureFrom(*verify);
  fr.signature.status = v.signature_status;  // the policy's reading of it
  fr.signature.kind = v.signature_kind;
  fr.signature.model = v.signed_model;
  fr.signature.version = v.signed_version;
  if (!v.signed_kids.empty()) {
    fr.signature.key_ids = v.signed_kids;
    fr.signature.key_names = v.signed_by;
  }
  fr.signature.detached_state = detached_state;
  if (verify) {
    fr.side = std::make_shared<ModelSide>();
    fr.side->verification = std::move(verify);
  }
  return fr;
}

}  // namespace

core::Result<Checker> LoadChecker(const std::string& policy_path) {
  auto p = policy::LoadPolicy(policy_path);
  if (!p.ok()) {
    core::Error e = p.error();
    e.message = "policy: " + e.message;
    return e;
  }
  auto scan_options = policy::ScanOptionsFor(p.value());
  if (!scan_options.ok()) {
    core::Error e = scan_options.error();
    e.message = "policy: " + e.message;
    return e;
  }
  Checker c;
  c.policy_path = policy_path;
  c.keys = policy::TrustedKeys(p.value());
  c.policy = std::move(p).value();
  c.scan_options = std::move(scan_options).value();
  return c;
}

namespace {

// Judge runs `targets` (or, when null, the walk of opts.paths) against
// `scopes`, one per operand, and finishes the model and set checks.
Report Judge(const CommonOptions& opts, const Checker& c, const std::vector<Target>* targets,
             const std::vector<DetachedScope>& scopes) {
  const policy::Date today = policy::Today();
  const JudgeFn one = [&](const Target& target, const core::OpenedFile* file, Progress* progress) {
    return CheckOne(target, file, c.policy, c.scan_options, c.keys, scopes[target.operand], today,
                    progress);
  };
  Report report = targets != nullptr
                      ? RunTargets(opts, *targets, one)
                      : RunFiles(opts, one, [&](size_t operand, std::string_view rel) {
                          return PruneVcs(scopes[operand], rel);
                        });
  FinishModels(scopes, opts, c.policy.signatures_required, &report);
  FinishSets(c.policy.fail_on, &report);
  report.policy_path = c.policy_path;
  report.policy_sha256 = c.policy.sha256;
  return report;
}

}  // namespace

core::Result<Report> CheckReport(const CommonOptions& opts, const Checker& c) {
  auto scopes = LoadDetachedScopes(opts, c.keys);
  if (!scopes.ok()) return scopes.error();
  return Judge(opts, c, nullptr, scopes.value());
}

Report CheckTargets(const CommonOptions& opts, const Checker& c, const std::vector<Target>& targets) {
  // No operand: the model checks after the walk look at none by its name.
  CommonOptions named_nothing = opts;
  named_nothing.paths.clear();
  const std::vector<DetachedScope> none(1);
  return Judge(named_nothing, c, &targets, none);
}

int RunChecked(const CommonOptions& opts, const std::string& policy_path) {
  auto c = LoadChecker(policy_path);
  if (!c.ok()) {
    Diagnostics(opts) << "modelgate: " << c.error().message << "\n";
    return kExitCannotJudge;
  }
  if (!opts.sig_path.empty() && opts.paths.size() != 1) {
    return Usage("check", "--sig covers one model: give exactly one PATH");
  }
  auto report = CheckReport(opts, c.value());
  if (!report.ok()) {
    Diagnostics(opts) << "modelgate: " << report.error().message << "\n";
    return kExitCannotJudge;
  }
  return EmitReport(report.value(), opts);
}

int RunCheck(const CommonOptions& given) {
  if (given.policy.empty()) return Usage("check", "needs --policy FILE");
  int code = 0;
  const std::optional<CommonOptions> opts = WithOperands(given, "check", &code);
  if (!opts) return code;
  return RunChecked(*opts, opts->policy);
}

// RunPolicyLint writes everything on stderr, `ok` included: lint produces
// no report, only diagnostics (stdout stays empty for pipelines).
int RunPolicyLint(const CommonOptions& opts) {
  if (opts.paths.size() != 1) return Usage("policy lint", "takes exactly one FILE");
  const std::string& path = opts.paths[0];
  const auto problems = policy::LintPolicy(path, policy::Today());
  bool errors = false;
  for (const auto& pr : problems) {
    const bool is_error = pr.level == policy::Problem::Level::kError;
    errors |= is_error;
    std::cerr << (is_error ? "error: " : "warning: ") << pr.message << "\n";
  }
  if (problems.empty()) std::cerr << DisplayPath(path) << ": ok\n";
  return errors ? kExitCannotJudge : kExitPass;
}

}  // namespace modelgate::cli
