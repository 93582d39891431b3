// keygen, sign and verify: the STSIG v1 commands.
#include <sys/stat.h>

#include <algorithm>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "cli.h"
#include "exit_code.h"
#include "model_dir.h"
#include "modelgate/detached.h"
#include "modelgate/signer.h"
#include "options.h"
#include "progress.h"
#include "secrets.h"
#include "signing_key.h"

namespace modelgate::cli {
namespace {

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
            "; embedded signatures exist in safetensors files only, so it carries none "
            "(a detached bundle covers any file: sign --detached, verify --sig)"));
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
  fr.signature.kind = "embedded";
  if (v.valid()) {
    fr.scan.safetensors = v.file;
    fr.verdict = Verdict::kPass;
  } else {
    fr.scan.findings.push_back(scanner::FindingFromError(v.reason));
    fr.verdict = Verdict::kReject;
  }
  fr.side = std::make_shared<ModelSide>();
  fr.side->verification = std::move(r).value();
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
  const std::optional<signer::KeyAlg> alg = signer::ParseKeyAlg(opts.key_alg);
  // app.cc lets only KeyAlgName values through; this is the backstop.
  if (!alg) return Usage("keygen", "unknown --alg " + opts.key_alg);
  if (!opts.encrypt && !opts.passphrase_file.empty()) {
    return Usage("keygen", "--passphrase-file needs --encrypt");
  }
  std::optional<SecretBytes> pass;
  if (opts.encrypt) {
    auto read = SecretFrom(opts.passphrase_file, kPassphraseEnv, "passphrase");
    if (!read.ok()) {
      return Failure(opts.passphrase_file.empty() ? kPassphraseEnv : opts.passphrase_file, read.error());
    }
    if (!read.value()) {
      return Usage("keygen", std::string("--encrypt needs a passphrase: --passphrase-file FILE or ") +
                                 kPassphraseEnv);
    }
    pass = std::move(std::move(read).value());
  }
  auto r = signer::Keygen(opts.out_prefix, *alg,
                          pass ? std::optional<std::span<const uint8_t>>(pass->bytes()) : std::nullopt);
  if (!r.ok()) return Failure(opts.out_prefix, r.error());
  std::cout << "wrote " << DisplayPath(r.value().private_path)
            << (opts.encrypt ? " (encrypted private key, mode 0600) and " : " (private key, mode 0600) and ")
            << DisplayPath(r.value().public_path) << "\nkey id " << r.value().public_key.kid_hex()
            << "\n";
  if (*alg != signer::KeyAlg::kEd25519) {
    std::cout << signer::KeyAlgName(*alg)
              << " key: it signs detached bundles (sign --detached), not embedded STSIG\n";
  }
  return kExitPass;
}

namespace {

// DefaultBundlePath: DIR/model.sig for a directory (where check finds it),
// FILE.sig beside one file.
std::string DefaultBundlePath(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return JoinPath(path, std::string(kBundleName));
  }
  return path + ".sig";
}

int RunSignDetached(const CommonOptions& opts) {
  const std::string& path = opts.paths[0];
  int failed = kExitCannotJudge;
  std::optional<signer::PrivateKey> key = LoadSigningKey(opts, "sign", &failed);
  if (!key) return failed;
  signer::oms::DetachedSignOptions so;
  so.ignore = opts.ignore;
  so.model = opts.model;
  so.version = opts.version;
  const std::string out = opts.out_path.empty() ? DefaultBundlePath(path) : opts.out_path;
  auto r = signer::oms::SignDetached(path, *key, out, so);
  if (!r.ok()) return Failure(path, r.error());
  if (!opts.quiet) {
    std::cout << "signed " << r.value().files << " file(s), " << r.value().bytes << " bytes, of "
              << DisplayPath(path) << " into " << DisplayPath(out) << " with "
              << signer::KeyAlgName(key->alg()) << " key "
              << key->public_key().kid_hex() << "\n";
  }
  return kExitPass;
}

