// LoadSigningKey and the failure printing sign and convert share.
#include "signing_key.h"

#include <iostream>

#include "cli.h"
#include "exit_code.h"
#include "secrets.h"

namespace modelgate::cli {

int Failure(const std::string& path, const core::Error& e) {
  std::cerr << "modelgate: " << DisplayPath(path);
  if (e.offset != core::kNoOffset) std::cerr << ":" << e.offset;
  std::cerr << ": " << core::FindingId(e.code) << ": " << e.message << "\n";
  const auto code = static_cast<uint16_t>(e.code);
  return code >= 100 && code < 200 ? kExitRejected : kExitCannotJudge;
}

std::string KeyDisplay(const std::string& key) {
  if (signer::IsPkcs11Uri(key)) return key.substr(0, key.find('?'));
  return key;
}

std::optional<signer::PrivateKey> LoadSigningKey(const CommonOptions& opts, const std::string& command, int* code) {
  if (signer::IsPkcs11Uri(opts.key)) {
    if (!opts.passphrase_file.empty()) {
      *code = Usage(command, "--passphrase-file is for key files; a pkcs11: key takes --pin-file");
      return std::nullopt;
    }
    auto pin = SecretFrom(opts.pin_file, kPinEnv, "PIN");
    if (!pin.ok()) {
      *code = Failure(opts.pin_file.empty() ? kPinEnv : opts.pin_file, pin.error());
      return std::nullopt;
    }
    signer::Pkcs11Options po;
    po.module_path = opts.pkcs11_module;
    if (pin.value()) po.pin = pin.value()->bytes();
    auto key = signer::OpenPkcs11Key(opts.key, po);
    if (!key.ok()) {
      *code = Failure(KeyDisplay(opts.key), key.error());
      return std::nullopt;
    }
    return std::move(key).value();
  }
  if (!opts.pin_file.empty() || !opts.pkcs11_module.empty()) {
    *code = Usage(command, std::string(opts.pin_file.empty() ? "--pkcs11-module" : "--pin-file") +
                              " needs a pkcs11: --key");
    return std::nullopt;
  }
  auto pass = SecretFrom(opts.passphrase_file, kPassphraseEnv, "passphrase");
  if (!pass.ok()) {
    *code = Failure(opts.passphrase_file.empty() ? kPassphraseEnv : opts.passphrase_file, pass.error());
    return std::nullopt;
  }
  signer::KeyReadOptions ro;
  if (pass.value()) ro.passphrase = pass.value()->bytes();
  auto key = signer::LoadPrivateKey(opts.key, ro);
  if (!key.ok()) {
    *code = Failure(opts.key, key.error());
    return std::nullopt;
  }
  return std::move(key).value();
}


}  // namespace modelgate::cli
