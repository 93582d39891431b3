// convert: a PyTorch checkpoint to safetensors without unpickling it
// (convert/include/modelgate/convert.h does the work).
#include <iostream>
#include <string>

#include "cli.h"
#include "exit_code.h"
#include "modelgate/convert.h"
#include "modelgate/signer.h"
#include "options.h"

namespace modelgate::cli {
namespace {

void PrintFinding(const std::string& path, const scanner::Finding& f) {
  std::cerr << "modelgate: " << DisplayPath(path);
  if (!f.member.empty()) std::cerr << "!" << core::Quoted(f.member, 200);
  if (f.offset != core::kNoOffset) std::cerr << ":" << f.offset;
  std::cerr << ": " << f.id << " (" << core::SeverityName(f.severity) << "): " << f.message << "\n";
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
    auto k = signer::LoadPrivateKey(opts.key);
    if (!k.ok()) {
      std::cerr << "modelgate: " << DisplayPath(opts.key) << ": " << core::FindingId(k.error().code) << ": "
                << k.error().message << "\n";
      return kExitCannotJudge;
    }
    if (k.value().alg() != signer::KeyAlg::kEd25519) {
      return Usage("convert", "--key: embedded STSIG v1 signatures are Ed25519");
    }
    key.emplace(std::move(k).value());
    co.key = &*key;
  }
  auto in = core::OpenRegularFile(path, /*follow_symlink=*/false);
  if (!in.ok()) {
    std::cerr << "modelgate: " << DisplayPath(path) << ": " << core::FindingId(in.error().code) << ": "
              << in.error().message << "\n";
    return kExitCannotJudge;
  }
  convert::ConvertReport r = convert::Convert(in.value(), path, opts.out_path, co);
  if (!r.converted) {
    for (const scanner::Finding& f : r.blocking) PrintFinding(path, f);
    std::cerr << "modelgate: " << DisplayPath(path) << ": not converted; nothing was written to "
              << DisplayPath(opts.out_path) << "\n";
    return r.io_error ? kExitCannotJudge : kExitRejected;
  }
  if (!opts.quiet) {
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
  return kExitPass;
}

}  // namespace modelgate::cli