// DetachedReport turns a detached verification into one entry per file:
// the bundle's own entry when it is not valid, else every present file
// (signed, changed, added, ignored) and every missing one.
Report DetachedReport(const CommonOptions& opts, const signer::oms::DetachedVerifyResult& v) {
  namespace oms = signer::oms;
  Report report;
  const std::string& root = opts.paths[0];
  auto entry = [&](const std::string& path) {
    FileReport fr;
    fr.scan.path = path;
    fr.signature.kind = "detached";
    fr.signature.key_ids = v.bundle.kids;
    fr.signature.key_names = v.bundle.key_names;
    fr.signature.model = v.manifest.subject_name;
    fr.signature.version = v.manifest.version;
    return fr;
  };
  if (v.bundle.status != signer::SigStatus::kValid) {
    FileReport fr = entry(opts.sig_path);
    fr.signature.status = std::string(signer::SigStatusName(v.bundle.status));
    fr.signature.model.clear();
    fr.signature.version.reset();
    scanner::Finding f = scanner::FindingFromError(v.bundle.reason);
    if (v.bundle.why != oms::Reason::kNone) f.id = std::string(oms::ReasonId(v.bundle.why));
    f.message = "detached bundle " + fr.signature.status + ": " + f.message;
    fr.scan.findings.push_back(std::move(f));
    fr.verdict = Verdict::kReject;
    report.files.push_back(std::move(fr));
    return report;
  }
  for (const oms::DetachedFile& df : v.files) {
    FileReport fr = entry(JoinPath(root, df.path));
    fr.scan.size = df.size;
    fr.sha256 = df.sha256;
    fr.signature.detached_state = std::string(oms::FileStateName(df.state));
    fr.signature.status = "valid";
    fr.verdict = Verdict::kPass;
    if (df.state == oms::FileState::kChanged) {
      fr.signature.status = "invalid";
      fr.scan.findings.push_back(scanner::MakeFinding(
          std::string(oms::ReasonId(oms::Reason::kFileChanged)), core::Severity::kCritical,
          "changed since the bundle signed it: its SHA-256 is " + core::HexLower(df.sha256) +
              ", not what the bundle lists"));
      fr.verdict = Verdict::kReject;
    } else if (df.state == oms::FileState::kAdded) {
      // Under --allow-unsigned-files the entry says "missing" (signature)
      // and "added" (state) but carries no finding: it passes by request.
      fr.signature.status = "missing";
      if (!v.allow_unsigned_files) {
        fr.scan.findings.push_back(scanner::MakeFinding(
            std::string(oms::ReasonId(oms::Reason::kFileUnsigned)), core::Severity::kHigh,
            "not listed in the detached bundle (added since it was signed); "
            "--allow-unsigned-files lets such files pass"));
        fr.verdict = Verdict::kReject;
      }
    } else if (df.state == oms::FileState::kIgnored) {
      fr.signature.status = "not-checked";
    }
    report.files.push_back(std::move(fr));
  }
  for (const std::string& rel : v.missing) {
    FileReport fr = entry(JoinPath(root, rel));
    fr.signature.status = "invalid";
    fr.signature.detached_state = "missing";
    fr.scan.findings.push_back(scanner::MakeFinding(
        std::string(oms::ReasonId(oms::Reason::kFileMissing)), core::Severity::kCritical,
        "listed in the detached bundle but missing: deleted, renamed or moved since it was "
        "signed"));
    fr.verdict = Verdict::kReject;
    report.files.push_back(std::move(fr));
  }
  return report;
}

int RunVerifyDetached(const CommonOptions& opts, std::span<const signer::PublicKey> trusted) {
  if (opts.paths.size() != 1) return Usage("verify", "--sig covers one model: give exactly one PATH");
  signer::oms::DetachedVerifyOptions vo;
  vo.allow_unsigned_files = opts.allow_unsigned_files;
  vo.sig_path = opts.sig_path;
  auto r = signer::oms::VerifyDetached(opts.paths[0], opts.sig_path, trusted, vo);
  if (!r.ok()) {
    Report report;
    FileReport fr;
    fr.scan.path = opts.paths[0];
    fr.scan.io_error = true;
    fr.scan.findings.push_back(scanner::FindingFromError(r.error()));
    fr.verdict = Verdict::kError;
    report.files.push_back(std::move(fr));
    return EmitReport(report, opts);
  }
  Report report = DetachedReport(opts, r.value());
  return EmitReport(report, opts);
}

