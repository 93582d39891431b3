// keygen, sign and verify: the STSIG v1 commands.
#include <sys/stat.h>

#include <iostream>
#include <vector>

#include "cli.h"
#include "exit_code.h"
#include "modelgate/signer.h"
#include "options.h"
#include "progress.h"

namespace modelgate::cli {
namespace {

// A sign or keygen failure: rejected (1) when the file itself broke a rule,
// else the tool could not do its job (2).
int Failure(const std::string& path, const core::Error& e) {
  std::cerr << "modelgate: " << DisplayPath(path);
  if (e.offset != core::kNoOffset) std::cerr << ":" << e.offset;
  std::cerr << ": " << core::FindingId(e.code) << ": " << e.message << "\n";
  const auto code = static_cast<uint16_t>(e.code);
  return code >= 100 && code < 200 ? kExitRejected : kExitCannotJudge;
}

// Format of `path` from its first bytes (verify only judges safetensors).
scanner::Format SniffFormat(const core::OpenedFile& f, const std::string& path) {
  std::vector<uint8_t> head(static_cast<size_t>(std::min<uint64_t>(f.size, scanner::kSniffBytes)));
  if (!core::PreadExact(f.fd, 0, head).ok()) return scanner::Format::kUnknown;
  size_t slash = path.rfind('/');
  return scanner::DetectFormat(head, f.size, slash == std::string::npos ? path : path.substr(slash + 1));
}

// VerifyOne checks the embedded signature of the file RunFiles opened for
// `target` (`file`, null when the walk judged it), from that descriptor.
FileReport VerifyOne(const Target& target, const core::OpenedFile* file,
                     std::span<const signer::PublicKey> trusted, Progress* progress) {
  FileReport fr;
  fr.scan.path = target.path;
  if (WalkFindings(target, &fr)) {
    fr.verdict = target.walk_error ? Verdict::kError : Verdict::kReject;
    return fr;
  }
  fr.scan.size = file->size;
  fr.scan.format = SniffFormat(*file, target.path);
  if (fr.scan.format != scanner::Format::kSafetensors) {
    fr.signature.status = "missing";
    fr.scan.findings.push_back(scanner::MakeFinding(
        "MG-SIG-MISSING", core::Severity::kHigh,
        "format " + std::string(scanner::FormatName(fr.scan.format)) +
            " carries no embedded signature (detached signatures are not implemented yet)"));
    fr.verdict = Verdict::kReject;
    return fr;
  }
  signer::VerifyOptions options;
  if (progress) {
    options.hash.progress = progress->Hashed();
    progress->Phase("hashing");
  }
  auto r = signer::VerifyFd(file->fd, file->size, trusted, options);
  if (!r.ok()) {
    fr.scan.io_error = true;
    fr.scan.findings.push_back(scanner::FindingFromError(r.error()));
    fr.verdict = Verdict::kError;
    return fr;
  }
  const auto& v = r.value();
  fr.signature = SignatureFrom(v);
  if (v.valid()) {
    fr.scan.safetensors = v.file;
    fr.verdict = Verdict::kPass;
  } else {
    fr.scan.findings.push_back(scanner::FindingFromError(v.reason));
    fr.verdict = Verdict::kReject;
  }
  return fr;
}

}  // namespace

SignatureReport SignatureFrom(const signer::VerifyResult& v) {
  SignatureReport out;
  out.status = std::string(signer::SigStatusName(v.status));
  for (const auto& rc : v.records) {
    if (rc.outcome != signer::RecordCheck::Outcome::kVerified) continue;
    out.key_ids.push_back(core::HexLower(rc.record.kid));
    out.key_names.push_back(rc.key_name);
  }
  return out;
}

int RunKeygen(const std::vector<std::string>& args) {
  CommonOptions opts;
  std::string error;
  if (!ParseOptions(args, {"--out", "-q"}, &opts, &error)) return Usage(error);
  if (opts.out_prefix.empty() || !opts.paths.empty()) return Usage("keygen needs --out PREFIX");
  auto r = signer::Keygen(opts.out_prefix);
  if (!r.ok()) return Failure(opts.out_prefix, r.error());
  std::cout << "wrote " << DisplayPath(r.value().private_path) << " (private key, mode 0600) and "
            << DisplayPath(r.value().public_path) << "\nkey id " << r.value().public_key.kid_hex()
            << "\n";
  return kExitPass;
}

int RunSign(const std::vector<std::string>& args) {
  CommonOptions opts;
  std::string error;
  if (!ParseOptions(args, {"--key", "-o", "--detached", "--model", "--version", "-q"}, &opts, &error)) {
    return Usage(error);
  }
  if (opts.key.empty()) return Usage("sign needs --key FILE");
  if (opts.paths.size() != 1) return Usage("sign takes exactly one PATH");
  if (opts.detached) {
    std::cerr << "modelgate: --detached (OpenSSF model signing) is not implemented in this version\n";
    return kExitCannotJudge;
  }
  auto key = signer::LoadPrivateKey(opts.key);
  if (!key.ok()) return Failure(opts.key, key.error());
  signer::SignOptions so;
  so.model = opts.model;
  so.version = opts.version.value_or(0);
  const std::string& path = opts.paths[0];
  Target target{path, true, {}, false, 0};
  if (struct stat st {}; ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    target.size_bytes = static_cast<uint64_t>(st.st_size);  // the progress line's total
  }
  std::unique_ptr<Progress> progress = StderrProgress(opts.quiet, {target});
  if (progress) {
    progress->StartFile(0, path);
    progress->Phase("signing");
    so.hash.progress = progress->Hashed();
  }
  auto r = signer::SignFile(path, key.value(), so, opts.out_path);
  if (progress) progress->Finish();
  if (!r.ok()) return Failure(path, r.error());
  const std::string out = opts.out_path.empty() ? path : opts.out_path;
  if (!opts.quiet) {
    std::cout << "signed " << DisplayPath(out) << " with key " << key.value().public_key().kid_hex()
              << " (" << r.value().kept_records << " co-signature(s) kept, "
              << r.value().dropped_records << " dropped)\n";
  }
  return kExitPass;
}

int RunVerify(const std::vector<std::string>& args) {
  CommonOptions opts;
  std::string error;
  if (!ParseOptions(args, {"--pubkey", "-f", "-o", "-q", "--json-output", "--sarif-output"}, &opts, &error)) return Usage(error);
  if (opts.pubkeys.empty()) return Usage("verify needs at least one --pubkey FILE");
  if (opts.paths.empty()) return Usage("verify needs at least one PATH");
  std::vector<signer::PublicKey> trusted;
  for (const auto& p : opts.pubkeys) {
    auto k = signer::LoadPublicKey(p);
    if (!k.ok()) {
      Failure(p, k.error());
      return kExitCannotJudge;  // a bad trust list: the gate cannot judge
    }
    k.value().name = p;
    trusted.push_back(std::move(k).value());
  }
  Report report =
      RunFiles(opts, [&](const Target& target, const core::OpenedFile* file, Progress* progress) {
        return VerifyOne(target, file, trusted, progress);
      });
  return EmitReport(report, opts);
}

}  // namespace modelgate::cli
