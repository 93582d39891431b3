#include "model_dir.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>

#include "options.h"

namespace modelgate::cli {
namespace {

namespace oms = signer::oms;

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return "";
  return path.substr(0, slash);
}

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

scanner::Finding OmsFinding(std::string_view id, core::Severity sev, std::string message) {
  return scanner::MakeFinding(std::string(id), sev, std::move(message));
}

}  // namespace

core::Result<std::vector<DetachedScope>> LoadDetachedScopes(
    const CommonOptions& opts, std::span<const signer::PublicKey> trusted) {
  std::vector<DetachedScope> scopes(opts.paths.size());
  for (size_t i = 0; i < opts.paths.size(); ++i) {
    const std::string& operand = opts.paths[i];
    DetachedScope& scope = scopes[i];
    const bool dir = IsDirectory(operand);
    scope.single_file = !dir;
    if (!opts.sig_path.empty()) {
      scope.bundle_path = opts.sig_path;
    } else if (dir) {
      const std::string candidate = JoinPath(operand, std::string(kBundleName));
      struct stat st {};
      if (::lstat(candidate.c_str(), &st) != 0) continue;  // no bundle: nothing detached
      // A link or special file named model.sig is still "the bundle": it
      // is read as LoadBundle reads any bundle, and refused.
      scope.bundle_path = candidate;
    } else {
      // One file: its bundle is FILE.sig beside it (sign --detached's default).
      const std::string candidate = operand + ".sig";
      struct stat st {};
      if (operand == kStdinPath || ::lstat(candidate.c_str(), &st) != 0) continue;
      scope.bundle_path = candidate;
    }
    scope.present = true;
    if (dir) scope.bundle_rel = oms::RelInside(operand, scope.bundle_path);
    auto loaded = oms::LoadBundle(scope.bundle_path, trusted);
    if (!loaded.ok() && opts.sig_path.empty() && loaded.error().code == core::Code::kIoNotRegular) {
      // Found in the tree, not named by the operator: a link or a special
      // file where the bundle belongs is the upload's fault, a rejection.
      scope.verdict.status = signer::SigStatus::kInvalid;
      scope.verdict.why = oms::Reason::kMalformed;
      scope.verdict.reason = loaded.error();
      scope.reason_id = std::string(oms::ReasonId(oms::Reason::kMalformed));
      continue;
    }
    if (!loaded.ok()) {
      core::Error e = loaded.error();
      e.message = DisplayPath(scope.bundle_path) + ": " + e.message;
      return e;
    }
    scope.verdict = loaded.value().verdict;
    if (scope.verdict.status != signer::SigStatus::kValid) {
      scope.reason_id = std::string(oms::ReasonId(scope.verdict.why));
    }
    scope.bundle_sha256 = loaded.value().sha256;
    scope.bundle = std::move(loaded.value().bundle);
  }
  return scopes;
}

core::Result<DetachedJudgement> JudgeDetached(const DetachedScope& scope, const Target& target,
                                              const core::OpenedFile& file,
                                              const core::HashOptions& hash) {
  DetachedJudgement out;
  const bool valid = scope.present && scope.bundle && scope.verdict.status == signer::SigStatus::kValid;
  std::vector<core::ByteRange> ranges;
  const std::string rel = scope.single_file ? "." : target.rel;
  if (valid) ranges = oms::RangesToHash(scope.bundle->manifest, rel, file.size);
  // The whole file last: the report's sha256 (in files mode it is the
  // manifest's one range, hashed once).
  const bool whole_listed = ranges.size() == 1 && ranges[0].offset == 0 &&
                            ranges[0].size_bytes == file.size;
  if (!whole_listed) ranges.push_back({0, file.size});
  auto digests = core::HashRanges(file.fd, ranges, hash);
  if (!digests.ok()) return digests.error();
  out.sha256 = digests.value().back();
  if (!scope.present) return out;
  policy::DetachedEvidence& ev = out.evidence;
  ev.bundle_status = scope.verdict.status;
  ev.key_names = scope.verdict.key_names;
  ev.kids = scope.verdict.kids;
  if (!valid) {
    ev.reason = scope.verdict.reason.message;
    return out;
  }
  const oms::Manifest& m = scope.bundle->manifest;
  ev.model = m.subject_name;
  ev.version = m.version;
  std::span<const core::Sha256Digest> listed(digests.value().data(),
                                             whole_listed ? 1 : digests.value().size() - 1);
  oms::FileState state = oms::FileState::kAdded;
  if (!scope.bundle_rel.empty() && target.rel == scope.bundle_rel) {
    state = oms::FileState::kIgnored;  // the signature itself
  } else {
    state = oms::Compare(m, rel, listed, file.size);
  }
  ev.state = static_cast<policy::DetachedState>(state);
  out.state = std::string(oms::FileStateName(state));
  return out;
}

