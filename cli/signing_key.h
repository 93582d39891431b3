// The private key of sign and convert: a PEM file (encrypted or not) or a
// key on a PKCS#11 token, with its passphrase or PIN from a file or the
// environment (secrets.h), never argv.
#pragma once

#include <optional>
#include <string>

#include "modelgate/core.h"
#include "modelgate/signer.h"
#include "options.h"

namespace modelgate::cli {

// Failure prints `e` for `path` and returns the exit code: rejected (1)
// when the file itself broke a rule (codes 100-199), else 2 (the tool
// could not do its job).
int Failure(const std::string& path, const core::Error& e);

// KeyDisplay names the --key in messages: a pkcs11: URI without its query
// (where a pin-value would be), else the path.
std::string KeyDisplay(const std::string& key);

// LoadSigningKey opens opts.key: a pkcs11: URI on its token (PIN from
// --pin-file or MODELGATE_PKCS11_PIN), else a PEM file (passphrase from
// --passphrase-file or MODELGATE_KEY_PASSPHRASE when it is encrypted).
// Every passphrase and PIN is wiped when this returns. On failure it has
// said why on stderr (usage errors name `command`) and returns the exit
// code in `*code`.
std::optional<signer::PrivateKey> LoadSigningKey(const CommonOptions& opts, const std::string& command,
                                                 int* code);

}  // namespace modelgate::cli
