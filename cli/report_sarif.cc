// SARIF 2.1.0 report, shaped for GitHub code scanning (issue 5, point 3).
//
// Model files are binary, so results carry no `region` (GitHub and the
// errata01 schema want a text region to name a start line); the byte offset,
// archive member and member offset go in `properties` and in the message.
// Locations are relative to the working directory under the `%SRCROOT%` base
// id, which is what code scanning matches against repository paths; a file
// outside the working directory keeps an absolute file:// URI.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cli.h"

namespace modelgate::cli {
namespace {

using nlohmann::ordered_json;

// RuleHelp describes one finding id: a one-line title and the help text a
// reviewer reads next to the alert.
struct RuleHelp {
  std::string_view id;
  std::string_view short_description;
  std::string_view help;
};

// Every fixed finding id the project emits (core/src/codes.cc, scanner/src,
// signer, cli/walk.cc). tests/sarif checks that no id in the sources is
// missing here. MG-YARA-<RULE> ids are dynamic: see kYaraHelp.
constexpr std::array kRuleHelp = {
    // I/O and the walk.
    RuleHelp{"MG-IO-OPEN", "File or directory cannot be opened",
             "modelgate could not open this path (permissions, a missing file, or a directory nested "
             "too deep to walk), so it could not judge it. Fix access and scan again."},
    RuleHelp{"MG-IO-READ", "File cannot be read",
             "Reading or mapping the file failed, so its content was not judged. Check the storage "
             "and scan again."},
    RuleHelp{"MG-IO-NOT-REGULAR", "Not a regular file",
             "The path is not a regular file (a device, FIFO, socket or a symbolic link that is not "
             "followed). Model files must be regular files."},
    RuleHelp{"MG-IO-CHANGED", "File changed while it was being checked",
             "The file's identity (device, inode, size, modification or change time) changed between "
             "opening and the end of the check: another process wrote to it. Its verdict cannot be "
             "trusted; scan a copy nobody writes to."},
    RuleHelp{"MG-FS-SYMLINK", "Symbolic link inside the scanned tree",
             "A symbolic link that points inside the scanned tree. It is not followed; its target is "
             "scanned where it lives. Informational."},
    RuleHelp{"MG-FS-SYMLINK-ESCAPE", "Symbolic link leads out of the tree or does not resolve",
             "A symbolic link in the scanned tree points outside it, dangles or loops. modelgate "
             "never follows it, but a loader given this directory might read a file nobody scanned. "
             "Remove the link or replace it with the file itself."},
    RuleHelp{"MG-FS-SPECIAL-FILE", "Special file in the scanned tree",
             "A FIFO, socket or device node in a model directory. Reading one can block or return "
             "unbounded data; model trees should hold regular files only."},
    // Format detection.
    RuleHelp{"MG-FMT-UNKNOWN", "Unrecognized file format",
             "The content matches no model format modelgate knows. Informational: the file is "
             "neither analyzed nor loaded by the known loaders' rules."},
    RuleHelp{"MG-FMT-NOT-ANALYZED", "Format recognized but not analyzed",
             "The format was detected from the content, but this version does not analyze it, so "
             "anything it may execute on load was not checked. Convert to safetensors or review it "
             "by hand."},
    RuleHelp{"MG-FMT-LFS-POINTER", "Git LFS pointer instead of the weights",
             "The file is a git-lfs pointer (a few lines naming the real object), not the model: "
             "the weights were not fetched. Run git lfs pull (actions/checkout: lfs: true) and "
             "scan again."},
    RuleHelp{"MG-FMT-EXTENSION-MISMATCH", "File extension does not match the content",
             "The file name claims one format but the bytes are another. Tools that trust the "
             "extension may load it with the wrong reader; a format that can carry code hidden "
             "behind a harmless extension is high severity."},
    // Safetensors core rules.
    RuleHelp{"MG-ST-TRUNCATED", "Safetensors file is truncated",
             "The file ends before the 8-byte header length, the header or the data it declares. "
             "The reference loader rejects it."},
    RuleHelp{"MG-ST-HEADER-TOO-LARGE", "Safetensors header exceeds the size limit",
             "The declared header length is above the limit (default 100,000,000 bytes, the "
             "reference implementation's cap). Checked before any allocation."},
    RuleHelp{"MG-ST-OVERLAP", "Tensor byte ranges overlap",
             "Two tensors' data_offsets overlap. Readers may disagree about which bytes a name "
             "means; the data section must be tiled exactly."},
    RuleHelp{"MG-ST-SHAPE-OVERFLOW", "Tensor shape overflows 64 bits",
             "The element count times the dtype size of a tensor does not fit in 64 bits. A reader "
             "that wraps around would compute a small size for a huge tensor."},
    RuleHelp{"MG-ST-HEADER-LENGTH", "Invalid safetensors header length",
             "The 8-byte little-endian header length is larger than the file or otherwise impossible."},
    RuleHelp{"MG-ST-HEADER-EMPTY", "Empty safetensors header",
             "The header length is zero; a safetensors header is a JSON object."},
    RuleHelp{"MG-ST-HEADER-UTF8", "Safetensors header is not valid UTF-8",
             "The header contains bytes that are not strict UTF-8 (or a byte order mark). The "
             "reference loader rejects it."},
    RuleHelp{"MG-ST-HEADER-START", "Safetensors header does not start with '{'",
             "The header must begin with the JSON object's '{' (no leading whitespace or BOM), as "
             "the reference implementation requires."},
    RuleHelp{"MG-ST-JSON-SYNTAX", "Safetensors header is not valid JSON",
             "The header is not one well-formed JSON object (syntax error, NaN literal, trailing "
             "garbage)."},
    RuleHelp{"MG-ST-JSON-DEPTH", "Safetensors header nests too deeply",
             "The header's JSON nesting exceeds the limit (default 16; a valid header needs 3)."},
    RuleHelp{"MG-ST-DUPLICATE-TENSOR", "Duplicate tensor name",
             "Two header entries have the same tensor name (after decoding escapes). JSON readers "
             "disagree on which one wins, so two tools can load different weights."},
    RuleHelp{"MG-ST-DUPLICATE-KEY", "Duplicate JSON key in the header",
             "A key appears twice at some level of the header (for example inside __metadata__). "
             "The reference keeps the last, other readers the first: a parser differential."},
    RuleHelp{"MG-ST-RESERVED-ESCAPED", "__metadata__ key spelled with escapes",
             "A header key decodes to __metadata__ but is written with JSON escapes (for example "
             "\"\\u005f_metadata__\"). The reference reads it as metadata, byte-matching parsers as "
             "a tensor: a parser differential a gate refuses rather than resolves."},
    RuleHelp{"MG-ST-BAD-NAME", "Invalid tensor or metadata name",
             "A name is empty or contains NUL or control characters."},
    RuleHelp{"MG-ST-NAME-TOO-LONG", "Tensor name too long",
             "A tensor name exceeds the limit (default 65,536 bytes)."},
    RuleHelp{"MG-ST-TOO-MANY-TENSORS", "Too many tensors",
             "The header declares more tensors than the limit (default 1,000,000)."},
    RuleHelp{"MG-ST-TOO-MANY-KEYS", "Too many keys in the header",
             "A header object holds more keys than the limits allow."},
    RuleHelp{"MG-ST-METADATA-TYPE", "__metadata__ is not a string-to-string object",
             "__metadata__ must be an object whose values are all strings (not null, numbers or "
             "nested objects)."},
    RuleHelp{"MG-ST-ENTRY-TYPE", "Tensor entry is not an object",
             "A tensor entry must be a JSON object with dtype, shape and data_offsets."},
    RuleHelp{"MG-ST-ENTRY-UNKNOWN-FIELD", "Tensor entry has an unknown field",
             "A tensor entry has a field other than dtype, shape and data_offsets."},
    RuleHelp{"MG-ST-ENTRY-MISSING-FIELD", "Tensor entry lacks a field",
             "A tensor entry lacks dtype, shape or data_offsets."},
    RuleHelp{"MG-ST-FIELD-TYPE", "Tensor field has the wrong type",
             "dtype must be a string; shape and data_offsets arrays of non-negative integers."},
    RuleHelp{"MG-ST-UNKNOWN-DTYPE", "Unknown dtype",
             "The dtype is not one the safetensors reference implementation defines."},
    RuleHelp{"MG-ST-RANK-TOO-LARGE", "Tensor rank too large",
             "A shape has more dimensions than the limit (default 64, numpy's cap)."},
    RuleHelp{"MG-ST-PARTIAL-BYTE", "Sub-byte tensor does not fill whole bytes",
             "The element count times the dtype's bit width is not a multiple of 8."},
    RuleHelp{"MG-ST-SIZE-MISMATCH", "Tensor byte range does not match its shape",
             "end - start differs from the size implied by shape and dtype: a reader that trusts "
             "one or the other reads different bytes."},
    RuleHelp{"MG-ST-OFFSETS-REVERSED", "Tensor data_offsets end before start",
             "A tensor's end offset is smaller than its start offset."},
    RuleHelp{"MG-ST-GAP", "Gap in the data section",
             "Bytes between tensors belong to no tensor. A second payload (a polyglot) can hide "
             "there; the data section must be tiled exactly."},
    RuleHelp{"MG-ST-ALIAS", "Two tensors share the same bytes",
             "Two tensors name the same byte range, so changing one changes the other."},
    RuleHelp{"MG-ST-OUT-OF-BOUNDS", "Tensor data lies past the end of the file",
             "A tensor's data_offsets point beyond the data section."},
    RuleHelp{"MG-ST-TRAILING-BYTES", "Bytes after the last tensor",
             "The file continues after the data section. Another format (a pickle, a zip) can "
             "hide there and be read by a different loader."},
    // Signatures.
    RuleHelp{"MG-SIG-MISSING", "No signature",
             "The file carries no signature a required-signature policy accepts. Sign it with "
             "`modelgate sign` using a trusted key."},
    RuleHelp{"MG-SIG-UNTRUSTED", "Signed by an untrusted key",
             "Every signature record names a key that is not in the trusted key list."},
    RuleHelp{"MG-SIG-BAD-RECORD", "Malformed signature record",
             "A stsig.v1 record or stsig.* metadata key is malformed (unknown or duplicate fields, "
             "bad encoding, an unknown stsig.* key)."},
    RuleHelp{"MG-SIG-UNKNOWN-ALG", "Signature uses an unknown algorithm",
             "A signature record names an algorithm outside the allowlist (ed25519)."},
    RuleHelp{"MG-SIG-UNKNOWN-KEY", "Signature names an unknown key",
             "A signature record's key id matches no trusted key."},
    RuleHelp{"MG-SIG-BAD-SIGNATURE", "Signature does not verify",
             "The Ed25519 signature does not verify over the signed header content: the header "
             "(dtypes, shapes, offsets, names, metadata) changed after signing, or the signature was "
             "forged."},
    RuleHelp{"MG-SIG-DIGEST-MAP", "Tensor digest map is inconsistent",
             "stsig.v1.sha256 does not name exactly the file's tensors, or is malformed."},
    RuleHelp{"MG-SIG-TENSOR-MISMATCH", "Tensor bytes differ from what was signed",
             "A tensor's SHA-256 differs from the signed digest: its data was modified after "
             "signing."},
    RuleHelp{"MG-SIG-DUPLICATE-KID", "Two signature records share a key id",
             "Several records claim the same key id; a verifier must not pick one silently."},
    RuleHelp{"MG-SIG-KEY-FORMAT", "Key file cannot be read",
             "A public or private key file is not a PEM Ed25519 key in the expected form."},
    RuleHelp{"MG-SIG-KEY-WRITE", "Key file cannot be written",
             "Writing a key file failed (it may already exist: keys are never overwritten)."},
    RuleHelp{"MG-SIG-CRYPTO", "Cryptographic library failure",
             "libsodium or OpenSSL reported an internal error."},
    RuleHelp{"MG-SIG-OPTIONS", "Invalid signing options",
             "The signing options are inconsistent or out of range."},
    // Pickle.
    RuleHelp{"MG-PK-PICKLE-FORMAT", "Pickle format; prefer safetensors",
             "The file is a pickle (or contains one) whose imports are all on the allowlist of "
             "plain tensor-rebuilding globals. Loading a pickle can run code, so convert the "
             "weights to safetensors."},
    RuleHelp{"MG-PK-CRITICAL-IMPORT", "Pickle imports a code-execution callable",
             "The pickle imports a callable that runs commands or code (os.system, subprocess, "
             "builtins.eval/exec, importlib, ...). Loading it executes that code: do not load the "
             "file."},
    RuleHelp{"MG-PK-UNKNOWN-IMPORT", "Pickle imports a global that is not allowlisted",
             "The pickle imports a global outside the allowlist of tensor-rebuilding globals. It "
             "may be harmless or a gadget; it needs review before the file is loaded."},
    RuleHelp{"MG-PK-CALL-NOT-ALLOWED", "Pickle calls something not allowlisted",
             "An opcode sequence (REDUCE, NEWOBJ, INST, OBJ, BUILD...) calls an object that is not an "
             "allowlisted constructor. Loading the file runs that call."},
    RuleHelp{"MG-PK-EXT-CODE", "Pickle uses an extension code",
             "EXT1/EXT2/EXT4 opcodes import whatever the copyreg extension registry maps the code to "
             "in the loading process; the target cannot be known statically."},
    RuleHelp{"MG-PK-MALFORMED", "Pickle stream is malformed",
             "The stream fails partway (truncated, bad opcode, undefined memo, stack underflow, no "
             "STOP). Everything before the failure still runs on load and was judged."},
    RuleHelp{"MG-PK-DISAGREEMENT", "Pickle readers disagree",
             "pickle and pickletools (or pickle.py) read this stream differently; scanners built "
             "on pickletools can be fooled. modelgate follows the C unpickler."},
    RuleHelp{"MG-PK-LIMIT", "Pickle analysis limit reached",
             "The stream exceeds an analysis limit (size, memo, nesting), so it was not fully "
             "analyzed."},
    RuleHelp{"MG-PK-PY2-MAPPING", "Python 2 name mapped to a Python 3 global",
             "A Python 2 module or name (__builtin__, cPickle, commands...) is mapped by the loader "
             "to a Python 3 global; the finding names the global it becomes."},
    RuleHelp{"MG-PK-NESTED-PICKLE", "Pickle loads another pickle",
             "The stream embeds and loads a nested pickle; the nested stream was analyzed "
             "recursively where possible."},
    RuleHelp{"MG-PK-TRAILING-DATA", "Bytes after the last pickle",
             "Data follows the final STOP opcode. Loaders that read further streams, or another "
             "format, may see it."},
    // numpy.
    RuleHelp{"MG-NPY-MALFORMED", "Malformed .npy file",
             "The .npy magic, version or header length is invalid."},
    RuleHelp{"MG-NPY-HEADER", "Invalid .npy header",
             "The header is not the dict of descr, fortran_order and shape that np.load accepts."},
    RuleHelp{"MG-NPY-HEADER-TOO-LARGE", "Oversized .npy header",
             "The .npy header exceeds the header size limit."},
    RuleHelp{"MG-NPY-BAD-DESCR", "Unknown .npy dtype descriptor",
             "The descr field is unknown or malformed."},
    RuleHelp{"MG-NPY-SHAPE-OVERFLOW", ".npy array size overflows 64 bits",
             "The shape times the item size does not fit in 64 bits."},
    RuleHelp{"MG-NPY-TRUNCATED", ".npy array body is truncated",
             "The file holds fewer bytes than the shape and dtype require."},
    RuleHelp{"MG-NPY-TRAILING-DATA", "Bytes after the .npy array body",
             "np.load ignores bytes after the array; another format can hide there."},
    // zip.
    RuleHelp{"MG-ZIP-MALFORMED", "Malformed zip archive",
             "The archive's end record or central directory cannot be read as zip readers do."},
    RuleHelp{"MG-ZIP-LIMIT", "Zip analysis limit reached",
             "The entry count, central directory size or another zip limit is exceeded (a zip bomb "
             "guard); the rest was not analyzed."},
    RuleHelp{"MG-ZIP-TRAILING-DATA", "Bytes after the end of the zip archive",
             "Data follows the end-of-central-directory record; another format can hide there."},
    RuleHelp{"MG-ZIP-PREPENDED-DATA", "Data before the zip archive",
             "The archive starts after other bytes. Python's zipfile still reads it, PyTorch's "
             "reader may not, and a leading pickle is what torch.load unpickles."},
    RuleHelp{"MG-ZIP-HIDDEN-DATA", "Unaccounted bytes inside the zip archive",
             "Bytes between members or between the central directory and its end record belong to "
             "no member."},
    RuleHelp{"MG-ZIP-DUPLICATE-NAME", "Duplicate zip member name",
             "Two members have the same name; readers disagree on which one a load uses."},
    RuleHelp{"MG-ZIP-UNSAFE-NAME", "Unsafe zip member name",
             "A member name is absolute, contains '..', or is otherwise unsafe to extract."},
    RuleHelp{"MG-ZIP-ENCRYPTED", "Encrypted zip member",
             "An encrypted member cannot be analyzed."},
    RuleHelp{"MG-ZIP-BAD-LOCAL-HEADER", "Invalid zip local header",
             "A member's local header is missing, truncated or past the end of the file."},
    RuleHelp{"MG-ZIP-NAME-MISMATCH", "Zip local and central names differ",
             "The local header and the central directory name a member differently; streaming and "
             "central-directory readers see different files."},
    RuleHelp{"MG-ZIP-FIELD-MISMATCH", "Zip local and central fields differ",
             "Flags, method, sizes or CRC differ between the local header and the central "
             "directory."},
    RuleHelp{"MG-ZIP-OUT-OF-BOUNDS", "Zip member data past the end of the file",
             "A member's data runs beyond the file."},
    RuleHelp{"MG-ZIP-OVERLAP", "Zip members overlap",
             "Two members share bytes, so one member's content is also another's."},
    RuleHelp{"MG-ZIP-BAD-CRC", "Zip member fails its CRC check",
             "The member's data does not match its CRC-32; it was altered."},
    RuleHelp{"MG-ZIP-UNSUPPORTED-METHOD", "Unsupported zip compression method",
             "The member uses a compression method modelgate cannot decode, so it was not analyzed."},
    RuleHelp{"MG-ZIP-TORCHSCRIPT", "TorchScript code in the archive",
             "The archive contains TorchScript code that runs when the model is loaded with "
             "torch.jit.load; it needs review."},
    // tar.
    RuleHelp{"MG-TAR-MALFORMED", "Malformed tar archive",
             "The tar stream cannot be read as Python's tarfile reads it."},
    RuleHelp{"MG-TAR-BAD-CHECKSUM", "Tar header fails its checksum",
             "A header block's checksum is wrong; readers disagree on whether the archive ends "
             "there."},
    RuleHelp{"MG-TAR-BAD-NUMBER", "Invalid number in a tar header",
             "A numeric header field is not a number tarfile reads, or readers parse it differently."},
    RuleHelp{"MG-TAR-LIMIT", "Tar analysis limit reached",
             "Member count, extension headers or sizes exceed a limit; the rest was not analyzed."},
    RuleHelp{"MG-TAR-PAX-MALFORMED", "Malformed PAX extended header",
             "A PAX record is malformed or lies outside its declared size."},
    RuleHelp{"MG-TAR-PAX-GLOBAL", "Global PAX header",
             "A global PAX header changes attributes of every following member."},
    RuleHelp{"MG-TAR-PAX-MISMATCH", "Conflicting long-name or PAX headers",
             "Several long-name/PAX headers describe one member; tar readers pick different ones."},
    RuleHelp{"MG-TAR-UNSUPPORTED", "Unsupported tar feature",
             "The member uses a tar feature (such as GNU sparse files) that is not analyzed."},
    RuleHelp{"MG-TAR-UNKNOWN-TYPE", "Unknown tar member type",
             "A member has a type flag tar readers handle differently."},
    RuleHelp{"MG-TAR-UNSAFE-NAME", "Unsafe tar member name",
             "A member name is absolute, contains '..', or is otherwise unsafe to extract."},
    RuleHelp{"MG-TAR-LINK", "Link member in the tar archive",
             "A symbolic or hard link member; extracting it, or a loader following it, can reach "
             "files outside the archive."},
    RuleHelp{"MG-TAR-SPECIAL", "Device or FIFO member in the tar archive",
             "Extracting this member creates a device node or FIFO."},
    RuleHelp{"MG-TAR-OUT-OF-BOUNDS", "Tar member data past the end of the file",
             "A member's data runs beyond the file; tarfile raises."},
    RuleHelp{"MG-TAR-HIDDEN-DATA", "Hidden bytes in the tar archive",
             "Non-zero bytes in block padding or after the end-of-archive marker belong to no "
             "member."},
    RuleHelp{"MG-TAR-DUPLICATE-NAME", "Duplicate tar member name",
             "A member name appears more than once; tarfile takes the last, other readers the first."},
    RuleHelp{"MG-TAR-TORCH-LAYOUT", "Legacy torch tar layout not followed",
             "The archive does not have the layout the legacy torch loader expects; the rest was "
             "analyzed as one pickle stream."},
    // Compressed wrappers and other archives.
    RuleHelp{"MG-ARCHIVE-MALFORMED", "Malformed compressed stream",
             "A gzip, bzip2, xz or zlib stream is invalid or truncated."},
    RuleHelp{"MG-ARCHIVE-LIMIT", "Decompression limit reached",
             "Decompressed size, expansion ratio or nesting depth exceeds a limit (a bomb guard); "
             "the rest was not analyzed."},
    RuleHelp{"MG-ARCHIVE-TRAILING-DATA", "Bytes after the compressed stream",
             "Data follows the end of the compressed stream; another format can hide there."},
    RuleHelp{"MG-ARCHIVE-MULTI-MEMBER", "Several compressed streams",
             "A second stream follows the first. Python's reader decodes every stream, "
             "single-stream readers only the first."},
    RuleHelp{"MG-ARCHIVE-UNSUPPORTED", "Archive not unpacked",
             "The archive format is detected but not unpacked, so its members were not analyzed."},
    // Policy (policy/include/modelgate/policy.h).
    RuleHelp{"MG-POLICY-FORMAT", "Format not allowed by the policy",
             "The policy's formats.allow list does not include this file's format (for example "
             "only safetensors is allowed). Convert the model to an allowed format."},
    RuleHelp{"MG-POLICY-PICKLE", "Pickle content rejected by the policy",
             "The policy's pickle mode is reject, and the file is or contains a pickle. Loading a "
             "pickle can run code; convert the weights to safetensors."},
    RuleHelp{"MG-POLICY-SIGNATURE", "Signature requirement not met",
             "The policy requires signatures from trusted keys (with a threshold), and the file's "
             "signature is invalid, missing, untrusted or has too few trusted signers. Sign it "
             "with a key the policy lists."},
    RuleHelp{"MG-POLICY-EXCEPTION-EXPIRED", "Policy exception has expired",
             "An exception in the policy matches this file but its expiry date has passed, so it no "
             "longer waives anything. Renew or remove the exception."},
    // Polyglots and YARA.
    RuleHelp{"MG-POLY-LOADERS", "Loaders read the file as different formats",
             "Two of the loaders modelgate models (torch.load, pickle.load, numpy.load, "
             "joblib.load, the safetensors reader) would read this file as different formats: a "
             "polyglot. Each reading is judged, but the bytes mean different things to different "
             "tools; do not load it."},
    RuleHelp{"MG-POLY-ZIP", "File is also a zip archive",
             "The file parses both as its own format and as a zip archive: a zip reader sees other "
             "content than the intended loader."},
    RuleHelp{"MG-YARA-PARTIAL", "YARA ran on part of a member",
             "A member that no loader deserializes is larger than the 16 MiB YARA reads of it; "
             "the rules ran on its first bytes only. Informational."},
    RuleHelp{"MG-YARA-SCAN-ERROR", "YARA scan failed",
             "A YARA scan failed or timed out, so the rules did not cover this part of the file."},
};

// MG-YARA-<RULE>: a match of the shipped rule set or of --yara-rules.
constexpr RuleHelp kYaraHelp = {
    "MG-YARA-*", "YARA rule matched",
    "A YARA rule (the shipped model-file rules or a --yara-rules directory) matched this file: "
    "shell commands or URLs in metadata, embedded pickle or executable magic, known payload "
    "strings. The rule name is the part of the id after MG-YARA-; the message says what matched. "
    "Review the file before loading it."};

constexpr RuleHelp kUnknownHelp = {
    "", "modelgate finding", "A modelgate finding; the message describes the problem."};

const RuleHelp& HelpFor(std::string_view id) {
  for (const auto& h : kRuleHelp) {
    if (h.id == id) return h;
  }
  if (id.starts_with("MG-YARA-")) return kYaraHelp;
  return kUnknownHelp;
}

// GitHub's convention: a CVSS-like score as a string on the rule; code
// scanning maps >= 9.0 critical, 7.0-8.9 high, 4.0-6.9 medium, < 4 low.
const char* SecuritySeverity(core::Severity s) {
  switch (s) {
    case core::Severity::kCritical: return "9.5";
    case core::Severity::kHigh: return "8.0";
    case core::Severity::kMedium: return "5.5";
    case core::Severity::kLow: return "2.0";
    case core::Severity::kInfo: return nullptr;  // not a security alert
  }
  return nullptr;
}

SarifLevel LevelOf(core::Severity s) {
  switch (s) {
    case core::Severity::kCritical:
    case core::Severity::kHigh: return SarifLevel::kError;
    case core::Severity::kMedium: return SarifLevel::kWarning;
    case core::Severity::kLow:
    case core::Severity::kInfo: return SarifLevel::kNote;
  }
  return SarifLevel::kNote;
}

constexpr std::array<std::string_view, 3> kLevelNames = {"error", "warning", "note"};

std::string Level(core::Severity s) { return std::string(kLevelNames[static_cast<size_t>(LevelOf(s))]); }

// Shown is whether a finding is a result at `min_level` (the enumerators go
// from most to least important).
bool Shown(core::Severity s, SarifLevel min_level) { return LevelOf(s) <= min_level; }

// PercentEncode keeps RFC 3986 unreserved bytes and '/', and escapes every
// other byte, so hostile names (':' in a first segment, '#', '?', spaces,
// invalid UTF-8) cannot change what the URI reference means.
std::string PercentEncode(std::string_view path) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : path) {
    const bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_' || c == '~' || c == '/';
    if (keep) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// ArtifactUri is where a scanned file goes: relative to `cwd` when it lies
// inside it (lexically, without touching the file system), else an absolute
// file:// URI. `relative` tells which.
std::string ArtifactUri(const std::string& path, const std::filesystem::path& cwd, bool* relative) {
  namespace fs = std::filesystem;
  fs::path p(path);
  if (!cwd.empty()) {
    const fs::path abs = (p.is_absolute() ? p : cwd / p).lexically_normal();
    const fs::path rel = abs.lexically_relative(cwd);
    const bool inside = !rel.empty() && rel != "." && *rel.begin() != "..";
    *relative = inside;
    return inside ? PercentEncode(rel.generic_string()) : "file://" + PercentEncode(abs.generic_string());
  }
  // No working directory: absolute paths stay absolute, relative ones are
  // reported as given.
  *relative = !p.is_absolute();
  p = p.lexically_normal();
  return *relative ? PercentEncode(p.generic_string()) : "file://" + PercentEncode(p.generic_string());
}

std::string DirUri(const std::filesystem::path& dir) {
  std::string s = dir.generic_string();
  if (s.empty() || s.back() != '/') s += '/';
  return "file://" + PercentEncode(s);
}

// Where, in words: the message is all a reader sees of a binary location.
std::string Where(const scanner::Finding& fd) {
  std::string out;
  if (!fd.member.empty()) {
    out = " [in archive member " + core::Quoted(fd.member);
    if (fd.member_offset != core::kNoOffset) out += " at byte " + std::to_string(fd.member_offset);
    if (fd.offset != core::kNoOffset) out += "; file byte " + std::to_string(fd.offset);
    out += "]";
  } else if (fd.offset != core::kNoOffset) {
    out = " [at byte " + std::to_string(fd.offset) + "]";
  }
  return out;
}

}  // namespace

bool ParseSarifLevel(std::string_view s, SarifLevel* out) {
  for (size_t i = 0; i < kLevelNames.size(); ++i) {
    if (kLevelNames[i] == s) {
      *out = static_cast<SarifLevel>(i);
      return true;
    }
  }
  return false;
}

std::string RenderSarif(const Report& report) { return RenderSarif(report, SarifLevel::kWarning); }

std::string RenderSarif(const Report& report, SarifLevel min_level) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path cwd = fs::current_path(ec);
  if (ec) cwd.clear();

