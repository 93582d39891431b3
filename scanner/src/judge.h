// The judge: analyzes the bytes of one view — safetensors through the core
// rules, pickles through the pickle machine, zip archives member by member
// as PyTorch's reader finds them, .npy/.npz headers and object-array
// pickles, tar archives as tarfile lists them, compressed wrappers within
// the caps — and records every finding in one FileScan. Which views a file
// has is the loader models' call (loader_models.cc). Internal to the
// scanner.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "modelgate/path.h"
#include "modelgate/scanner.h"
#include "budget.h"
#include "decompress.h"
#include "npy.h"
#include "source.h"
#include "tar.h"
#include "torch_legacy.h"
#include "yara_rules.h"
#include "zip.h"

namespace modelgate::scanner::internal {

using core::Severity;

using core::BaseName;
using core::EndsWith;


// Where a byte span sits: in the file itself (absolute offsets), or inside
// an archive member (offsets relative to the member's decompressed bytes,
// plus the member's absolute data offset when it is stored uncompressed).
struct Place {
  std::string member;                       // "" = the file itself
  uint64_t file_base = 0;                   // absolute offset of byte 0, if known
  bool absolute = true;                     // byte offsets map to file offsets
};

inline Finding Placed(Finding f, const Place& at) {
  if (at.member.empty()) return f;
  f.member = f.member.empty() ? at.member : at.member + "!" + f.member;
  if (f.offset != core::kNoOffset) {
    // Inside a member, analysis offsets count from the member's first byte.
    f.member_offset = f.offset;
    f.offset = at.absolute ? at.file_base + f.offset : core::kNoOffset;
  }
  return f;
}

// IsTensorStorage: a torch zip's storage member "<archive>/data/<key>"
// (key digits): raw tensor bytes, never scanned by default.
inline bool IsTensorStorage(std::string_view name) {
  const size_t p = name.rfind("/data/");
  if (p == std::string_view::npos) return false;
  const std::string_view key = name.substr(p + 6);
  return !key.empty() &&
         std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// kYaraMemberBytes: YARA reads at most this much of a member no loader
// deserializes (its first bytes; an info finding says when it stopped).
inline constexpr uint64_t kYaraMemberBytes = 16ull << 20;

class Scanner;
// Text members (configs.cc): a *.json, *.jinja or *.py member of an archive
// (a .keras zip's config.json, a zipped repository) is judged as the
// library that reads it would use it. IsTextMember says which names are.
bool IsTextMember(std::string_view name);
void JudgeTextMember(Scanner& sc, std::span<const uint8_t> bytes, std::string_view name,
                     const Place& at, FileScan& out);
// JudgeGguf and JudgeHdf5 (formats.cc): a GGUF file or an HDF5 file (a
// Keras .h5 model: its model_config attribute, judged as a Keras config; a
// weights-only file has none), the file itself or a member at `at`.
void JudgeGguf(Scanner& sc, std::span<const uint8_t> bytes, const Place& at, FileScan& out);
void JudgeHdf5(Scanner& sc, std::span<const uint8_t> bytes, const Place& at, FileScan& out);
// SevenZip (formats.cc) judges every member of a 7z archive at `at`.
void SevenZip(Scanner& sc, std::span<const uint8_t> bytes, const Place& at, uint64_t depth,
              FileScan& out);

// Scanner judges views of one file. Every member and decoded stream is a
// span over a mapping — of the file itself, or of a sealed spool (memfd)
// holding decoded bytes — never a heap copy, and every byte decoded is
// charged to the one Budget of the file.
class Scanner {
 public:
  Scanner(const ScanOptions& options, FileScan& out)
      : opts_(options), out_(out), budget_(options.containers) {}

  const Budget& budget() const { return budget_; }
  Budget& budget() { return budget_; }

  // YaraMember runs the rules over a member no loader deserializes, up to
  // kYaraMemberBytes of it.
  void YaraMember(std::span<const uint8_t> bytes, uint64_t total_bytes, std::string_view scope,
                  const Place& at, uint64_t base = 0) {
    if (!opts_.yara) return;
    Yara(bytes.first(static_cast<size_t>(std::min<uint64_t>(bytes.size(), kYaraMemberBytes))),
         scope, at, base);
    if (total_bytes > kYaraMemberBytes || bytes.size() < total_bytes) {
      out_.findings.push_back(Placed(MakeFinding(
          "MG-YARA-PARTIAL", Severity::kInfo,
          "YARA rules ran on the first " + std::to_string(std::min<uint64_t>(bytes.size(), kYaraMemberBytes)) +
              " of " + std::to_string(total_bytes) + " bytes (no loader deserializes this member)"),
          at));
    }
  }

  // Yara runs the rule set (if any) over `bytes`, which start `base` bytes
  // into the file or member that `at` names.
  void Yara(std::span<const uint8_t> bytes, std::string_view scope, const Place& at,
            uint64_t base = 0) {
    if (!opts_.yara) return;
    std::vector<Finding> f;
    opts_.yara->Scan(bytes, scope, &f, base);
    for (auto& x : f) out_.findings.push_back(Placed(std::move(x), at));
  }
  bool YaraAll() const { return opts_.yara && opts_.yara_scope == YaraScope::kAll; }

  // SafetensorsHeaderYara runs the rules over a safetensors header
  // ("header": the `header_bytes` bytes after the length field, in place in
  // `file`) into *found. It reads only the options, so it may run on another
  // thread while the header is parsed (`guarded`: `file` is a
  // core::GuardedMapping, see YaraRules::ScanGuarded). The caller keeps the
  // findings only for a file the core accepts, as when the rules ran after
  // the parse.
  void SafetensorsHeaderYara(std::span<const uint8_t> file, uint64_t header_bytes,
                             std::vector<Finding>* found, bool guarded = false) const {
    if (!opts_.yara) return;
    constexpr uint64_t kHeaderStart = 8;
    if (file.size() < kHeaderStart || header_bytes > file.size() - kHeaderStart) return;
    const auto header = file.subspan(kHeaderStart, static_cast<size_t>(header_bytes));
    if (guarded) {
      opts_.yara->ScanGuarded(header, "header", found, kHeaderStart);
    } else {
      opts_.yara->Scan(header, "header", found, kHeaderStart);
    }
  }

  // SafetensorsYara records the header's findings (SafetensorsHeaderYara)
  // and scans the decoded metadata ("metadata": one "key<TAB>value" line per
  // entry, so "\u0063url" is seen as "curl"); tensor data only for scope all.
  void SafetensorsYara(std::span<const uint8_t> file, const core::Safetensors& st,
                       std::vector<Finding> header_findings) {
    if (!opts_.yara) return;
    constexpr uint64_t kHeaderStart = 8;
    for (auto& x : header_findings) out_.findings.push_back(std::move(x));
    std::string text;
    for (const auto& [k, v] : st.metadata) text += k + "\t" + v + "\n";
    std::vector<Finding> f;
    opts_.yara->Scan({reinterpret_cast<const uint8_t*>(text.data()), text.size()}, "metadata", &f);
    for (auto& x : f) {
      // Offsets in the decoded text are not file offsets: point at the
      // header, and skip what the raw header already showed.
      const bool seen = std::any_of(out_.findings.begin(), out_.findings.end(),
                                    [&](const Finding& y) { return y.id == x.id; });
      if (seen) continue;
      x.offset = kHeaderStart;
      out_.findings.push_back(std::move(x));
    }
    if (YaraAll() && st.data_start < file.size()) {
      Yara(file.subspan(static_cast<size_t>(st.data_start)), "data", Place{}, st.data_start);
    }
  }

  // YaraPickle runs the rules over each top-level stream ("pickle": what
  // the unpickler reads); what lies between and after them (raw storages,
  // joblib arrays) only for scope all. `findings` are the indices in
  // out_.findings of `a`'s own findings (Keep), for FoldYara.
  void YaraPickle(const PickleAnalysis& a, std::span<const uint8_t> bytes, uint64_t base,
                  const Place& at, std::pair<size_t, size_t> findings) {
    if (!opts_.yara) return;
    // The import finding of each flagged global (one per name: folded).
    std::unordered_map<std::string, size_t> import_findings;
    for (size_t k = findings.first; k < findings.second; ++k) {
      const Finding& f = out_.findings[k];
      if (f.id == "MG-PK-CRITICAL-IMPORT" || f.id == "MG-PK-UNKNOWN-IMPORT") {
        import_findings.try_emplace(f.global, k);
      }
    }
    uint64_t covered = 0;
    for (const PickleStream& st : a.streams) {
      if (st.depth != 0 || st.offset < base || st.end < st.offset) continue;
      const uint64_t from = st.offset - base;
      if (from >= bytes.size()) continue;
      const uint64_t n = std::min<uint64_t>(st.end - st.offset, bytes.size() - from);
      const auto stream = bytes.subspan(from, n);
      if (n > kYaraFoldMaxBytes) {
        Yara(stream, "pickle", at, st.offset);
      } else {
        std::vector<YaraHit> hits;
        opts_.yara->ScanHits(stream, "pickle", &hits, st.offset);
        FoldYara(a, stream, st.offset, import_findings, &hits);
        for (auto& h : hits) out_.findings.push_back(Placed(std::move(h.finding), at));
      }
      covered = std::max(covered, from + n);
    }
    if (YaraAll() && covered < bytes.size()) Yara(bytes.subspan(covered), "data", at, base + covered);
  }

  // FoldYara removes from `hits` (rules matched over `bytes`, a top-level
  // stream of `a`, which start at offset `base`) each one that sees the
  // same cause as a built-in import finding, and lists its id in that
  // finding's corroborated_by. The same cause, exactly: every match of the
  // rule lies inside the bytes that name one of the flagged imports in
  // those bytes (PickleImport::span_*) whose finding is at least as severe
  // as the rule,
  // and the rule no longer matches once all those bytes are blanked (libyara
  // records only a string's first match: the rescan shows there is no other
  // outside them). A rule that matched anything else is reported on its own.
  void FoldYara(const PickleAnalysis& a, std::span<const uint8_t> bytes, uint64_t base,
                const std::unordered_map<std::string, size_t>& import_findings,
                std::vector<YaraHit>* hits) {
    struct Cover {
      uint64_t begin, end;
      size_t finding;  // index in out_.findings
    };
    std::vector<Cover> covers;
    for (const PickleImport& imp : a.imports) {
      // Spans inside the stream's bytes: its own imports, and those of a
      // pickle nested in place in one of its literals.
      if (imp.safety == GlobalClass::kSafe || imp.span_end <= imp.span_begin ||
          imp.span_begin < base || imp.span_end - base > bytes.size()) {
        continue;
      }
      if (auto it = import_findings.find(imp.FullName()); it != import_findings.end()) {
        covers.push_back({imp.span_begin, imp.span_end, it->second});
      }
    }
    if (covers.empty() || hits->empty()) return;
    // Candidates: every recorded match inside a cover as severe as the rule.
    std::vector<std::vector<size_t>> folds_into(hits->size());
    bool any = false;
    for (size_t h = 0; h < hits->size(); ++h) {
      const YaraHit& hit = (*hits)[h];
      if (hit.matches.empty()) continue;
      std::vector<size_t> into;
      bool all = true;
      for (const auto& match : hit.matches) {
        // Not a structured binding: clang 14 cannot capture one in a lambda.
        const auto mb = match.first;
        const auto me = match.second;
        auto c = std::find_if(covers.begin(), covers.end(), [&](const Cover& x) {
          return x.begin <= mb && me <= x.end &&
                 out_.findings[x.finding].severity <= hit.finding.severity;  // lower = more severe
        });
        if (c == covers.end()) {
          all = false;
          break;
        }
        if (std::find(into.begin(), into.end(), c->finding) == into.end()) into.push_back(c->finding);
      }
      if (all) {
        folds_into[h] = std::move(into);
        any = true;
      }
    }
    if (!any) return;
    // One rescan per rule severity, with the covers a rule of that severity
    // may fold into blanked (so a match in a less severe import's bytes
    // still counts as elsewhere).
    std::vector<std::pair<Severity, std::vector<YaraHit>>> rescans;
    for (size_t h = 0; h < hits->size(); ++h) {
      const Severity sev = (*hits)[h].finding.severity;
      if (folds_into[h].empty() ||
          std::any_of(rescans.begin(), rescans.end(), [&](const auto& r) { return r.first == sev; })) {
        continue;
      }
      std::vector<uint8_t> blanked(bytes.begin(), bytes.end());
      for (const Cover& c : covers) {
        if (out_.findings[c.finding].severity > sev) continue;
        std::fill(blanked.begin() + static_cast<long>(c.begin - base),
                  blanked.begin() + static_cast<long>(c.end - base), uint8_t{0});
      }
      std::vector<YaraHit> rest;
      if (!opts_.yara->ScanHits(blanked, "pickle", &rest, base)) return;  // keep all: not shown
      rescans.emplace_back(sev, std::move(rest));
    }
    std::vector<YaraHit> kept;
    for (size_t h = 0; h < hits->size(); ++h) {
      YaraHit& hit = (*hits)[h];
      bool elsewhere = true;
      for (const auto& [sev, rest] : rescans) {
        if (sev != hit.finding.severity) continue;
        elsewhere = std::any_of(rest.begin(), rest.end(), [&](const YaraHit& r) {
          return r.finding.id == hit.finding.id;
        });
      }
      if (folds_into[h].empty() || elsewhere) {
        kept.push_back(std::move(hit));
        continue;
      }
      for (size_t k : folds_into[h]) {
        auto& by = out_.findings[k].corroborated_by;
        if (std::find(by.begin(), by.end(), hit.finding.id) == by.end()) by.push_back(hit.finding.id);
      }
    }
    *hits = std::move(kept);
  }

  // Pickle analyzes `bytes`, which start `base` bytes into the file or
  // member that `at` names.
  void Pickle(std::span<const uint8_t> bytes, const Place& at, uint64_t base = 0) {
    KeepPickle(AnalyzePickle(bytes, PickleOpts(), base), bytes, base, at);
  }

  void KeepPickle(const PickleAnalysis& a, std::span<const uint8_t> bytes, uint64_t base,
                  const Place& at) {
    YaraPickle(a, bytes, base, at, Keep(a, at));
  }

  // PickleOpts: torch.jit.load's own unpickler reads TorchScript members:
  // its helpers are data constructors there, and only there.
  PickleOptions PickleOpts() const {
    PickleOptions o = opts_.pickle;
    o.torchscript = torchscript_;
    return o;
  }

  // BrokenBeforeEnd: the first stream of `a` (over `n` bytes) fails for a
  // reason other than running out of bytes, and nothing reached STOP: the
  // loader raises there, so the bytes after the prefix are never read.
  static bool BrokenBeforeEnd(const PickleAnalysis& a, uint64_t n) {
    if (a.streams.empty() || a.incomplete) return false;
    for (const auto& st : a.streams) {
      if (st.complete) return false;
    }
    const PickleStream& first = a.streams.front();
    return first.depth == 0 && first.error_offset < n &&
           first.error.find("truncated") == std::string::npos &&
           first.error.find("ran out of input") == std::string::npos;
  }

  void Flush(std::vector<Finding>& f, const Place& at) {
    for (auto& x : f) out_.findings.push_back(Placed(std::move(x), at));
    f.clear();
  }

  bool IoError(const core::Error& e) {
    out_.io_error = true;
    out_.findings.push_back(FindingFromError(e));
    return false;
  }

  // Keep records `a`'s findings; returns the range of out_.findings they
  // took.
  std::pair<size_t, size_t> Keep(const PickleAnalysis& a, const Place& at) {
    const size_t first = out_.findings.size();
    for (auto& f : PickleFindings(a)) {
      // One "pickle format" finding per file, however many streams it holds.
      if (f.id == "MG-PK-PICKLE-FORMAT" && pickle_format_reported_) continue;
      if (f.id == "MG-PK-PICKLE-FORMAT") pickle_format_reported_ = true;
      out_.findings.push_back(Placed(std::move(f), at));
    }
    for (const auto& imp : a.imports) out_.imports.push_back(FileScan::Import{at.member, imp});
    // What the machine could not finish was not judged: fail closed.
    if (a.incomplete) out_.unparseable = true;
    return {first, out_.findings.size()};
  }

  // Npy analyzes a .npy file or member: header, then either the pickle body
  // of an object array or the exact size of a plain one.
  void Npy(std::span<const uint8_t> bytes, const Place& at) {
    std::vector<Finding> f;
    NpyLimits limits;
    auto h = ParseNpyHeader(bytes, 0, limits, &f);
    for (auto& x : f) out_.findings.push_back(Placed(std::move(x), at));
    if (!h) {
      if (at.member.empty()) out_.unparseable = true;
      return;
    }
    Yara(bytes.first(static_cast<size_t>(h->data_offset)), "header", at);
    if (h->has_object) {
      Pickle(bytes.subspan(static_cast<size_t>(h->data_offset)), at, h->data_offset);
      return;
    }
    if (YaraAll()) Yara(bytes.subspan(static_cast<size_t>(h->data_offset)), "data", at, h->data_offset);
    if (!h->body_bytes) return;
    const uint64_t have = bytes.size() - h->data_offset;
    if (have < *h->body_bytes) {
      out_.findings.push_back(Placed(
          MakeFinding("MG-NPY-TRUNCATED", Severity::kHigh,
                      "array body needs " + std::to_string(*h->body_bytes) + " bytes, " +
                          std::to_string(have) + " present",
                      bytes.size()),
          at));
      if (at.member.empty()) out_.unparseable = true;
    } else if (have > *h->body_bytes) {
      out_.findings.push_back(Placed(
          MakeFinding("MG-NPY-TRAILING-DATA", Severity::kHigh,
                      std::to_string(have - *h->body_bytes) +
                          " bytes after the array body (np.load ignores them; another format "
                          "can hide there)",
                      h->data_offset + *h->body_bytes),
          at));
    }
  }

  // Zip judges a zip archive whose bytes are `bytes` (read through `src`,
  // the same bytes) as PyTorch's reader finds its members. Each member is
  // sniffed from its first kSniffBytes64K; a deflated member is decoded
  // whole only when what it is calls for it, and records that alias one
  // member's data are judged once.
  void Zip(const Source& src, std::span<const uint8_t> bytes, const Place& at, uint64_t depth) {
    std::vector<Finding> f;
    auto zr = ReadZip(src, ZipLimitsFrom(opts_.containers), budget_, &f);
    if (!zr.ok()) {
      out_.io_error = true;
      out_.findings.push_back(FindingFromError(zr.error()));
      return;
    }
    const ZipArchive& zip = zr.value();
    Flush(f, at);
    if (!zip.directory_ok) {
      if (at.member.empty()) out_.unparseable = true;
      return;
    }
    auto is_code = [](const std::string& name) {
      return name.rfind("code/", 0) == 0 || name.find("/code/") != std::string::npos;
    };
    // A TorchScript archive is known by its code/ members wherever they
    // sit in the directory; its pickles are read by torch.jit's unpickler.
    const bool outer_torchscript = torchscript_;
    torchscript_ = std::any_of(zip.entries.begin(), zip.entries.end(),
                               [&](const ZipEntry& e) { return e.usable && is_code(e.name); });
    struct Restore {
      bool& flag;
      bool value;
      ~Restore() { flag = value; }
    } restore{torchscript_, outer_torchscript};
    bool torchscript = false;
    for (const auto& e : zip.entries) {
      if (!e.usable || e.alias_of >= 0) continue;  // an alias: its bytes were judged
      const std::string member = at.member.empty() ? e.name : at.member + "!" + e.name;
      if (!torchscript && is_code(e.name)) {
        torchscript = true;
        out_.findings.push_back(MakeFinding(
            "MG-ZIP-TORCHSCRIPT", Severity::kHigh,
            "TorchScript archive: code in " + core::Quoted(e.name) +
                " runs when the model is loaded with torch.jit.load; needs review",
            at.absolute && at.member.empty() ? e.central_offset : core::kNoOffset, member));
      }
      if (!ZipMember(src, bytes, e, at, member, depth)) return;
    }
  }

  // ZipMember judges one member; false on an I/O error (already recorded).
  bool ZipMember(const Source& src, std::span<const uint8_t> archive, const ZipEntry& e,
                 const Place& at, const std::string& member, uint64_t depth) {
    std::vector<Finding> f;
    std::span<const uint8_t> bytes;
    bool whole = false;
    std::vector<uint8_t> prefix;
    std::unique_ptr<Source> spool_holder;
    if (e.method == 0) {
      // Stored: a slice of the archive's own mapping, nothing copied.
      if (e.data_offset > archive.size() || e.compressed_bytes > archive.size() - e.data_offset) {
        return true;  // out of bounds: the reader reported it
      }
      if (auto c = budget_.ChargeMember(e.data_offset); !c.ok()) {
        out_.findings.push_back(Placed(c.TakeFinding(), at));
        return true;
      }
      bytes = archive.subspan(static_cast<size_t>(e.data_offset), static_cast<size_t>(e.compressed_bytes));
      whole = true;
    } else {
      // Content declared past max_member_bytes is past the budget, whatever
      // its first bytes decide: rejected with the budget's finding.
      if (e.uncompressed_bytes > budget_.limits().max_member_bytes) {
        if (auto c = budget_.MemberLimit(e.uncompressed_bytes, e.local_offset); !c.ok()) {
          out_.findings.push_back(Placed(c.TakeFinding(), Place{member, 0, false}));
        }
      }
      auto p = ReadZipMemberPrefix(src, e, budget_, kSniffBytes64K, &f);
      Flush(f, at);
      if (!p.ok()) return IoError(p.error());
      if (!p.value()) return true;
      prefix = std::move(p.value()->bytes);
      whole = p.value()->whole;
      bytes = prefix;
    }
    const auto head = bytes.first(std::min<size_t>(bytes.size(), 16));
    const bool is_pickle = (head.size() >= 2 && head[0] == 0x80 && head[1] <= 5) ||
                           EndsWith(e.name, ".pkl") || EndsWith(e.name, ".pickle");
    const bool is_npy = head.size() >= kNpyMagic.size() &&
                        std::memcmp(head.data(), kNpyMagic.data(), kNpyMagic.size()) == 0;
    const bool is_zip = head.size() >= 4 && head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4;
    const bool storage = IsTensorStorage(e.name);
    // TorchScript's code/*.py members are that archive's code, reported as
    // MG-ZIP-TORCHSCRIPT (and scanned by the rules as members), not as a
    // repository's modules.
    const bool ts_code = torchscript_ && (e.name.rfind("code/", 0) == 0 ||
                                          e.name.find("/code/") != std::string::npos);
    const bool text = !is_pickle && !is_npy && !is_zip && !ts_code && IsTextMember(e.name);
    // A GGUF or HDF5 member (a .keras zip's model.weights.h5, a zipped
    // repository's model.gguf) is read by its reader.
    const bool is_gguf = head.size() >= 4 && std::memcmp(head.data(), "GGUF", 4) == 0;
    const bool is_hdf5 = head.size() >= 8 && std::memcmp(head.data(), "\x89HDF\r\n\x1a\n", 8) == 0;
    const bool loaded = is_pickle || is_npy || is_zip || text || is_gguf || is_hdf5;
    if (!loaded && (!opts_.yara || (storage && !YaraAll()))) return true;
    Place inner{member, at.absolute && at.member.empty() && e.method == 0 ? e.data_offset : 0,
                at.absolute && at.member.empty() && e.method == 0};
    std::optional<PickleAnalysis> prefix_analysis;
    if (is_pickle && !whole) {
      // The first 64 KiB may already decide it: a stream that breaks there
      // for a reason other than running out of bytes ends the load there.
      prefix_analysis = AnalyzePickle(bytes, PickleOpts(), 0);
      if (!BrokenBeforeEnd(*prefix_analysis, bytes.size())) prefix_analysis.reset();
    }
    const bool need_whole = !whole && !prefix_analysis &&
                            (loaded || e.uncompressed_bytes <= kYaraMemberBytes);
    if (need_whole) {
      auto ms = OpenZipMemberSource(src, e, budget_, &f);
      Flush(f, at);
      if (!ms.ok()) return IoError(ms.error());
      if (!ms.value().source) return true;
      auto* spool = dynamic_cast<const Spool*>(ms.value().source.get());
      if (spool == nullptr) return true;
      auto mapped = spool->Bytes();
      if (!mapped.ok()) return IoError(mapped.error());
      bytes = mapped.value();
      whole = true;
      spool_holder = std::move(ms.value().source);
    }
    if (prefix_analysis) {
      KeepPickle(*prefix_analysis, bytes, 0, inner);
    } else if (is_pickle) {
      Pickle(bytes, inner);
    } else if (is_npy) {
      Npy(bytes, inner);
    } else if (text) {
      JudgeTextMember(*this, bytes, BaseName(e.name), inner, out_);
    } else if (is_gguf) {
      JudgeGguf(*this, bytes, inner, out_);
    } else if (is_hdf5) {
      JudgeHdf5(*this, bytes, inner, out_);
    } else if (is_zip) {
      if (depth + 1 >= opts_.containers.max_nesting_depth) {
        out_.findings.push_back(MakeFinding(
            "MG-ZIP-LIMIT", Severity::kHigh,
            "archive nested deeper than " + std::to_string(opts_.containers.max_nesting_depth) +
                " levels (limit max_nesting_depth); not analyzed",
            core::kNoOffset, member));
      } else {
        MemorySource nested(bytes);
        Zip(nested, bytes, Place{member, 0, false}, depth + 1);
      }
    } else {
      // Neither pickle, npy nor archive: rules run over it as "member";
      // tensor storages only for scope all, as "data".
      NotAnalyzedMember(e.name, inner);
      YaraMember(bytes, e.uncompressed_bytes, storage ? "data" : "member", inner);
    }
    return true;
  }

  // NotAnalyzedMember: an ONNX model inside an archive (ONNX has no magic:
  // only its name says so) is not read by the ONNX reader here, so it is
  // not judged: fail closed (MG-FMT-NOT-ANALYZED, high).
  void NotAnalyzedMember(std::string_view name, const Place& at) {
    if (!EndsWith(name, ".onnx")) return;
    out_.findings.push_back(Placed(MakeFinding(
        "MG-FMT-NOT-ANALYZED", Severity::kHigh,
        "an ONNX model inside an archive is not analyzed by this version; unpack it and scan "
        "the model file itself"), at));
  }

  // A second format in the same bytes: zip readers look for the end record
  // from the end of the file, so any file can also be a zip.
  void ZipPolyglot(const Source& src) {
    std::vector<Finding> f;
    auto zr = ReadZip(src, ZipLimits{}, &f);
    if (!zr.ok() || !zr.value().directory_ok || zr.value().entries.empty()) return;
    out_.findings.push_back(MakeFinding(
        "MG-POLY-ZIP", Severity::kCritical,
        "the file is also a zip archive with " + std::to_string(zr.value().entries.size()) +
            " member(s): a zip reader sees other content than " +
            WithArticle(FormatName(out_.format)) + " reader",
        zr.value().eocd_offset));
  }

  // Decompressed analyzes what a compressed stream expands to: decoded into
  // a sealed spool (page cache, not the heap) within the file's Budget.
  void Decompressed(std::span<const uint8_t> in, Codec codec, const Place& at, uint64_t depth) {
    MemorySource src(in);
    std::vector<Finding> f;
    DecoderOptions options;
    options.finding_base = at.member.empty() ? 0 : core::kNoOffset;
    auto spool = DecompressToSpool(src, 0, in.size(), codec, budget_, &f, options);
    Flush(f, at);
    if (!spool.ok()) {
      IoError(spool.error());
      return;
    }
    if (!spool.value()) {
      if (at.member.empty()) out_.unparseable = true;
      return;
    }
    auto bytes = spool.value()->Bytes();
    if (!bytes.ok()) {
      IoError(bytes.error());
      return;
    }
    // What was decoded before any failure still reaches a streaming loader.
    const std::string inner = (at.member.empty() ? "" : at.member + "!") + "<" +
                              std::string(CodecName(codec)) + ">";
    Contents(bytes.value(), Place{inner, 0, false}, depth + 1);
  }

  // Tar analyzes a tar archive (`bytes`, read through `src`) as Python's
  // tarfile lists it; torch's legacy tar is walked member by member as
  // legacy_load reads it. Members are slices of `bytes`.
  void Tar(const Source& src, std::span<const uint8_t> bytes, const Place& at, uint64_t depth) {
    std::vector<Finding> f;
    auto tr = ReadTar(src, TarLimits{}, &f);
    if (!tr.ok()) {
      IoError(tr.error());
      return;
    }
    const TarArchive& tar = tr.value();
    Flush(f, at);
    // A listing a limit or an unmodelled construct stopped was not judged.
    if (tar.incomplete) out_.unparseable = true;
    if (tar.loader_fails) {
      // tarfile raises, so torch.load falls back to unpickling the file
      // from offset 0: analyze exactly that (for the file itself, the
      // pickle view does, claimed by this fallback).
      // tarfile may raise only once legacy_load has unpickled some members
      // (a member's data cut short after a complete listing): what it
      // listed of torch's members is judged too.
      if (at.member.empty()) {
        torch_pickle_fallback_ = true;
      } else {
        Pickle(bytes, at);
      }
      if (!LooksLikeTorchTar(tar)) return;
    }
    if (LooksLikeTorchTar(tar)) {
      if (at.member.empty() && !tar.loader_fails) out_.format = Format::kPytorchTar;
      TorchTarMembers m = FindTorchTarMembers(tar, &f);
      Flush(f, at);
      for (const TarMember* member : {m.storages, m.tensors, m.pickle}) {
        if (member == nullptr) continue;
        std::span<const uint8_t> data;
        if (!TarSpan(bytes, *member, at, &data)) continue;
        TorchTarLayout layout = SplitTorchTarMember(member->name, data, member->data_offset, &f);
        Flush(f, at);
        const std::string name = (at.member.empty() ? "" : at.member + "!") + member->name;
        const Place inner{name, member->data_offset, at.absolute && at.member.empty()};
        for (const auto& p : layout.pickles) {
          Pickle(data.subspan(static_cast<size_t>(p.begin), static_cast<size_t>(p.end - p.begin)),
                 inner, p.begin);
        }
      }
      return;
    }
    for (const auto& member : tar.members) {
      if (!member.HasData() || !member.data_in_bounds || member.size == 0) continue;
      std::span<const uint8_t> data;
      if (!TarSpan(bytes, member, at, &data)) continue;
      const std::string name = (at.member.empty() ? "" : at.member + "!") + member.name;
      const Place inner{name, member.data_offset, at.absolute && at.member.empty()};
      if (IsTextMember(member.name) && DetectFormat(data.first(std::min<size_t>(data.size(), kSniffBytes)),
                                                    data.size(), "") == Format::kUnknown) {
        JudgeTextMember(*this, data, BaseName(member.name), inner, out_);  // a repository's configs
      } else {
        Contents(data, inner, depth + 1);
      }
    }
  }

  // Contents analyzes bytes found inside a container by their own format.
  void Contents(std::span<const uint8_t> bytes, const Place& at, uint64_t depth) {
    if (depth >= opts_.containers.max_nesting_depth) {
      out_.findings.push_back(Placed(MakeFinding(
          "MG-ARCHIVE-LIMIT", Severity::kHigh,
          "containers nested deeper than " + std::to_string(opts_.containers.max_nesting_depth) +
              " (limit max_nesting_depth); not analyzed"), at));
      return;
    }
    const Format f = DetectFormat(bytes.first(std::min<size_t>(bytes.size(), kSniffBytes)),
                                  bytes.size(), "");
    MemorySource src(bytes);
    switch (f) {
      case Format::kPickle: Pickle(bytes, at); break;
      case Format::kNumpy: Npy(bytes, at); break;
      case Format::kZip: case Format::kPytorchZip: case Format::kNumpyZip:
        Zip(src, bytes, at, depth);
        break;
      case Format::kTar: Tar(src, bytes, at, depth); break;
      case Format::kGzip: Decompressed(bytes, Codec::kGzip, at, depth); break;
      case Format::kZlib: Decompressed(bytes, Codec::kZlib, at, depth); break;
      case Format::kBzip2: Decompressed(bytes, Codec::kBzip2, at, depth); break;
      case Format::kXz: Decompressed(bytes, Codec::kXz, at, depth); break;
      case Format::kLzma: Decompressed(bytes, Codec::kLzma, at, depth); break;
      case Format::kZstd: Decompressed(bytes, Codec::kZstd, at, depth); break;
      case Format::kLz4: Decompressed(bytes, Codec::kLz4, at, depth); break;
      case Format::kJoblibZf: Decompressed(bytes, Codec::kJoblibZf, at, depth); break;
      case Format::kSevenZip: SevenZip(*this, bytes, at, depth, out_); break;
      case Format::kGguf: JudgeGguf(*this, bytes, at, out_); break;
      case Format::kHdf5: JudgeHdf5(*this, bytes, at, out_); break;
      default: {
        // Bytes pickle.load would run are judged as a pickle, their streams
        // scanned by the rules as "pickle"; the whole member is also scanned
        // as "member" (rules of that scope only), and a rule both scans saw
        // at the same first match inside the streams is one cause: the
        // member scan's finding goes.
        NotAnalyzedMember(at.member, at);
        const size_t first = out_.findings.size();
        uint64_t pickled = 0;
        if (!MaybePickle(bytes, at, false, nullptr, &pickled)) pickled = 0;
        std::vector<std::string> seen;  // YARA ids the pickle scan reported or folded
        for (size_t k = first; k < out_.findings.size(); ++k) {
          const Finding& kept = out_.findings[k];
          if (kept.id.rfind("MG-YARA-", 0) == 0) seen.push_back(kept.id);
          seen.insert(seen.end(), kept.corroborated_by.begin(), kept.corroborated_by.end());
        }
        const size_t member_first = out_.findings.size();
        if (!at.member.empty()) YaraMember(bytes, bytes.size(), "member", at);
        else Yara(bytes, "member", at);
        auto same = [&](const Finding& y) {
          const uint64_t off = at.member.empty() ? y.offset : y.member_offset;
          return off != core::kNoOffset && off < pickled &&
                 std::find(seen.begin(), seen.end(), y.id) != seen.end();
        };
        out_.findings.erase(std::remove_if(out_.findings.begin() + static_cast<long>(member_first),
                                           out_.findings.end(), same),
                            out_.findings.end());
        break;
      }
    }
  }

  // MaybePickle runs the pickle machine on bytes no loader's name claims as
  // a pickle (protocol 0 and 1 pickles have no magic). They are a pickle
  // view (findings kept) only when pickle.load would really run them:
  // PicklesLoad. With `claimed` (the file's name says a pickle loader reads
  // it) the findings are kept whatever the stream does.
  // When it does not keep the findings, the analysis is left in `*unkept`
  // (if given), so a later claim can keep it without a second analysis.
  // When it keeps them, `*pickled_end` (if given) is where the last
  // top-level stream ends.
  bool MaybePickle(std::span<const uint8_t> bytes, const Place& at, bool claimed = false,
                   std::optional<PickleAnalysis>* unkept = nullptr, uint64_t* pickled_end = nullptr) {
    PickleAnalysis a = AnalyzePickle(bytes, opts_.pickle, 0);
    // The file itself: torch.load reads a legacy file's raw storages after
    // its pickles (a member or decoded stream is never read that way).
    if (at.member.empty()) ExplainTorchLegacyStorages(bytes, 0, &a);
    return MaybePickleAnalyzed(std::move(a), bytes, at, claimed, unkept, pickled_end);
  }

  // FilePickle is the analysis MaybePickle(file, Place{}) makes of the file
  // itself, made ahead of time (JudgeLoaderViews: before a safetensors
  // header's pages are dropped, so they are not read back in beside the
  // tensor table); MaybePickleAnalyzed then judges it in MaybePickle's place.
  PickleAnalysis FilePickle(std::span<const uint8_t> bytes) const {
    PickleAnalysis a = AnalyzePickle(bytes, opts_.pickle, 0);
    ExplainTorchLegacyStorages(bytes, 0, &a);
    return a;
  }
  bool MaybePickleAnalyzed(PickleAnalysis a, std::span<const uint8_t> bytes, const Place& at,
                           bool claimed = false, std::optional<PickleAnalysis>* unkept = nullptr,
                           uint64_t* pickled_end = nullptr) {
    if (!claimed && !PicklesLoad(a)) {
      if (unkept != nullptr) *unkept = std::move(a);
      return false;
    }
    KeepPickle(a, bytes, 0, at);
    if (pickled_end != nullptr) {
      *pickled_end = 0;
      for (const auto& st : a.streams) {
        if (st.depth == 0) *pickled_end = std::max(*pickled_end, std::min<uint64_t>(st.end, bytes.size()));
      }
    }
    return true;
  }

  // PicklesLoad: the analysis shows a stream that pickle.load would act on:
  // one that reaches STOP, or one that calls something or imports a
  // code-execution global before it breaks (the call has run by then).
  // Imports of names that merely fail to resolve, as text read as opcodes
  // yields ("certifi==1.0" read as GLOBAL), are not a pickle.
  static bool PicklesLoad(const PickleAnalysis& a) {
    for (const auto& st : a.streams) {
      if (st.depth == 0 && st.complete && st.opcode_count > 1) return true;
    }
    // A persistent id is not a call for pickle.load: without a
    // persistent_load it raises there (zip bytes read as opcodes start
    // with PERSID).
    for (const auto& c : a.calls) {
      if (c.opcode != "PERSID" && c.opcode != "BINPERSID") return true;
    }
    return std::any_of(a.imports.begin(), a.imports.end(),
                       [](const PickleImport& i) { return i.safety == GlobalClass::kCritical; });
  }

  // torch_pickle_fallback: the top-level tar view made tarfile raise, so
  // torch.load unpickles the file from offset 0 (the pickle view).
  bool torch_pickle_fallback() const { return torch_pickle_fallback_; }

 private:
  // TarSpan is a member's data as a slice of the archive's bytes (nothing
  // copied), counted by the Budget; false (with a finding) when it cannot be
  // judged.
  bool TarSpan(std::span<const uint8_t> archive, const TarMember& m, const Place& at,
               std::span<const uint8_t>* out) {
    if (m.size > opts_.containers.max_member_bytes) {
      out_.findings.push_back(Placed(MakeFinding(
          "MG-TAR-LIMIT", Severity::kHigh,
          "member " + core::Quoted(m.name) + " of " + std::to_string(m.size) +
              " bytes exceeds max_member_bytes; not analyzed", m.data_offset), at));
      return false;
    }
    if (!m.data_in_bounds || m.data_offset > archive.size() || m.size > archive.size() - m.data_offset) {
      return false;  // reported by ReadTar
    }
    if (auto c = budget_.ChargeMember(m.data_offset); !c.ok()) {
      out_.findings.push_back(Placed(c.TakeFinding(), at));
      return false;
    }
    *out = archive.subspan(static_cast<size_t>(m.data_offset), static_cast<size_t>(m.size));
    return true;
  }

  const ScanOptions& opts_;
  FileScan& out_;
  Budget budget_;
  bool pickle_format_reported_ = false;
  bool torch_pickle_fallback_ = false;
  bool torchscript_ = false;  // inside a TorchScript archive's members
};

}  // namespace modelgate::scanner::internal
