// Keras model configs: the JSON a Keras loader turns into objects. A .keras
// file (Keras 3) is a zip of config.json, metadata.json and
// model.weights.h5; a legacy .h5 model (Keras 2 / tf.keras) keeps the same
// JSON in its root group's "model_config" attribute. Deserializing a config
// imports every "module" it names and runs every Lambda layer's function
// (marshalled Python bytecode: CVE-2024-3660), so the config is judged, not
// the weights.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/scanner.h"

namespace modelgate::scanner::internal {

// Keras configs of large functional models are a few MB; the DOM costs ~10x.
inline constexpr uint64_t kKerasMaxConfigBytes = 64ull << 20;
// Nested functional models nest ~6 JSON levels each; 128 is far above any
// real config and keeps the DOM walk's recursion small.
inline constexpr size_t kKerasMaxJsonDepth = 128;

struct KerasLimits {
  uint64_t max_config_bytes = kKerasMaxConfigBytes;
  size_t max_json_depth = kKerasMaxJsonDepth;
};

// AnalyzeKerasConfig judges a Keras model config (`json`, which starts
// `base` bytes into its file, or kNoOffset when it is not a byte range of the
// file, e.g. a decompressed zip member): Lambda layers and "__lambda__"
// functions -> MG-KERAS-LAMBDA (critical); objects whose "module" is outside
// keras / tf_keras, or whose "registered_name" is a custom registration ->
// MG-KERAS-CUSTOM-OBJECT (high); TFOpLambda calls of file, raw or Python
// callback TF ops -> MG-KERAS-TFOP (high); text that is not strict JSON
// (syntax, duplicate keys, depth, size) or not an object ->
// MG-KERAS-MALFORMED (high). `where` names the config in messages
// ("config.json", "the model_config attribute"). Findings carry `base` as
// their offset; messages name the JSON path.
void AnalyzeKerasConfig(std::string_view json, uint64_t base, std::string_view where,
                        std::vector<Finding>* findings, const KerasLimits& limits = {});

// An HDF5 file image is copied by nothing (see keras.cc); the bound is on
// the address range libhdf5 is asked to parse.
inline constexpr uint64_t kH5MaxImageBytes = 64ull << 30;

// kH5TimeoutSeconds bounds one libhdf5 reading (it runs in a child
// process, killed past this): a real model's root attributes are read in
// milliseconds.
inline constexpr int kH5TimeoutSeconds = 5;

// kH5ChildMemoryBytes bounds the address space the libhdf5 child may add
// to what it inherits (RLIMIT_AS): the attribute (kKerasMaxConfigBytes) is
// held about three times over, plus libhdf5's metadata cache.
inline constexpr uint64_t kH5ChildMemoryBytes = 1ull << 30;

struct H5Limits {
  uint64_t max_image_bytes = kH5MaxImageBytes;
  // model_config longer than this is not read (the JSON limit applies next).
  uint64_t max_attribute_bytes = kKerasMaxConfigBytes;
};

// H5KerasAttributes are the root attributes a Keras .h5 model carries
// besides its config (empty when absent or not strings).
struct H5KerasAttributes {
  std::string keras_version;
  std::string backend;
};

// ReadH5ModelConfig reads the root group's "model_config" attribute (a
// fixed or variable length string) of the HDF5 file held in `file`, through
// libhdf5's core driver on the bytes in memory: no path is opened, nothing
// is written, filter plugins are never loaded. libhdf5 runs in a forked
// child confined by ConfineH5Child before it sees the bytes; a child that
// is killed (a forbidden system call, a crash, the deadline) or gives no
// answer is a file not judged. nullopt plus MG-KERAS-H5 (high) when libhdf5
// cannot read the file or the attribute is not one string; "" when there
// is no model_config (a weights-only file). `attributes`, when given,
// receives "keras_version" and "backend".
std::optional<std::string> ReadH5ModelConfig(std::span<const uint8_t> file,
                                             std::vector<Finding>* findings,
                                             H5KerasAttributes* attributes = nullptr,
                                             const H5Limits& limits = {});

// ConfineH5Child confines the calling process (the forked libhdf5 child;
// irreversible) so that it can only compute and write its answer:
// descriptors other than `answer_fd` closed (stdin, stdout, stderr too);
// RLIMIT_CPU kH5TimeoutSeconds + 1 s, RLIMIT_NOFILE, RLIMIT_FSIZE,
// RLIMIT_CORE and RLIMIT_NPROC 0, RLIMIT_AS the inherited address space
// plus `memory_bytes` (not in ASan builds, whose shadow reservation is
// terabytes); PR_SET_NO_NEW_PRIVS and not dumpable; then a seccomp-bpf
// allowlist: write to `answer_fd` only, brk, mmap and mprotect without
// PROT_EXEC, munmap, mremap, madvise, futex, clock_gettime, getpid, gettid,
// rt_sigreturn, exit, exit_group (ASan builds: sigaltstack too, which
// ASan's _exit calls). open and openat fail with ENOENT without
// reaching the kernel (libhdf5's core driver checks that the image's name is
// no file); any other system call kills the process (SIGSYS). False with
// `why` when a step fails: the caller must then not read the file.
bool ConfineH5Child(int answer_fd, std::string* why, uint64_t memory_bytes = kH5ChildMemoryBytes);

// kHdf5Magic is the HDF5 superblock signature.
inline constexpr std::string_view kHdf5Magic{"\x89HDF\r\n\x1a\n", 8};

// LooksLikeHdf5: the superblock signature is at 0 or at 512, 1024, 2048, ...
// (after a user block: the HDF5 spec's search order) within `head`.
bool LooksLikeHdf5(std::span<const uint8_t> head);

}  // namespace modelgate::scanner::internal
