// check (and scan --policy): scan + verify under an operator's policy; and
// `policy lint`. The policy comes only from the command line, never from the
// tree being scanned: an uploader cannot waive their own findings.
#include <iostream>

#include "cli.h"
#include "exit_code.h"
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

// CheckOne judges one target under the policy. The scan, the signature and
// the file SHA-256 all read `file` (null when the walk judged the target):
// a file swapped between them cannot lend one file's signature or exception
// to another's findings.
FileReport CheckOne(const Target& target, const core::OpenedFile* file, const policy::Policy& p,
                    const scanner::ScanOptions& scan_options,
                    std::span<const signer::PublicKey> keys, const policy::Date& today,
                    Progress* progress) {
  FileReport fr;
  if (!WalkFindings(target, &fr)) fr.scan = scanner::ScanOpened(*file, target.path, scan_options);
  core::HashOptions hash;
  if (progress) hash.progress = progress->Hashed();
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
  std::optional<core::Sha256Digest> sha;
  if (file && !fr.scan.io_error && policy::NeedsFileSha256(p)) {
    if (progress) progress->Phase("sha-256");  // for exceptions pinned to it
    auto h = policy::FileSha256(file->fd, file->size, hash);
    if (h.ok()) {
      sha = h.value();
    } else {
      // An exception may hinge on this digest: without it, no verdict.
      fr.scan.io_error = true;
      fr.scan.findings.push_back(scanner::FindingFromError(h.error()));
    }
  }
  if (file) {
    // Before the policy decides: what was read is still this file.
    if (auto same = TargetUnchanged(target, *file); !same.ok()) {
      fr.scan.io_error = true;
      fr.scan.findings.push_back(scanner::FindingFromError(same.error()));
    }
  }
  policy::Verdict v = policy::Evaluate(p, fr.scan, verify, sha, today);
  fr.verdict = FromDecision(v.decision);
  fr.scan.findings = v.ReportedFindings();
  if (verify) fr.signature = SignatureFrom(*verify);
  fr.signature.status = v.signature_status;  // the policy's reading of it
  return fr;
}

}  // namespace

int RunChecked(const CommonOptions& opts, const std::string& policy_path) {
  auto p = policy::LoadPolicy(policy_path);
  if (!p.ok()) {
    std::cerr << "modelgate: policy: " << p.error().message << "\n";
    return kExitCannotJudge;
  }
  auto scan_options = policy::ScanOptionsFor(p.value());
  if (!scan_options.ok()) {
    std::cerr << "modelgate: policy: " << scan_options.error().message << "\n";
    return kExitCannotJudge;
  }
  const std::vector<signer::PublicKey> keys = policy::TrustedKeys(p.value());
  const policy::Date today = policy::Today();
  Report report =
      RunFiles(opts, [&](const Target& target, const core::OpenedFile* file, Progress* progress) {
        return CheckOne(target, file, p.value(), scan_options.value(), keys, today, progress);
      });
  return EmitReport(report, opts);
}

int RunCheck(const CommonOptions& opts) {
  if (opts.policy.empty()) return Usage("check", "needs --policy FILE");
  if (opts.paths.empty()) return Usage("check", "needs at least one PATH");
  return RunChecked(opts, opts.policy);
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