  // One rule per id that appears, sorted by id; its severity is the worst
  // severity that id has in this report.
  std::map<std::string, core::Severity> rule_severity;
  for (const auto& f : report.files) {
    for (const auto& fd : f.scan.findings) {
      if (!Shown(fd.severity, min_level)) continue;
      auto [it, inserted] = rule_severity.emplace(fd.id, fd.severity);
      if (!inserted) it->second = std::min(it->second, fd.severity);  // lower = more severe
    }
  }
  std::map<std::string, size_t> rule_index;
  ordered_json rules = ordered_json::array();
  for (const auto& [id, severity] : rule_severity) {
    const RuleHelp& h = HelpFor(id);
    ordered_json r;
    r["id"] = id;
    r["shortDescription"] = {{"text", std::string(h.short_description)}};
    r["fullDescription"] = {{"text", std::string(h.help)}};
    r["help"] = {{"text", std::string(h.help)}};
    r["defaultConfiguration"] = {{"level", Level(severity)}};
    ordered_json props;
    if (const char* score = SecuritySeverity(severity)) {
      props["tags"] = {"security"};
      props["security-severity"] = score;
    }
    props["severity"] = std::string(core::SeverityName(severity));
    r["properties"] = std::move(props);
    rule_index[id] = rules.size();
    rules.push_back(std::move(r));
  }

