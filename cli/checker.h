// What `check` loads once from a policy, and the judgement of a run under
// it without writing a report: the command runs it once, the server once
// per request on its spooled upload.
#pragma once

#include <string>
#include <vector>

#include "cli.h"
#include "modelgate/policy.h"
#include "modelgate/scanner.h"
#include "modelgate/signer.h"

namespace modelgate::cli {

// Checker is a loaded policy, the scanner options it sets (its YARA rules
// compiled) and its trusted keys. Read-only once loaded: one Checker serves
// concurrent CheckReport calls.
struct Checker {
  std::string policy_path;
  policy::Policy policy;
  scanner::ScanOptions scan_options;
  std::vector<signer::PublicKey> keys;
};

// LoadChecker reads the policy at `policy_path` and compiles what it asks
// for. The message of an Error starts "policy: ".
core::Result<Checker> LoadChecker(const std::string& policy_path);

// CheckReport judges opts.paths under `checker` (detached bundles found as
// `check` finds them, model and set checks after the walk) and returns the
// report, not yet summarized or written (EmitReport does both). An Error
// when a named bundle cannot be read.
core::Result<Report> CheckReport(const CommonOptions& opts, const Checker& checker);

// CheckTargets judges `targets` (their operand indexes 0) under `checker`
// with no detached bundle: nothing beside a target's bytes is looked for,
// and opts.paths is not read, so a target whose path is only a name
// (Target::open_fd) makes the gate open nothing by that name.
Report CheckTargets(const CommonOptions& opts, const Checker& checker,
                    const std::vector<Target>& targets);

}  // namespace modelgate::cli
