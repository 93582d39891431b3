// Whole-model judgement: what a verdict on one file cannot see. A detached
// bundle (OpenSSF Model Signing) covering a directory operand, read and
// verified before the walk, so each file's verdict knows whether the bundle
// vouches for the bytes it read from that file's own descriptor; after the
// walk, the files the bundle lists that were not found, the empty model, and
// the sharded sets (an index against its shards' headers and set records).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cli.h"
#include "modelgate/detached.h"
#include "modelgate/path.h"
#include "modelgate/policy.h"
#include "modelgate/shard_index.h"
#include "modelgate/signer.h"

namespace modelgate::cli {

// kBundleName is the bundle a directory operand carries at its top when no
// --sig names one (model_signing's default file name).
using signer::oms::kBundleName;
using core::JoinPath;

// DetachedScope is one operand's detached bundle, if any.
struct DetachedScope {
  bool present = false;     // a bundle was named (--sig) or found (DIR/model.sig)
  std::string bundle_path;  // as named or found
  // The bundle's path relative to the operand directory when it lies in it
  // (that file is the signature, not a model file); "" otherwise.
  std::string bundle_rel;
  bool single_file = false;                 // the operand is one file
  std::optional<signer::oms::Bundle> bundle;  // when it parsed
  signer::oms::BundleVerdict verdict;         // kInvalid when it did not parse
  std::string reason_id;                      // MG-OMS-* when not kValid
  // SHA-256 of the bundle bytes read (when they were): the walk's entry for
  // the bundle file must be these bytes, or the file changed meanwhile.
  std::optional<core::Sha256Digest> bundle_sha256;
};

// LoadDetachedScopes reads, parses and verifies the bundle of every operand
// (opts.sig_path for the single operand it may be given with; else
// DIR/model.sig for a directory operand, FILE.sig for a file operand, when
// that name exists). A bundle found that way which is a symlink or not a
// regular file is an invalid bundle (the upload's fault: rejected).
// The bundle is read once, bounded by oms::kMaxBundleBytes, without
// following a symlink. An Error only when a named bundle cannot be read:
// the gate cannot judge. A bundle that is malformed is a present scope
// whose verdict is kInvalid.
core::Result<std::vector<DetachedScope>> LoadDetachedScopes(
    const CommonOptions& opts, std::span<const signer::PublicKey> trusted);

// DetachedJudgement is one file against its operand's scope: the policy's
// evidence, and the whole file's SHA-256, both from the descriptor the
// verdict reads.
struct DetachedJudgement {
  policy::DetachedEvidence evidence;
  std::optional<core::Sha256Digest> sha256;
  std::string state;  // "signed" "changed" "added" "ignored" or "" (no bundle)
};
// JudgeDetached hashes `file` as the scope's manifest asks (plus the whole
// file) and compares. Without a valid bundle it still hashes the whole file
// (the report's sha256). An Error when the file cannot be read.
core::Result<DetachedJudgement> JudgeDetached(const DetachedScope& scope, const Target& target,
                                              const core::OpenedFile& file,
                                              const core::HashOptions& hash);

// PruneVcs: `rel` is the operand's top-level .git (or inside it) and the
// operand's valid bundle ignores it. A checkout's .git holds every committed
// blob zlib-compressed (history, not the tree, and read by no loader);
// whoever signed the model left it out, as model_signing does by default.
// Without such a bundle .git is walked and judged like anything else.
bool PruneVcs(const DetachedScope& scope, std::string_view rel);

// FinishModels adds to `report`, after the walk, for each operand with a
// bundle: its findings, on the bundle's own entry (or a new one when the
// bundle lies outside the operand), when it is invalid, or not valid while
// `signatures_required`; and a rejected entry for every file a valid bundle
// lists that is missing (MG-OMS-FILE-MISSING). When `signatures_required`,
// a directory operand with nothing to judge (no file, or only files the
// bundle ignores) is a rejected entry of its own (MG-POLICY-EMPTY-MODEL).
void FinishModels(const std::vector<DetachedScope>& scopes, const CommonOptions& opts,
                  bool signatures_required, Report* report);

// ModelSide (cli.h: FileReport::side) is what FinishSets needs of one file
// beyond its report: its parsed shard index (an index file) and its
// embedded-signature check.
struct ModelSide {
  std::optional<core::ShardIndex> index;
  std::optional<signer::VerifyResult> verification;
};
// ReadIndexIfAny parses `file` as a shard index when `target`'s name says
// it is one (core::IsShardIndexName), from that descriptor, into fr->side.
// An index that does not parse is a finding (MG-SET-*) that rejects the
// file whatever the bar: its set cannot be judged.
void ReadIndexIfAny(const Target& target, const core::OpenedFile& file, FileReport* fr);
// FinishSets judges every parsed index against the shards judged in this
// run at the paths it names (their headers from the scan or the
// verification) and against their set records (signer::CheckSet): the
// findings go to the index's entry, which is rejected when one is at or
// above `bar`. An index found by a directory walk is always judged (a shard
// not found is missing); one named as a file operand only when every shard
// it lists was judged too (pre-commit passes just the files that changed).
void FinishSets(core::Severity bar, Report* report);

}  // namespace modelgate::cli