  ordered_json results = ordered_json::array();
  ordered_json notifications = ordered_json::array();
  bool success = true;
  std::map<std::string, size_t> seen;  // fingerprint key -> occurrences
  for (const auto& f : report.files) {
    const auto& s = f.scan;
    bool relative = false;
    const std::string uri = ArtifactUri(s.path, cwd, &relative);
    ordered_json artifact{{"uri", uri}};
    if (relative && !cwd.empty()) artifact["uriBaseId"] = "%SRCROOT%";
    if (f.verdict == Verdict::kError) {
      success = false;
      notifications.push_back(
          {{"level", "error"},
           {"message", {{"text", "could not judge " + DisplayPath(s.path) + "; see its results"}}}});
    }
    for (const auto& fd : s.findings) {
      // A stable identity for the alert across runs: rule, file, place, and
      // the occurrence count among otherwise identical findings, counted
      // over every finding so that the level asked for does not change it.
      std::string key = fd.id + '\0' + uri + '\0' + fd.member + '\0' + std::to_string(fd.offset) +
                        '\0' + std::to_string(fd.member_offset);
      key += '\0' + std::to_string(seen[key]++);
      if (!Shown(fd.severity, min_level)) continue;
      ordered_json r;
      r["ruleId"] = fd.id;
      r["ruleIndex"] = rule_index.at(fd.id);
      r["level"] = Level(fd.severity);
      r["message"] = {{"text", fd.message + Where(fd)}};
      // No region: these are binary files (GitHub requires a start line in
      // any region it is given).
      r["locations"] = ordered_json::array({{{"physicalLocation", {{"artifactLocation", artifact}}}}});
      const auto digest = core::Sha256({reinterpret_cast<const uint8_t*>(key.data()), key.size()});
      r["partialFingerprints"] = {
          {"modelgateFinding/v1", core::HexLower(std::span<const uint8_t>(digest.data(), 16))}};
      ordered_json props;
      props["severity"] = std::string(core::SeverityName(fd.severity));
      if (const char* score = SecuritySeverity(fd.severity)) props["security-severity"] = score;
      if (fd.offset != core::kNoOffset) props["offset"] = fd.offset;
      if (!fd.member.empty()) {  // as in the JSON report: escaped, raw bytes beside
        props["member"] = core::EscapeInvalidUtf8(fd.member);
        if (std::string hex = NameBytes(fd.member); !hex.empty()) props["member_bytes"] = hex;
      }
      if (fd.member_offset != core::kNoOffset) props["member_offset"] = fd.member_offset;
      if (!fd.opcode.empty()) props["opcode"] = fd.opcode;
      if (!fd.global.empty()) props["global"] = fd.global;
      props["format"] = std::string(scanner::FormatName(s.format));
      props["verdict"] = VerdictName(f.verdict);
      r["properties"] = std::move(props);
      results.push_back(std::move(r));
    }
  }

