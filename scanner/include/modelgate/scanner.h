// modelgate scanner: format detection and static analysis of model files:
// the core safetensors rules, the pickle machine, containers (zip, npy/npz)
// and polyglot checks (docs/loader-models.md). Nothing here executes or
// imports what it reads.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/core.h"
#include "modelgate/shard_index.h"

namespace modelgate::scanner {

// Format is what a file's content (not its name) says it is.
enum class Format : uint8_t {
  kUnknown, kSafetensors, kPickle, kPytorchZip, kPytorchTar, kNumpy, kNumpyZip,
  kJoblib, kZip, kTar, kGzip, kBzip2, kXz, kSevenZip, kGguf, kOnnx, kZlib, kLzma,
  kLfsPointer,  // a git-lfs pointer file checked out instead of the weights
  kZstd, kLz4,   // single-stream wrappers (joblib compress='zstd'/'lz4')
  kJoblibZf,     // joblib < 0.10's "ZF" container (zlib, hex length)
  kKeras,        // a .keras zip (Keras 3: config.json, model.weights.h5)
  kHdf5,         // HDF5 (Keras .h5 models: the model_config attribute)
  kJson,         // a JSON config (config.json, tokenizer_config.json, ...)
  kJinja,        // a Jinja2 template (chat_template.jinja)
  kPython,       // Python source (.py): code a loader may import
};
// kLastFormat is the highest Format (for loops over every format).
inline constexpr Format kLastFormat = Format::kPython;
// FormatName is the report spelling ("safetensors", "pytorch-zip", ...).
std::string_view FormatName(Format f);

// WithArticle is `word` after the indefinite article English reads it with
// ("an unknown", "a pickle", "an xz", "an 'int'", "a 7z"): a message that
// puts a word known only at run time after "a" uses it. Leading quotes are
// skipped; letter-spelled names (no vowel: "npz", "lfs-pointer") take the
// article of their first letter's name.
std::string WithArticle(std::string_view word);

// kSniffBytes is how much of a file's start DetectFormat looks at.
inline constexpr size_t kSniffBytes = 512;

// DetectFormat names the format of a file from its first bytes (`head`, up
// to kSniffBytes) and its size. `name` (the file name) only breaks a tie:
// content that matches nothing else in a file named *.safetensors is parsed
// as safetensors so that its defect is reported.
Format DetectFormat(std::span<const uint8_t> head, uint64_t file_size, std::string_view name);

// Finding is one reported problem or fact about a file.
// Waiver is why a finding no longer counts: a policy exception for this
// exact file applied to it (policy::Evaluate sets it; the reports show the
// finding as waived, SARIF as a suppressed result).
struct Waiver {
  std::string reason;
  std::string expires;                              // "YYYY-MM-DD", inclusive
  core::Severity severity = core::Severity::kInfo;  // the finding's severity before
};

struct Finding {
  std::string id;  // MG-<AREA>-<NAME>
  core::Severity severity = core::Severity::kInfo;
  std::string message;
  // Absolute byte offset in the file, where one exists.
  uint64_t offset = core::kNoOffset;
  // Path inside an archive ("a.zip!inner.npy" style chains joined by '!'),
  // "" for the file itself.
  std::string member;
  // Byte offset inside the member's (decompressed) bytes, where one exists.
  uint64_t member_offset = core::kNoOffset;
  // For pickle findings: the opcode and the resolved global, "" otherwise.
  std::string opcode;
  std::string global;
  // Ids of the YARA findings folded into this one because they saw the same
  // cause (every match of the rule inside the bytes of this finding's
  // imports, the rule no more severe: judge.h YaraPickle); each is then not
  // reported on its own.
  std::vector<std::string> corroborated_by;
  // 1-based line and column of `offset` in a text-like file (a config, a
  // template, a git-lfs pointer), the column in UTF-16 code units (SARIF's
  // default); 0 for none: binary files, archive members, no offset, or an
  // offset past text_region.h's kMaxTextRegionOffsetBytes.
  uint32_t line = 0;
  uint32_t column = 0;
  // Set when a policy exception waived the finding (it is then info).
  std::optional<Waiver> waived;
};

// MakeFinding builds a finding for the file itself or for an archive member.
inline Finding MakeFinding(std::string id, core::Severity severity, std::string message,
                           uint64_t offset = core::kNoOffset, std::string member = "") {
  Finding f;
  f.id = std::move(id);
  f.severity = severity;
  f.message = std::move(message);
  f.offset = offset;
  f.member = std::move(member);
  return f;
}

// FindingFromError turns a core error into a finding with its default
// severity.
Finding FindingFromError(const core::Error& e);

// CheckShardSet is the MG-SET-* findings of a shard index against the
// parsed headers of its shards (`shards`: shard name relative to the index's
// directory -> header, null or absent when the file is missing or did not
// parse): core::ShardSetErrors, each finding naming the tensor and shards.
std::vector<Finding> CheckShardSet(const core::ShardIndex& index, const core::ShardHeaders& shards);

}  // namespace modelgate::scanner

