// convert: a PyTorch checkpoint to safetensors without unpickling it
// (convert/include/modelgate/convert.h does the work).
#include <iostream>
#include <string>

#include "cli.h"
#include "exit_code.h"
#include "modelgate/convert.h"
#include "modelgate/signer.h"
#include "json_stream.h"
#include "options.h"
#include "signing_key.h"

namespace modelgate::cli {
namespace {

void PrintFinding(const std::string& path, const scanner::Finding& f) {
  std::cerr << "modelgate: " << DisplayPath(path);
  if (!f.member.empty()) std::cerr << "!" << core::Quoted(f.member, 200);
  if (f.offset != core::kNoOffset) std::cerr << ":" << f.offset;
  std::cerr << ": " << f.id << " (" << core::SeverityName(f.severity) << "): " << f.message << "\n";
}

// RenderConvertJson is `convert -f json`'s report (docs/convert.md): the
// input, the output, every tensor written, and the findings.
void RenderConvertJson(const std::string& in, const std::string& out, const convert::ConvertReport& r,
                       JsonStream& j) {
  j.BeginObject();
  j.Member("schema", "modelgate.convert/v1");
  j.Key("tool");
  j.BeginObject();
  j.Member("name", "modelgate");
  j.Member("version", core::kVersion);
  j.EndObject();
  j.Member("result", r.converted ? "converted" : r.io_error ? "error" : "refused");
  j.Key("input");
  j.BeginObject();
  j.Name("path", in);
  j.Member("format", scanner::FormatName(r.format));
  if (!r.source_sha256.empty()) j.Member("sha256", r.source_sha256);
  j.EndObject();
  j.Key("output");
  j.BeginObject();
  j.Name("path", out);
  j.Key("written");
  j.Bool(r.converted);
  if (r.converted) {
    j.Member("size", r.file_size);
    j.Member("header_bytes", r.header_bytes);
    uint64_t bytes = 0;
    for (const auto& t : r.tensors) bytes += t.bytes;
    j.Member("data_bytes", bytes);
    if (r.signed_output) j.Member("key_id", core::HexLower(r.kid));
  }
  j.EndObject();
  j.Key("blocking");
  j.BeginArray();
  for (const auto& f : r.blocking) j.Json(FindingJson(f));
  j.EndArray();
  j.Key("findings");
  j.BeginArray();
  for (const auto& f : r.scan_findings) j.Json(FindingJson(f));
  j.EndArray();
  j.Key("tensors");
  j.BeginArray();
  for (const auto& t : r.converted ? r.tensors : std::vector<convert::ConvertedTensor>{}) {
    j.BeginObject();
    j.Name("name", t.name);
    j.Member("dtype", core::DtypeName(t.dtype));
    j.Key("shape");
    j.BeginArray();
    for (uint64_t d : t.shape) j.Number(d);
    j.EndArray();
    j.Member("bytes", t.bytes);
    j.Name("storage", t.storage);
    j.Key("contiguous");
    j.Bool(t.contiguous);
    j.EndObject();
  }
  j.EndArray();
  j.Key("shared");
  j.BeginArray();
  for (const auto& group : r.converted ? r.shared : std::vector<std::vector<std::string>>{}) {
    j.BeginArray();
    for (const auto& n : group) j.String(core::EscapeInvalidUtf8(n));
    j.EndArray();
  }
  j.EndArray();
  j.Key("metadata");
  j.BeginArray();
  for (const auto& [k, v] : r.converted ? r.string_leaves : std::vector<std::pair<std::string, std::string>>{}) {
    j.BeginObject();
    j.Name("name", k);
    j.Member("value", core::EscapeInvalidUtf8(v));
    j.EndObject();
  }
  j.EndArray();
  j.Key("dropped");
  j.BeginArray();
  for (const auto& d : r.converted ? r.dropped : std::vector<std::string>{}) j.String(d);
  j.EndArray();
  j.EndObject();
}

}  // namespace

int RunConvert(const CommonOptions& opts) {
  if (opts.paths.size() != 1) return Usage("convert", "takes exactly one IN file");
  if (opts.out_path.empty()) return Usage("convert", "needs -o OUT.safetensors");
  if (opts.paths[0] == "-") return Usage("convert", "reads a file, not standard input");
  if ((!opts.model.empty() || opts.version) && opts.key.empty()) {
    return Usage("convert", "--model and --version are recorded in a signature: they need --key");
  }
  const std::string& path = opts.paths[0];
  convert::ConvertOptions co;
  co.fail_on = opts.fail_on;
  co.drop_non_tensors = opts.drop_non_tensors;
  co.model = opts.model;
  co.version = opts.version.value_or(0);
  if (!ConfigureYara(opts, &co.scan)) return kExitCannotJudge;
  std::optional<signer::PrivateKey> key;
  if (!opts.key.empty()) {
    int failed = kExitCannotJudge;
    key = LoadSigningKey(opts, "convert", &failed);
    if (!key) return failed;
    if (key->alg() != signer::KeyAlg::kEd25519) {
      return Usage("convert", "--key: embedded STSIG v1 signatures are Ed25519");
    }
    co.key = &*key;
  } else if (!opts.passphrase_file.empty() || !opts.pin_file.empty() || !opts.pkcs11_module.empty()) {
    return Usage("convert", "--passphrase-file, --pin-file and --pkcs11-module go with --key");
  }
  auto in = core::OpenRegularFile(path, /*follow_symlink=*/false);
  if (!in.ok()) {
    std::cerr << "modelgate: " << DisplayPath(path) << ": " << core::FindingId(in.error().code) << ": "
              << in.error().message << "\n";
    return kExitCannotJudge;
  }
  convert::ConvertReport r = convert::Convert(in.value(), path, opts.out_path, co);
  const int code = r.converted ? kExitPass : r.io_error ? kExitCannotJudge : kExitRejected;
  if (opts.format == "json") {
    JsonStream j(std::cout);
    RenderConvertJson(path, opts.out_path, r, j);
    if (!j.Finish()) {
      std::cerr << "modelgate: convert: standard output could not be written\n";
      return kExitCannotJudge;
    }
  }
  if (!r.converted) {
    for (const scanner::Finding& f : r.blocking) PrintFinding(path, f);
    std::cerr << "modelgate: " << DisplayPath(path) << ": not converted; nothing was written to "
              << DisplayPath(opts.out_path) << "\n";
    return code;
  }
  if (!opts.quiet && opts.format != "json") {
    uint64_t bytes = 0;
    for (const auto& t : r.tensors) bytes += t.bytes;
    std::cout << "converted " << DisplayPath(path) << " to " << DisplayPath(opts.out_path) << ": "
              << r.tensors.size() << " tensors, " << bytes << " bytes of data, " << r.file_size
              << " bytes in all\n";
    std::cout << "source sha256 " << r.source_sha256 << "\n";
    for (const auto& group : r.shared) {
      std::cout << "shared storage (each written with its own bytes):";
      for (const auto& n : group) std::cout << " " << core::Quoted(n, 200);
      std::cout << "\n";
    }
    for (const auto& [k, v] : r.string_leaves) {
      std::cout << "metadata " << core::Quoted(k, 200) << " = " << core::Quoted(v, 200) << "\n";
    }
    for (const auto& d : r.dropped) std::cout << "dropped " << d << "\n";
    if (r.signed_output) std::cout << "signed with key " << core::HexLower(r.kid) << "\n";
  }
  return code;
}

}  // namespace modelgate::cli
