// keygen, sign and verify: the STSIG v1 commands.
#include <sys/stat.h>

#include <algorithm>
#include <iostream>
#include <span>
#include <string>
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

// Sniffed is what a file's first bytes say it is.
struct Sniffed {
  scanner::Format format = scanner::Format::kUnknown;
  // The format in words: FormatName, or for a file no format claims, what
  // it looks like ("json", "text", "unknown").
  std::string name;
};

// LooksLike names content no model format claims: JSON when its first
// non-blank byte opens an object or array, text when it is UTF-8 without
// control characters but tabs and line ends.
// `cut`: the file goes on past `head`.
std::string LooksLike(std::span<const uint8_t> head, bool cut) {
  size_t i = 0;
  if (head.size() >= 3 && head[0] == 0xEF && head[1] == 0xBB && head[2] == 0xBF) i = 3;  // BOM
  while (i < head.size() && (head[i] == ' ' || head[i] == '\t' || head[i] == '\r' || head[i] == '\n')) ++i;
  if (i < head.size() && (head[i] == '{' || head[i] == '[')) return "json";
  bool text = !head.empty();
  for (uint8_t c : head) text &= c >= 0x20 || c == '\t' || c == '\r' || c == '\n';
  // A multi-byte character cut at the end of `head` is still text.
  std::string_view chars(reinterpret_cast<const char*>(head.data()), head.size());
  for (size_t n = 0; cut && text && n < 3 && !chars.empty() && !core::IsUtf8(chars); ++n) {
    chars.remove_suffix(1);
  }
  return text && core::IsUtf8(chars) ? "text" : "unknown";
}

// Sniff reads the format of `path` from its first bytes (verify and sign
// judge safetensors only).
Sniffed Sniff(const core::OpenedFile& f, const std::string& path) {
  std::vector<uint8_t> head(static_cast<size_t>(std::min<uint64_t>(f.size, scanner::kSniffBytes)));
  if (!core::PreadExact(f.fd, 0, head).ok()) return {scanner::Format::kUnknown, "unknown"};
  size_t slash = path.rfind('/');
  const auto format =
      scanner::DetectFormat(head, f.size, slash == std::string::npos ? path : path.substr(slash + 1));
  return {format, format == scanner::Format::kUnknown ? LooksLike(head, f.size > head.size())
                                                      : std::string(scanner::FormatName(format))};
}

// NotSafetensors is the message for a file sign and verify cannot handle.
std::string NotSafetensors(const Sniffed& s) {
  return "not a safetensors file (detected: " + s.name + ")";
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
  const Sniffed sniffed = Sniff(*file, target.path);
  fr.scan.format = sniffed.format;
  if (fr.scan.format != scanner::Format::kSafetensors) {
    fr.signature.status = "missing";
    fr.scan.findings.push_back(scanner::MakeFinding(
        "MG-SIG-MISSING", core::Severity::kHigh,
        NotSafetensors(sniffed) +
            "; signatures are embedded in safetensors files only, so it carries none "
            "(detached signatures are not implemented yet)"));
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
    if (rc.outcome == signer::RecordCheck::Outcome::kUntrusted) {
      out.untrusted_key_ids.push_back(core::HexLower(rc.record.kid));
    }
    if (rc.outcome != signer::RecordCheck::Outcome::kVerified) continue;
    out.key_ids.push_back(core::HexLower(rc.record.kid));
    out.key_names.push_back(rc.key_name);
  }
  return out;
}

int RunKeygen(const CommonOptions& opts) {
  if (opts.out_prefix.empty()) return Usage("keygen", "needs --out PREFIX");
  auto r = signer::Keygen(opts.out_prefix);
  if (!r.ok()) return Failure(opts.out_prefix, r.error());
  std::cout << "wrote " << DisplayPath(r.value().private_path) << " (private key, mode 0600) and "
            << DisplayPath(r.value().public_path) << "\nkey id " << r.value().public_key.kid_hex()
            << "\n";
  return kExitPass;
}

int RunSign(const CommonOptions& opts) {
  if (opts.key.empty()) return Usage("sign", "needs --key FILE");
  if (opts.paths.size() != 1) return Usage("sign", "takes exactly one PATH");
  if (opts.detached) {
    std::cerr << "modelgate: --detached (OpenSSF model signing) is not implemented in this version\n";
    return kExitCannotJudge;
  }
  const std::string& path = opts.paths[0];
  // Wrong input is said in words before the key is read: a JSON config
  // parsed as safetensors would only report a header length of 19 digits.
  // (SignFile opens and checks the file itself; this open only names it.)
  if (auto f = core::OpenRegularFile(path, /*follow_symlink=*/false); f.ok()) {
    if (const Sniffed s = Sniff(f.value(), path); s.format != scanner::Format::kSafetensors) {
      std::cerr << "modelgate: " << DisplayPath(path) << ": " << NotSafetensors(s)
                << "; sign embeds signatures in safetensors only\n";
      return kExitCannotJudge;
    }
  }
  auto key = signer::LoadPrivateKey(opts.key);
  if (!key.ok()) return Failure(opts.key, key.error());
  signer::SignOptions so;
  so.model = opts.model;
  so.version = opts.version.value_or(0);
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

int RunVerify(const CommonOptions& opts) {
  if (opts.pubkeys.empty()) return Usage("verify", "needs at least one --pubkey FILE");
  if (opts.paths.empty()) return Usage("verify", "needs at least one PATH");
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