// --- pickle analysis ---
// Static analysis of pickle streams (protocols 0-5): a symbolic copy of
// CPython's C unpickler (Modules/_pickle.c) that runs no code. It resolves
// every global the stream would import, every call it would make and every
// point where the stream breaks, and classifies each global against an
// allowlist of what plain weight files need. Owned by the pickle machine
// (scanner/src/pickle*.cc).
namespace modelgate::scanner {

// PickleLimits bound the work and memory of one analysis. Each has tests at
// N and N+1; hitting one is reported as MG-PK-LIMIT (high) naming it and
// makes the analysis `incomplete` (the file was not fully judged: the scan
// rejects it whatever failOn says). A limit never discards a finding more
// severe than those kept: past the opcode, stack and memo limits the rest of
// the input is still walked opcode by opcode for imports, and past
// max_records only safe records and repeats are folded away.
struct PickleLimits {
  // Opcodes executed per stream (a torch state dict needs ~30 per tensor).
  uint64_t max_opcodes = 100'000'000;
  // Objects plus marks on the unpickler stack (CPython writes batches of
  // 1000, so real pickles stay in the thousands).
  uint64_t max_stack_depth = 1'000'000;
  // Distinct memo indices (torch memoizes ~10 objects per tensor, so this
  // is ~100k tensors in one pickle; ~150 bytes each when full).
  uint64_t max_memo_entries = 1'000'000;
  // Bytes of decoded text (STRING/UNICODE escapes) kept per stream. Literal
  // strings and bytes are referenced in place and do not count.
  uint64_t max_string_bytes = 64ull << 20;
  // Nested pickles (torch.storage._load_from_bytes) scanned inside pickles.
  uint64_t max_nesting = 4;
  // Pickle streams per input (torch's legacy format has five).
  uint64_t max_streams = 64;
  // Imports, calls and anomalies recorded per input. Past it, safe imports,
  // allowed calls and low anomalies are only counted (records_folded) and a
  // repeat of a kept high or critical record adds to its count.
  uint64_t max_records = 100'000;
  // Distinct high or critical records kept past max_records (each a
  // different global, call or anomaly). Past it they are dropped
  // (records_dropped) unless more severe than every record kept.
  uint64_t max_flagged_records = 10'000;
  // Bytes of one imported module or qualname: no importable name is this
  // long, and each import record keeps a copy.
  uint64_t max_name_bytes = 512;
  // Object references one stream's graph may hold (PickleOptions::
  // capture_graph only: `modelgate convert`; a torch state dict needs ~20
  // per tensor). Past it the stream's graph is dropped (graph_cut); the
  // analysis itself is unaffected.
  uint64_t max_graph_refs = 20'000'000;
};

// GlobalClass is what an imported global is allowed to be.
enum class GlobalClass : uint8_t {
  kSafe,      // on the allowlist of plain tensor/array rebuilding globals
  kUnknown,   // anything else: "unknown import; needs review"
  kCritical,  // a known code-execution / system-access global
};
std::string_view GlobalClassName(GlobalClass c);  // "safe" | "unknown" | "critical"

// ClassifyGlobal classifies `module`.`qualname` exactly as the analyzer does
// (after any Python 2 name mapping). `reason`, if given, says why.
GlobalClass ClassifyGlobal(std::string_view module, std::string_view qualname,
                           std::string* reason = nullptr);

// PickleImport is one global the stream imports (find_class / EXT lookup).
struct PickleImport {
  std::string module;           // as imported (after the Python 2 mapping)
  std::string qualname;         // may be dotted (protocol 4 walks it)
  std::string written_module;   // as written in the stream, before mapping
  std::string written_qualname;
  uint64_t offset = 0;          // absolute offset of the importing opcode
  std::string opcode;           // GLOBAL, STACK_GLOBAL, INST, EXT1/2/4
  std::string resolved_by;      // how the name was found, e.g. "memo 3 + memo 4"
  GlobalClass safety = GlobalClass::kUnknown;
  std::string reason;           // why critical/unknown; "" when safe
  bool py2_mapped = false;      // _compat_pickle mapping changed the name
  bool ext_code = false;        // EXT1/2/4: copyreg extension registry code
  bool name_truncated = false;  // name longer than max_string_bytes allowed
  bool nesting = false;         // an allowed loader whose argument is scanned
  uint32_t stream = 0;          // index into PickleAnalysis::streams
  // Imports of this name folded into this record past max_records.
  uint64_t count = 1;
  // [span_begin, span_end): the bytes of the input that name this import,
  // absolute like `offset`: GLOBAL and INST with their two lines; for
  // STACK_GLOBAL, the pushes of its module and name strings (even when a
  // memo get brought them here), when the module's comes first and only
  // memo puts lie between them. Empty (span_end == 0) otherwise, and where
  // not known (EXT codes, the salvage walk, nested pickles decoded from
  // escapes). YARA matches inside it are the same cause as this import.
  uint64_t span_begin = 0;
  uint64_t span_end = 0;
  std::string FullName() const { return module + "." + qualname; }
};

// PickleCall is one point where loading runs code chosen by the stream.
struct PickleCall {
  std::string opcode;       // REDUCE, NEWOBJ, NEWOBJ_EX, OBJ, INST, BUILD,
                            // APPEND(S), SETITEM(S), ADDITEMS, PERSID, BINPERSID
  std::string callee;       // "module.qualname", or "<result of module.qualname>",
                            // "<persistent object>", ... (untrusted: Quote it)
  int64_t import_index = -1;  // the import the callee comes from, or -1
  uint64_t offset = 0;
  bool allowed = false;     // the callee is allowlisted for this operation
  // True when the call is reported on its own (MG-PK-CALL-NOT-ALLOWED);
  // false when the import finding of the callee already covers it.
  bool flagged = false;
  std::string reason;
  uint32_t stream = 0;
  // Allowed calls are folded per (opcode, callee, stream): how many times
  // this one ran. Calls that are not allowed are recorded one by one.
  uint64_t count = 1;
};

enum class PickleAnomalyKind : uint8_t {
  kMalformed,     // MG-PK-MALFORMED: load fails here (or would raise)
  kDisagreement,  // MG-PK-DISAGREEMENT: pickle and pickletools/pickle.py differ
  kLimit,         // MG-PK-LIMIT
  kPy2Mapping,    // MG-PK-PY2-MAPPING
  kNested,        // MG-PK-NESTED-PICKLE
  kTrailingData,  // MG-PK-TRAILING-DATA: bytes after the last pickle
};

struct PickleAnomaly {
  PickleAnomalyKind kind = PickleAnomalyKind::kMalformed;
  core::Severity severity = core::Severity::kHigh;
  uint64_t offset = core::kNoOffset;
  std::string opcode;   // the opcode at `offset`, "" if none
  std::string message;  // untrusted parts already Quoted
  uint32_t stream = 0;
  // kLimit: the limit's name ("max_opcodes", "max_records", ...).
  std::string limit;
  uint64_t count = 1;  // repeats folded into this record past max_records
};

// PickleStream is one pickle (PROTO...STOP) in the input.
struct PickleStream {
  uint64_t offset = 0;        // absolute offset of its first opcode
  uint64_t end = 0;           // offset just past STOP, or of the failing opcode
  int protocol = 0;           // protocol in force at the end (0 if no PROTO)
  int declared_protocol = -1; // first PROTO's argument, -1 if none
  int max_opcode_protocol = 0;  // highest protocol among the opcodes used
  bool complete = false;      // reached STOP
  uint64_t error_offset = core::kNoOffset;
  std::string error;          // why it stopped early ("" when complete)
  uint64_t opcode_count = 0;
  uint32_t depth = 0;         // 0 for the input, 1+ for nested pickles
  uint64_t parent_offset = core::kNoOffset;  // nested: offset of the loader call
};

// PickleArray is one array that joblib's NumpyUnpickler reads from the file
// right after the BUILD of a joblib.numpy_pickle.NumpyArrayWrapper (joblib
// >= 0.10: NumpyArrayWrapper.read_array): raw bytes that are not opcodes,
// skipped exactly as joblib reads them, or, for an object dtype, a nested
// pickle that is analyzed as its own stream. Facts, not findings.
struct PickleArray {
  uint64_t build_offset = 0;   // the BUILD that makes joblib read it
  uint64_t offset = 0;         // its first byte (the padding-length byte if aligned)
  uint64_t padding_bytes = 0;  // 1 + padding length when the wrapper is aligned, else 0
  uint64_t data_bytes = 0;     // count * itemsize; object arrays: the nested pickle's length
  bool object_pickle = false;  // dtype.hasobject: the data is pickle stream `nested_stream`
  uint32_t nested_stream = 0;
  uint32_t stream = 0;         // the stream whose BUILD read it
};

// PickleTorchStorage is one persistent id of torch's legacy format,
// ('storage', <name>Storage, key, location, numel, view_metadata), as
// _legacy_load's persistent_load reads it: storage `key` holds elements of
// `storage_type` (the global's qualname, "FloatStorage"; torch's
// find_class maps any name holding "Storage" by that name alone). Facts,
// not findings: they say how long the raw storages after the pickles are.
struct PickleTorchStorage {
  std::string key;
  std::string storage_type;
  uint64_t offset = 0;  // the BINPERSID
  uint32_t stream = 0;
};

// PickleJoblibArray is the array joblib's NumpyArrayWrapper.read returns
// in a graph (capture_graph, joblib's reading): the facts of its wrapper's
// state and where read_array found its bytes. Facts, not a verdict: a
// converter still decides which of them it accepts.
struct PickleJoblibArray {
  uint64_t offset = 0;        // the array's first data byte (past any padding)
  uint64_t bytes = 0;         // count * itemsize (object arrays: the nested pickle)
  std::string typestr;        // numpy.dtype's first argument ("f4", "i8")
  char byteorder = 0;         // the dtype's BUILD state byte order; 0 when not stated
  std::vector<uint64_t> shape;
  std::string order;          // the wrapper's 'order' ("C", "F"), "" when not a str
  std::string subclass;       // "module.qualname" of its 'subclass' global, "" when not one
  bool object = false;        // dtype.hasobject: the data is a pickle
};

// PickleNode is one object of a pickle's object graph, as the machine
// built it symbolically (nothing was called): literals, containers with
// every item, the globals find_class returned, and call results that keep
// their callee and arguments and what later opcodes did to them (APPENDS,
// SETITEMS, BUILD). Items are indices into PickleGraph::nodes; a graph may
// have cycles (a list that holds itself).
inline constexpr uint32_t kNoNode = UINT32_MAX;
struct PickleNode {
  enum class Kind : uint8_t {
    kNone, kBool, kInt, kFloat, kStr, kBytes, kTuple, kList, kDict, kSet, kFrozenSet,
    kGlobal, kCall, kPersistent, kOther,
  };
  Kind kind = Kind::kOther;
  bool int_fits = true;     // kInt: false past 64 bits (int_value is then 0)
  int64_t int_value = 0;    // kInt, kBool
  bool truncated = false;   // kStr: cut by max_string_bytes (never a name)
  std::string text;         // kStr: the text; kGlobal: the module
  std::string qualname;     // kGlobal
  uint32_t callee = kNoNode;  // kCall
  uint32_t args = kNoNode;    // kCall: the argument tuple; kPersistent: the pid
  std::vector<uint32_t> items;  // tuple/list/set items; APPENDs on a call result
  std::vector<std::pair<uint32_t, uint32_t>> entries;  // dict items; SETITEMs on a call result
  std::vector<uint32_t> states;  // BUILD states applied, in order
  uint64_t offset = core::kNoOffset;  // the opcode that made it
  // kCall: the array a joblib NumpyArrayWrapper's BUILD read (its offset
  // is that BUILD's); null otherwise.
  std::shared_ptr<const PickleJoblibArray> joblib_array;
};

// PickleGraph is the object one top-level stream returns at STOP.
struct PickleGraph {
  uint32_t stream = 0;  // index into PickleAnalysis::streams
  uint32_t root = kNoNode;
  std::vector<PickleNode> nodes;
};

struct PickleAnalysis {
  // capture_graph: one graph per top-level stream that reached STOP with
  // its graph whole, in stream order. Empty when graph_cut says why.
  std::vector<PickleGraph> graphs;
  std::string graph_cut;
  std::vector<PickleStream> streams;
  std::vector<PickleImport> imports;
  std::vector<PickleCall> calls;
  std::vector<PickleAnomaly> anomalies;
  // joblib arrays, in file order; they count towards max_records.
  std::vector<PickleArray> arrays;
  // torch legacy storage ids of top-level streams, in stream order; at most
  // max_records (past it torch_storages_cut is set and none are added).
  std::vector<PickleTorchStorage> torch_storages;
  bool torch_storages_cut = false;
  bool limit_hit = false;         // some MG-PK-LIMIT anomaly was recorded
  // incomplete: the analysis did not judge everything a loader would run
  // (a limit stopped or cut it, records were folded away past max_records,
  // or a nested archive was not opened). The scan must reject the file
  // whatever failOn says; `incomplete_reason` names the first cause.
  bool incomplete = false;
  std::string incomplete_reason;
  uint64_t records_folded = 0;   // safe records and repeats only counted past max_records
  uint64_t records_dropped = 0;  // distinct flagged records past max_flagged_records
};

struct PickleOptions {
  PickleLimits limits;
  // Extra exact (module, qualname) pairs treated as safe (a policy's
  // extraAllowedGlobals). A critical global stays critical.
  std::vector<std::pair<std::string, std::string>> extra_safe_globals;
  // torchscript: the stream is a member of a TorchScript archive (a zip
  // with a code/ directory: data.pkl, constants.pkl, *.debug_pkl), read by
  // torch.jit.load's own unpickler, whose helpers (torch.jit._pickle.*) are
  // data constructors there. Elsewhere they stay critical.
  bool torchscript = false;
  // capture_graph: also build PickleAnalysis::graphs (for `modelgate
  // convert`, which rebuilds tensors from them); within max_graph_refs.
  bool capture_graph = false;
};

// AnalyzePickle runs the pickle machine over `bytes`, which start at
// absolute file offset `base_offset`: the first pickle at 0, then every
// further pickle that follows a STOP. Never throws, never executes.
// joblib: a BUILD of the allowlisted joblib.numpy_pickle.NumpyArrayWrapper
// in a top-level stream is followed, as joblib.load follows it, by the
// array's bytes (PickleAnalysis::arrays); where the state does not give
// their length exactly, the stream stops there (MG-PK-MALFORMED). Because
// every other unpickler reads those bytes as opcodes, such input is also
// analyzed without the joblib reading, and whatever that view imports or
// calls beyond the first array is added (with an MG-PK-DISAGREEMENT).
PickleAnalysis AnalyzePickle(std::span<const uint8_t> bytes, const PickleOptions& options = {},
                             uint64_t base_offset = 0);

// PickleFindings turns an analysis into findings with stable MG-PK-* ids:
// MG-PK-PICKLE-FORMAT (medium, exactly one per analyzed input),
// MG-PK-CRITICAL-IMPORT, MG-PK-EXT-CODE, MG-PK-CALL-NOT-ALLOWED (critical),
// MG-PK-UNKNOWN-IMPORT, MG-PK-MALFORMED, MG-PK-DISAGREEMENT, MG-PK-LIMIT
// (high, naming the limit; always present when the analysis is
// incomplete), MG-PK-NESTED-PICKLE (info..critical), MG-PK-TRAILING-DATA
// (low), MG-PK-PY2-MAPPING (info). Repeats of one global are folded into one
// finding at its first offset.
std::vector<Finding> PickleFindings(const PickleAnalysis& analysis);

// PickleOpcodeName is pickletools' name for opcode byte `op` ("" if none).
std::string_view PickleOpcodeName(uint8_t op);

}  // namespace modelgate::scanner
// --- end pickle analysis ---