  ordered_json invocation;
  invocation["executionSuccessful"] = success;
  if (!cwd.empty()) invocation["workingDirectory"] = {{"uri", DirUri(cwd)}};
  if (!notifications.empty()) invocation["toolExecutionNotifications"] = std::move(notifications);

  ordered_json run;
  run["tool"] = {{"driver",
                  {{"name", "modelgate"},
                   {"version", std::string(core::kVersion)},
                   {"semanticVersion", std::string(core::kVersion)},
                   {"rules", std::move(rules)}}}};
  if (!cwd.empty()) run["originalUriBaseIds"] = {{"%SRCROOT%", {{"uri", DirUri(cwd)}}}};
  run["invocations"] = ordered_json::array({std::move(invocation)});
  run["results"] = std::move(results);
  run["properties"] = {{"summary",
                        {{"files", report.summary.files},
                         {"passed", report.summary.passed},
                         {"rejected", report.summary.rejected},
                         {"errors", report.summary.errors}}}};

  ordered_json doc;
  doc["$schema"] = "https://json.schemastore.org/sarif-2.1.0.json";
  doc["version"] = "2.1.0";
  doc["runs"] = ordered_json::array({std::move(run)});
  // Invalid UTF-8 left in a message or global becomes U+FFFD rather than an
  // exception (artifact URIs percent-encode raw bytes).
  return doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace modelgate::cli