bool PruneVcs(const DetachedScope& scope, std::string_view rel) {
  if (!scope.bundle || scope.verdict.status != signer::SigStatus::kValid || scope.single_file) {
    return false;
  }
  if (rel != ".git" && rel.substr(0, 5) != ".git/") return false;
  return oms::IsIgnored(scope.bundle->manifest, rel);
}

void FinishModels(const std::vector<DetachedScope>& scopes, const CommonOptions& opts,
                  bool signatures_required, Report* report) {
  for (size_t i = 0; i < scopes.size() && i < opts.paths.size(); ++i) {
    const DetachedScope& scope = scopes[i];
    const std::string& operand = opts.paths[i];
    std::vector<std::string> present;
    size_t judged = 0;
    FileReport* bundle_entry = nullptr;
    for (FileReport& fr : report->files) {
      if (fr.operand != i) continue;
      present.push_back(scope.single_file ? "." : fr.rel);
      if (scope.present && !scope.bundle_rel.empty() && fr.rel == scope.bundle_rel) {
        bundle_entry = &fr;
        continue;
      }
      const bool ignored = scope.bundle && scope.verdict.status == signer::SigStatus::kValid &&
                           oms::IsIgnored(scope.bundle->manifest, fr.rel);
      if (!ignored) ++judged;
    }
    // As for embedded records: a bundle that fails always rejects; one by
    // keys the policy does not list only when signatures are required.
    const bool bundle_blocks =
        scope.present && (scope.verdict.status == signer::SigStatus::kInvalid ||
                          (signatures_required && scope.verdict.status != signer::SigStatus::kValid));
    if (bundle_blocks) {
      scanner::Finding f =
          OmsFinding(scope.reason_id.empty() ? "MG-OMS-BUNDLE" : scope.reason_id,
                     core::Severity::kCritical,
                     "detached bundle " + std::string(signer::SigStatusName(scope.verdict.status)) +
                         ": " + scope.verdict.reason.message);
      if (scope.verdict.status == signer::SigStatus::kUntrusted) f.severity = core::Severity::kHigh;
      if (bundle_entry == nullptr) {
        FileReport fr;
        fr.scan.path = scope.bundle_path;
        fr.operand = i;
        report->files.push_back(std::move(fr));
        bundle_entry = &report->files.back();
      }
      bundle_entry->scan.findings.push_back(std::move(f));
      bundle_entry->signature.kind = "detached";
      bundle_entry->signature.status = std::string(signer::SigStatusName(scope.verdict.status));
      if (bundle_entry->verdict != Verdict::kError) bundle_entry->verdict = Verdict::kReject;
    }
    if (scope.bundle && scope.verdict.status == signer::SigStatus::kValid) {
      for (const std::string& rel : oms::Missing(scope.bundle->manifest, present)) {
        FileReport fr;
        fr.scan.path = scope.single_file ? operand : JoinPath(operand, rel);
        fr.operand = i;
        fr.rel = rel;
        fr.signature.kind = "detached";
        fr.signature.status = "invalid";
        fr.signature.detached_state = "missing";
        fr.scan.findings.push_back(OmsFinding(
            oms::ReasonId(oms::Reason::kFileMissing), core::Severity::kCritical,
            "listed in the detached bundle " + DisplayPath(scope.bundle_path) +
                " but missing: deleted, renamed or moved since it was signed"));
        fr.verdict = Verdict::kReject;
        report->files.push_back(std::move(fr));
      }
    }
    if (signatures_required && judged == 0 && IsDirectory(operand)) {
      FileReport fr;
      fr.scan.path = operand;
      fr.operand = i;
      fr.scan.findings.push_back(OmsFinding(
          "MG-POLICY-EMPTY-MODEL", core::Severity::kHigh,
          "nothing to judge: the directory holds no file" +
              std::string(scope.present ? " the bundle does not ignore" : "") +
              ", and the policy requires signatures"));
      fr.verdict = Verdict::kReject;
      report->files.push_back(std::move(fr));
    }
  }
}