// --- scanning files ---
namespace modelgate::scanner {

// ContainerLimits bound what the scanner unpacks; each has tests at N and
// N+1. Hitting one is a high finding (the file was not fully judged).
struct ContainerLimits {
  uint64_t max_zip_entries = 1'000'000;
  uint64_t max_central_dir_bytes = 256ull << 20;
  // One member (or decompressed stream) held in memory for analysis.
  uint64_t max_member_bytes = 1ull << 30;
  // Archives / compressed streams inside each other.
  uint64_t max_nesting_depth = 4;
  // Decompressed output / compressed input, per stream.
  uint64_t max_expansion_ratio = 1000;
  // All bytes decompressed for one file, across members and layers.
  uint64_t max_total_decompressed_bytes = 4ull << 30;
};

// YaraRules is a compiled YARA rule set (scanner/src/yara_rules.h; libyara
// stays private to the scanner).
class YaraRules;

// YaraScope is what YARA rules run over (policy yara.scope, --yara-scope).
enum class YaraScope : uint8_t {
  kHeader,  // headers, metadata, pickle streams, non-tensor members (default)
  kAll,     // also tensor data and every other byte (~100 MB/s)
};

struct ScanOptions {
  core::Limits limits;
  ContainerLimits containers;
  PickleOptions pickle;
  // Compiled once per run (CompileYaraRules) and shared by every ScanFile
  // call; null runs no YARA rules.
  std::shared_ptr<const YaraRules> yara;
  YaraScope yara_scope = YaraScope::kHeader;
};

// CompileYaraRules compiles the shipped rules (when `with_default`) and
// every rule directory in `dirs` (--yara-rules, policy yara.rules) into one
// set. Errors: kIoOpen (a path cannot be opened), kIoRead (a compile error
// "<file>:<line>: ...", a file over its cap, or no rules found).
core::Result<std::shared_ptr<const YaraRules>> CompileYaraRules(
    const std::vector<std::string>& dirs, bool with_default = true);
// YaraVersion is the libyara version the scanner was built with ("4.2.3",
// from yara.h: libyara reports none at run time), for `modelgate --version`.
std::string YaraVersion();

// View is one reading of a file by one loader: what that loader would
// deserialize, and as which format. The scanner asks every loader model
// and judges every view a loader would accept.
struct View {
  std::string loader;  // "torch.load", "numpy.load", "safetensors", "pickle.load", ...
  std::string member;  // "" for the whole file
  uint64_t offset = 0; // where the view's bytes start in the file
  Format format = Format::kUnknown;
};

// FormatFamily groups formats that are one reading of the bytes (the zip
// family, the tar family, pickles, compressed wrappers; every other format
// alone): two views of different families are two loaders seeing
// different files, a polyglot (MG-POLY-LOADERS).
int FormatFamily(Format f);

// FileScan is everything the scanner learned about one file.
struct FileScan {
  std::string path;
  Format format = Format::kUnknown;
  uint64_t size = 0;
  // The gate could not read the file (the verdict is "error", not a judgment
  // on its content).
  bool io_error = false;
  // Rejected whatever the severity bar: the file claims a format whose
  // parser rejected it (a file that cannot be parsed is never passed), or a
  // view could not be completed (a limit ended it: what was not read was
  // not judged).
  bool unparseable = false;
  std::vector<Finding> findings;
  // Every loader view judged (in model order); more than one family of
  // formats among them is an MG-POLY-LOADERS finding.
  std::vector<View> views;
  // The parsed model when the file is safetensors and passed the core rules.
  std::optional<core::Safetensors> safetensors;
  // Every global a pickle in the file imports, with the archive member it is
  // in ("" for the file itself): what `inspect` shows a registry user.
  struct Import {
    std::string member;
    PickleImport pickle;
  };
  std::vector<Import> imports;
};

// ScanFile opens `path` read-only (without following a final symlink unless
// `follow_symlink`), detects its format and analyzes it. Never throws.
FileScan ScanFile(const std::string& path, bool follow_symlink, const ScanOptions& options);

// ScanOpened judges the file already open as `file` (its fd, size and
// identity from OpenRegularFile); `path` names it in findings and decides
// which loaders its extension claims. It reads only through `file.fd`
// (pread), never reopens `path`, and never maps the file: a file that
// shrinks during the scan is an MG-IO-CHANGED error, not a crash. This is
// what one verdict per descriptor builds on (scan, signature and file
// digest all read the same fd).
FileScan ScanOpened(const core::OpenedFile& file, const std::string& path,
                    const ScanOptions& options);

}  // namespace modelgate::scanner