// IsShardSetPath: embedded signing of a whole sharded model, given its
// directory or its *.safetensors.index.json.
bool IsShardSetPath(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return true;
  const size_t slash = path.rfind('/');
  return core::IsShardIndexName(slash == std::string::npos ? path : path.substr(slash + 1));
}

// RunSignSet signs every shard of the index with its set record
// (signer::SignSet): a shard set whose index breaks a rule is rejected (1),
// anything else that stops it is exit 2.
int RunSignSet(const CommonOptions& opts) {
  const std::string& path = opts.paths[0];
  if (!opts.out_path.empty()) {
    return Usage("sign", "-o writes one file; a shard set is signed in place");
  }
  int failed = kExitCannotJudge;
  std::optional<signer::PrivateKey> key = LoadSigningKey(opts, "sign", &failed);
  if (!key) return failed;
  signer::SignOptions so;
  so.model = opts.model;
  so.version = opts.version.value_or(0);
  auto r = signer::SignSet(path, *key, so);
  if (!r.ok()) {
    const core::Error& e = r.error();
    std::cerr << "modelgate: " << DisplayPath(path) << ": " << core::FindingId(e.code) << ": "
              << e.message << "\n";
    const auto code = static_cast<uint16_t>(e.code);
    const bool rule = (code >= 100 && code < 200) ||
                      (code >= static_cast<uint16_t>(core::Code::kSetIndex) &&
                       code <= static_cast<uint16_t>(core::Code::kSetTotalSize));
    return rule ? kExitRejected : kExitCannotJudge;
  }
  if (!opts.quiet) {
    const signer::SignSetResult& set = r.value();
    for (const signer::SignSetShard& s : set.shards) {
      std::cout << "signed " << DisplayPath(s.path) << " (shard " << s.set.index + 1 << " of "
                << s.set.count << ")\n";
    }
    std::cout << "signed the set of " << DisplayPath(set.index_path) << " with key "
              << key->public_key().kid_hex() << ": set digest "
              << core::HexLower(set.digest) << "\n";
  }
  return kExitPass;
}

}  // namespace

int RunSign(const CommonOptions& opts) {
  if (opts.key.empty()) return Usage("sign", "needs --key FILE|URI");
  if (opts.paths.size() != 1) return Usage("sign", "takes exactly one PATH");
  if (opts.detached) return RunSignDetached(opts);
  if (!opts.ignore.empty()) return Usage("sign", "--ignore applies to --detached only");
  const std::string& path = opts.paths[0];
  if (IsShardSetPath(path)) return RunSignSet(opts);
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
  int failed = kExitCannotJudge;
  std::optional<signer::PrivateKey> key = LoadSigningKey(opts, "sign", &failed);
  if (!key) return failed;
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
  auto r = signer::SignFile(path, *key, so, opts.out_path);
  if (progress) progress->Finish();
  if (!r.ok()) return Failure(path, r.error());
  const std::string out = opts.out_path.empty() ? path : opts.out_path;
  if (!opts.quiet) {
    std::cout << "signed " << DisplayPath(out) << " with key " << key->public_key().kid_hex()
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
  if (!opts.sig_path.empty()) return RunVerifyDetached(opts, trusted);
  if (opts.allow_unsigned_files) return Usage("verify", "--allow-unsigned-files needs --sig");
  Report report =
      RunFiles(opts, [&](const Target& target, const core::OpenedFile* file, Progress* progress) {
        return VerifyOne(target, file, trusted, progress);
      });
  FinishSets(core::Severity::kHigh, &report);
  return EmitReport(report, opts);
}

}  // namespace modelgate::cli