void ReadIndexIfAny(const Target& target, const core::OpenedFile& file, FileReport* fr) {
  if (!core::IsShardIndexName(core::BaseName(target.path)) || fr->verdict == Verdict::kError) return;
  auto index = core::ReadShardIndex(file.fd, file.size, core::Limits{});
  if (!fr->side) fr->side = std::make_shared<ModelSide>();
  if (index.ok()) {
    fr->side->index = std::move(index).value();
    return;
  }
  if (index.error().code == core::Code::kIoRead || index.error().code == core::Code::kIoChanged) {
    fr->scan.io_error = true;
    fr->scan.findings.push_back(scanner::FindingFromError(index.error()));
    fr->verdict = Verdict::kError;
    return;
  }
  fr->scan.findings.push_back(scanner::FindingFromError(index.error()));
  fr->verdict = Verdict::kReject;
}

void FinishSets(core::Severity bar, Report* report) {
  // Every judged file by path: a shard may be its own operand (pre-commit
  // passes the files it changed one by one).
  std::map<std::string, const FileReport*> by_path;
  for (const FileReport& fr : report->files) by_path.emplace(fr.scan.path, &fr);
  for (FileReport& index_fr : report->files) {
    if (!index_fr.side || !index_fr.side->index) continue;
    const core::ShardIndex& index = *index_fr.side->index;
    const std::string dir = DirName(index_fr.scan.path);
    core::ShardHeaders headers;
    signer::SetVerifications verified;
    bool all_judged = true;
    for (const std::string& shard : index.shards) {
      auto it = by_path.find(dir.empty() ? shard : dir + "/" + shard);
      if (it == by_path.end()) {
        all_judged = false;
        continue;
      }
      const FileReport& fr = *it->second;
      if (fr.scan.safetensors) {
        headers[shard] = &*fr.scan.safetensors;
      } else if (fr.side && fr.side->verification) {
        headers[shard] = &fr.side->verification->file;
      }
      if (fr.side && fr.side->verification) verified[shard] = &*fr.side->verification;
    }
    // An index named on its own (rel empty: a file operand) is judged
    // against its set only when its shards were judged too; from a
    // directory walk, a shard that was not found is missing.
    if (!all_judged && index_fr.rel.empty()) continue;
    std::vector<scanner::Finding> found = scanner::CheckShardSet(index, headers);
    for (const core::Error& e : signer::CheckSet(index, verified)) {
      found.push_back(scanner::FindingFromError(e));
    }
    for (scanner::Finding& f : found) {
      // Lower enum = more severe.
      if (f.severity <= bar && index_fr.verdict == Verdict::kPass) index_fr.verdict = Verdict::kReject;
      index_fr.scan.findings.push_back(std::move(f));
    }
  }
}

}  // namespace modelgate::cli