// --- PyTorch zip checkpoints, read for conversion ---
namespace modelgate::scanner {

// TorchRecord is one storage record `<prefix>/data/<key>` of a PyTorch zip
// checkpoint: stored (uncompressed), so its bytes are [offset, offset +
// bytes) of the file.
struct TorchRecord {
  std::string key;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// TorchZipCheckpoint is what torch.load reads from a zip checkpoint
// (torch.save since 1.6): the object graph of `<prefix>/data.pkl` (the
// archive's first name up to '/' is the prefix, as PyTorchStreamReader
// takes it) and where each storage record lies. Facts for rebuilding
// tensors, not a verdict: the caller scans the file first.
struct TorchZipCheckpoint {
  std::string prefix;
  uint64_t pickle_offset = 0;  // file offset of data.pkl's first byte
  PickleGraph graph;
  std::vector<TorchRecord> records;  // sorted by key
  bool big_endian = false;           // `<prefix>/byteorder` says "big"
};

// ReadTorchZipCheckpoint reads `file` as a PyTorch zip checkpoint of plain
// data (no TorchScript code/). Errors: kConvUnsupported (not such a zip, a
// TorchScript archive, data.pkl unreadable or not one whole pickle, a
// compressed or encrypted storage record), kConvLimit (max_graph_refs or a
// container limit of `options`), kConvStorage (a record named twice, two
// records sharing or overlapping bytes), kIoRead/kIoChanged (I/O).
core::Result<TorchZipCheckpoint> ReadTorchZipCheckpoint(const core::OpenedFile& file,
                                                        const ScanOptions& options);

// --- numpy and joblib files, read for conversion ---

// NumpyArrayRecord is one .npy array: the whole file, or one member of an
// .npz archive. Its body is [data_offset, data_offset + data_bytes) of the
// file when stored; of the member's inflated bytes when `deflated` (then
// the member's packed bytes are [packed_offset, packed_offset +
// packed_bytes) of the file, member_bytes long inflated, with CRC-32
// member_crc32).
struct NumpyArrayRecord {
  std::string name;              // "arr_0" for a .npy file; an npz member's key
  uint64_t header_offset = 0;    // of the .npy magic (the member's data offset)
  std::string descr;             // as the header writes it; "<structured>" for a list
  bool fortran_order = false;
  std::vector<uint64_t> shape;
  bool object = false;           // the body is a pickle
  uint64_t data_offset = 0;
  uint64_t data_bytes = 0;       // shape x itemsize, checked against what is there
  bool deflated = false;
  uint64_t packed_offset = 0, packed_bytes = 0, member_bytes = 0;
  uint32_t member_crc32 = 0;
};

// NumpyFile is what numpy.load reads: one array (.npy) or the members of
// an .npz archive in central-directory order. `other_members` are npz
// members that are not .npy arrays (NpzFile returns their raw bytes):
// (name, central directory offset).
struct NumpyFile {
  bool npz = false;
  std::vector<NumpyArrayRecord> arrays;
  std::vector<std::pair<std::string, uint64_t>> other_members;
};

// ReadNumpyFile reads `file` as numpy.load would (.npy magic or a zip).
// Errors: kConvUnsupported (not .npy or zip, a header that does not parse,
// an encrypted or otherwise unreadable member), kConvName (two members
// with one key), kConvStorage (a body that is not exactly shape x itemsize
// bytes, or runs past its member or the file), kConvLimit (a container
// limit), kIoRead/kIoChanged.
core::Result<NumpyFile> ReadNumpyFile(const core::OpenedFile& file, const ScanOptions& options);

// JoblibCheckpoint is the object joblib.load returns from a joblib file:
// one pickle whose NumpyArrayWrapper arrays are graph nodes with
// PickleNode::joblib_array set. For a compressed file (joblib.dump(...,
// compress=...): zlib, gzip, bz2, xz, lzma, zstd, lz4) the pickle is the
// decoded stream, held in a sealed memfd: the arrays' offsets index
// `decoded_fd` (kept open by `decoded`), not the file; -1 when the file
// is not compressed.
struct JoblibCheckpoint {
  PickleGraph graph;
  int decoded_fd = -1;
  uint64_t decoded_size = 0;
  std::shared_ptr<const void> decoded;
};

// ReadJoblibCheckpoint reads `file` as joblib.load would (joblib's reading
// only: the scan judged the other readings), decoding a compressed file
// first under the container budget of `options`. Errors: kConvUnsupported
// (not one whole pickle ending at the end of the (decoded) file, a decoded
// stream with any finding, or its graph could not be kept), kConvLimit
// (max_graph_refs, a container limit), kIoRead/kIoChanged.
core::Result<JoblibCheckpoint> ReadJoblibCheckpoint(const core::OpenedFile& file,
                                                    const ScanOptions& options);

}  // namespace modelgate::scanner

// --- PyTorch legacy checkpoints, read for conversion ---
namespace modelgate::scanner {

// TorchLegacyStorage is one storage torch's legacy loader fills from the
// file (_set_from_file / _new_with_file): an int64 LE element count at
// `count_offset`, then `numel` elements of torch.<storage_type> at
// [offset, offset + bytes). torch 1.13 reads them as little-endian whatever
// the file's sys_info says (it ignores sys_info).
struct TorchLegacyStorage {
  std::string key;           // legacy file: the root key; tar: decimal
  std::string storage_type;  // "FloatStorage", ...
  uint64_t numel = 0;        // the element count the file gives
  uint64_t count_offset = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;        // numel * element size
};

// TorchTarTensor is one record of a tar checkpoint's "tensors" member:
// (key, storage_id, tensor_type) then ndim, sizes, strides, storage offset.
struct TorchTarTensor {
  std::string key;          // decimal, as the "pickle" member's ids name it
  std::string storage_key;  // decimal
  std::vector<uint64_t> sizes;
  std::vector<uint64_t> strides;
  uint64_t storage_offset = 0;  // in elements
  uint64_t offset = 0;          // file offset of its record
};

// TorchLegacyCheckpoint is what torch.load's legacy loader reads: the
// object pickle's graph and every storage (and, for a tar, every tensor
// record). Facts for rebuilding tensors, not a verdict: scan first.
struct TorchLegacyCheckpoint {
  bool tar = false;
  uint64_t pickle_offset = 0;  // file offset of the object pickle
  PickleGraph graph;
  std::vector<TorchLegacyStorage> storages;  // file order
  std::vector<TorchTarTensor> tensors;       // tar only, member order
};

// ReadTorchLegacyCheckpoint reads `file` (its whole bytes) as torch.load
// reads a legacy, non-tar checkpoint (torch.save(...,
// _use_new_zipfile_serialization=False)): the magic number, protocol
// version 1001 and sys_info pickles, the object pickle, the storage key
// list, then each listed storage's count and bytes in list order. Storage
// ids must be ('storage', torch.<T>Storage, key, location, numel, None):
// a storage view (view_metadata not None) is kConvUnsupported. Errors:
// kConvUnsupported (not that layout), kConvStorage (a key listed twice,
// listed but named by no id, named with two types or counts, a count or
// storage past the file), kConvLimit (more than `max_records` storages,
// max_graph_refs).
core::Result<TorchLegacyCheckpoint> ReadTorchLegacyCheckpoint(std::span<const uint8_t> file,
                                                              const ScanOptions& options,
                                                              uint64_t max_records);

// ReadTorchTarCheckpoint reads `file` as torch.load's legacy_load reads a
// tar (torch < 0.4): the "storages", "tensors" and "pickle" members as
// Python's tarfile resolves them, each a regular member whose data lies
// in the file (links, sparse and other members are kConvUnsupported);
// storage views (a non-empty storage_views list) are kConvUnsupported.
// Keys are non-negative ints; a key used twice, a tensor naming no
// storage, members whose data overlap, a count or storage past its
// member are kConvStorage; more than `max_records` storages or tensors
// kConvLimit.
core::Result<TorchLegacyCheckpoint> ReadTorchTarCheckpoint(std::span<const uint8_t> file,
                                                           const ScanOptions& options,
                                                           uint64_t max_records);

}  // namespace modelgate::scanner
