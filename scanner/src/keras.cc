#include "keras.h"

#include <fcntl.h>
#include <hdf5.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "modelgate/strict_json.h"

// ASan builds: no RLIMIT_AS (the shadow reservation is terabytes) and one
// more allowed call (below).
#if defined(__SANITIZE_ADDRESS__)
#define MG_H5_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MG_H5_ASAN 1
#endif
#endif

namespace modelgate::scanner::internal {
namespace {

using core::Severity;
using json = nlohmann::json;

// Findings of one id per config past which the rest are counted, not
// listed: a config of 10,000 custom layers says so in 100 findings.
constexpr uint64_t kMaxListedPerId = 100;

// KerasModule: the object comes from Keras itself. Keras 3 writes
// "keras", "keras.layers", "keras.src.ops.numpy", ...; tf_keras is the Keras
// 2 package under its own name. Any other module is imported by the loader
// (serialization_lib's _retrieve_class_or_fn: importlib.import_module).
bool KerasModule(std::string_view m) {
  for (std::string_view root : {std::string_view("keras"), std::string_view("tf_keras")}) {
    if (m == root) return true;
    if (m.size() > root.size() && m.substr(0, root.size()) == root && m[root.size()] == '.') {
      return true;
    }
  }
  return false;
}

// UnsafeTfOp: a TFOpLambda / SlicingOpLambda (tf.keras wrapping a TF API
// call made on Keras tensors) resolves `function` among TensorFlow's
// exported symbols by name: no bytecode, so plain math is fine, but the
// file, raw-op, Python-callback, library-loading and printing families act
// outside the tensors when the model runs.
bool UnsafeTfOp(std::string_view fn) {
  if (fn.substr(0, 3) == "tf.") fn.remove_prefix(3);
  static constexpr std::string_view kModules[] = {"io", "gfile", "raw_ops", "summary",
                                                  "saved_model", "debugging", "experimental"};
  static constexpr std::string_view kNames[] = {
      "py_func", "py_function", "numpy_function", "load_op_library", "load_library",
      "print", "write_file", "read_file", "eager_py_func", "script_ops"};
  size_t start = 0;
  while (start <= fn.size()) {
    size_t dot = fn.find('.', start);
    if (dot == std::string_view::npos) dot = fn.size();
    const std::string_view part = fn.substr(start, dot - start);
    const bool last = dot == fn.size();
    for (auto m : kModules) {
      if (!last && part == m) return true;
    }
    for (auto n : kNames) {
      if (part == n) return true;
    }
    start = dot + 1;
  }
  return false;
}

const std::string* StringMember(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return nullptr;
  return it->get_ptr<const std::string*>();
}

class KerasWalker {
 public:
  KerasWalker(uint64_t base, std::string_view where, std::vector<Finding>* findings)
      : base_(base), where_(where), findings_(findings) {}

  void Walk(const json& v, const std::string& path, bool in_lambda) {
    if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i) {
        Walk(v[i], path + "[" + std::to_string(i) + "]", in_lambda);
      }
      return;
    }
    if (!v.is_object()) return;
    const std::string* class_name = StringMember(v, "class_name");
    const std::string_view cls = class_name ? std::string_view(*class_name) : std::string_view();
    if (!in_lambda) in_lambda = JudgeLambda(v, cls, path);
    if (!in_lambda) JudgeCustom(v, cls, path);
    if (cls == "TFOpLambda" || cls == "SlicingOpLambda") JudgeTfOp(v, path);
    for (auto it = v.begin(); it != v.end(); ++it) {
      Walk(it.value(), path.empty() ? it.key() : path + "." + it.key(), in_lambda);
    }
  }

  void Summarize() {
    for (const auto& [id, count] : counts_) {
      if (count <= kMaxListedPerId) continue;
      findings_->push_back(MakeFinding(
          id, severities_[id],
          std::to_string(count - kMaxListedPerId) + " more " + id + " cases in " +
              std::string(where_) + " are not listed",
          base_));
    }
  }

 private:
  void Add(const std::string& id, Severity s, std::string message) {
    severities_[id] = s;
    if (++counts_[id] > kMaxListedPerId) return;
    findings_->push_back(MakeFinding(id, s, std::move(message), base_));
  }
  std::string At(const std::string& path) const {
    return " at " + core::Quoted(path.empty() ? std::string("(top level)") : path) + " of " +
           std::string(where_);
  }

  // JudgeLambda reports code the loader runs from the config itself; true
  // when `v` is such code (its insides are then not judged again).
  bool JudgeLambda(const json& v, std::string_view cls, const std::string& path) {
    if (cls == "Lambda") {
      std::string how = "a Python function looked up by name";
      auto config = v.find("config");
      if (config != v.end() && config->is_object()) {
        auto fn = config->find("function");
        const std::string* type = StringMember(*config, "function_type");
        if (fn != config->end()) {
          if (fn->is_array() || (type && *type == "lambda") ||
              (fn->is_object() && StringMember(*fn, "class_name") &&
               *StringMember(*fn, "class_name") == "__lambda__")) {
            how = "marshalled Python bytecode (base64)";
          }
        }
      }
      Add("MG-KERAS-LAMBDA", Severity::kCritical,
          "Lambda layer" + At(path) + ": loading the model runs " + how +
              " that the file defines (CVE-2024-3660)");
      return true;
    }
    if (cls == "__lambda__") {
      Add("MG-KERAS-LAMBDA", Severity::kCritical,
          "a Python lambda serialized as marshalled bytecode" + At(path) +
              ": loading the model runs it");
      return true;
    }
    const std::string* type = StringMember(v, "function_type");
    if (type && *type == "lambda") {
      Add("MG-KERAS-LAMBDA", Severity::kCritical,
          "a function of type \"lambda\" (marshalled bytecode)" + At(path) +
              ": loading the model runs it");
      return true;
    }
    return false;
  }

  void JudgeCustom(const json& v, std::string_view cls, const std::string& path) {
    std::string why;
    if (const std::string* module = StringMember(v, "module"); module && !KerasModule(*module)) {
      why = "module " + core::Quoted(*module) + " is imported";
    }
    if (const std::string* reg = StringMember(v, "registered_name")) {
      // Keras writes null for its public classes, "function" for its
      // functions; a registration is "package>name".
      const bool custom = reg->find('>') != std::string::npos ||
                          (*reg != "function" && !cls.empty() && *reg != cls);
      if (custom) {
        if (!why.empty()) why += ", ";
        why += "registered_name " + core::Quoted(*reg) + " is a custom registration";
      }
    }
    if (cls.find('>') != std::string_view::npos) {
      if (!why.empty()) why += ", ";
      why += "class_name " + core::Quoted(cls) + " is a custom registration (package>name)";
    }
    if (why.empty()) return;
    Add("MG-KERAS-CUSTOM-OBJECT", Severity::kHigh,
        "custom object " + core::Quoted(cls) + At(path) + ": " + why +
            "; deserializing it imports code outside Keras");
  }

  void JudgeTfOp(const json& v, const std::string& path) {
    auto config = v.find("config");
    if (config == v.end() || !config->is_object()) return;
    const std::string* fn = StringMember(*config, "function");
    if (!fn || !UnsafeTfOp(*fn)) return;
    Add("MG-KERAS-TFOP", Severity::kHigh,
        "TFOpLambda" + At(path) + " calls tf." + core::Quoted(*fn, 120) +
            ", which reads or writes files, runs Python or loads libraries when the model runs");
  }

  uint64_t base_;
  std::string_view where_;
  std::vector<Finding>* findings_;
  std::map<std::string, uint64_t> counts_;
  std::map<std::string, Severity> severities_;
};

// ---- HDF5 ----
// libhdf5 parses the whole file structure and has had memory-safety CVEs on
// crafted files, so the call is kept to the minimum a Keras loader makes:
// open read-only from memory, open the root group, read up to three of its
// attributes. The image is handed over without a copy (callbacks below) and
// never written (read-only open of the core driver, no backing store).
// Dynamic filter plugins are disabled once per process: reading never
// touches a dataset, but a plugin is native code a file could name.

struct ImageUdata {
  void* buffer;
  size_t size;
};

void* ImageMalloc(size_t size, H5FD_file_image_op_t op, void* udata) {
  auto* u = static_cast<ImageUdata*>(udata);
  switch (op) {
    case H5FD_FILE_IMAGE_OP_PROPERTY_LIST_SET:
    case H5FD_FILE_IMAGE_OP_PROPERTY_LIST_COPY:
    case H5FD_FILE_IMAGE_OP_PROPERTY_LIST_GET:
    case H5FD_FILE_IMAGE_OP_FILE_OPEN:
      return size == u->size ? u->buffer : nullptr;
    default:
      return nullptr;  // no resize, no second buffer
  }
}
void* ImageMemcpy(void* dest, const void* src, size_t size, H5FD_file_image_op_t, void* udata) {
  auto* u = static_cast<ImageUdata*>(udata);
  // Every "copy" is of the one buffer onto itself.
  return dest == src && dest == u->buffer && size == u->size ? dest : nullptr;
}
void* ImageRealloc(void*, size_t, H5FD_file_image_op_t, void*) { return nullptr; }
herr_t ImageFree(void*, H5FD_file_image_op_t, void*) { return 0; }
void* UdataCopy(void* udata) { return udata; }
herr_t UdataFree(void*) { return 0; }

// A name the core driver is given but never opens: with an image, it only
// checks that no such file exists, and nothing can exist below /dev/null.
constexpr const char* kImageName = "/dev/null/modelgate-hdf5-image";

// H5Handle closes an HDF5 id with its own close function.
class H5Handle {
 public:
  H5Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~H5Handle() {
    if (id_ >= 0) close_(id_);
  }
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// ReadStringAttribute reads root attribute `name` as one string; false
// with `why` when it is absent (`*absent`), not one string, or longer than
// `max_bytes`.
bool ReadStringAttribute(hid_t root, const char* name, uint64_t max_bytes, std::string* out,
                         bool* absent, std::string* why) {
  *absent = false;
  const htri_t exists = H5Aexists(root, name);
  if (exists < 0) return *why = "its attributes cannot be listed", false;
  if (exists == 0) return *absent = true, false;
  H5Handle attr(H5Aopen(root, name, H5P_DEFAULT), H5Aclose);
  if (!attr.ok()) return *why = "it cannot be opened", false;
  H5Handle type(H5Aget_type(attr.get()), H5Tclose);
  H5Handle space(H5Aget_space(attr.get()), H5Sclose);
  if (!type.ok() || !space.ok()) return *why = "its type cannot be read", false;
  if (H5Tget_class(type.get()) != H5T_STRING) return *why = "it is not a string", false;
  if (H5Sget_simple_extent_npoints(space.get()) != 1) return *why = "it is not one string", false;
  const htri_t variable = H5Tis_variable_str(type.get());
  if (variable < 0) return *why = "its string type cannot be read", false;
  if (variable > 0) {
    H5Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    if (!mem.ok() || H5Tset_size(mem.get(), H5T_VARIABLE) < 0 ||
        H5Tset_cset(mem.get(), H5Tget_cset(type.get())) < 0) {
      return *why = "no memory type", false;
    }
    char* data = nullptr;
    if (H5Aread(attr.get(), mem.get(), &data) < 0) return *why = "it cannot be read", false;
    bool ok = data != nullptr;
    if (ok) {
      const size_t n = strnlen(data, max_bytes + 1);
      ok = n <= max_bytes;
      if (ok) out->assign(data, n);
      else *why = "it is longer than " + std::to_string(max_bytes) + " bytes";
    } else {
      *why = "it is a null string";
    }
    H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, &data);
    return ok;
  }
  const size_t size = H5Tget_size(type.get());
  if (size == 0) return *why = "its string type has no size", false;
  if (size > max_bytes) return *why = "it is longer than " + std::to_string(max_bytes) + " bytes", false;
  std::string buffer(size, '\0');
  if (H5Aread(attr.get(), type.get(), buffer.data()) < 0) return *why = "it cannot be read", false;
  // Fixed-length strings are NUL padded or terminated (h5py writes bytes
  // NULLPAD): the text ends at the first NUL.
  buffer.resize(strnlen(buffer.data(), buffer.size()));
  *out = std::move(buffer);
  return true;
}

}  // namespace

void AnalyzeKerasConfig(std::string_view text, uint64_t base, std::string_view where,
                        std::vector<Finding>* findings, const KerasLimits& limits) {
  auto malformed = [&](std::string m) {
    findings->push_back(MakeFinding("MG-KERAS-MALFORMED", Severity::kHigh,
                                    std::string(where) + ": " + std::move(m), base));
  };
  if (text.size() > limits.max_config_bytes) {
    return malformed("the config of " + std::to_string(text.size()) + " bytes exceeds " +
                     std::to_string(limits.max_config_bytes) + " (limit max_config_bytes)");
  }
  // The code is not reported: only the message is used.
  auto doc = core::ParseStrictJson(text, limits.max_json_depth, core::Code::kOk, "Keras config");
  if (!doc.ok()) return malformed(doc.error().message + "; it was not judged");
  if (!doc.value().is_object()) return malformed("the config is not a JSON object");
  KerasWalker walker(base, where, findings);
  walker.Walk(doc.value(), "", false);
  walker.Summarize();
}

namespace {

// InitHdf5 sets libhdf5 up before it sees any byte of the file (the child
// runs it before it confines itself): no filter plugins, no error printing.
void InitHdf5() {
  static std::once_flag once;
  std::call_once(once, [] {
    H5open();
    H5PLset_loading_state(0);
  });
  // libhdf5 prints its error stack to stderr by default; the library must
  // not print (the stack is per thread in thread-safe builds).
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

// ReadInProcess is the libhdf5 reading itself; ReadH5ModelConfig runs it in
// a child process (below).
std::optional<std::string> ReadInProcess(std::span<const uint8_t> file,
                                         std::vector<Finding>* findings,
                                         H5KerasAttributes* attributes, const H5Limits& limits) {
  auto fail = [&](std::string m) -> std::optional<std::string> {
    findings->push_back(MakeFinding("MG-KERAS-H5", Severity::kHigh, std::move(m), 0));
    return std::nullopt;
  };
  if (file.size() > limits.max_image_bytes) {
    return fail("HDF5 file of " + std::to_string(file.size()) + " bytes exceeds " +
                std::to_string(limits.max_image_bytes) + " (limit max_image_bytes)");
  }
  if (file.empty()) return fail("empty file: not HDF5");
  InitHdf5();

  ImageUdata udata{const_cast<uint8_t*>(file.data()), file.size()};
  H5FD_file_image_callbacks_t callbacks{ImageMalloc, ImageMemcpy, ImageRealloc, ImageFree,
                                        UdataCopy,   UdataFree,   &udata};
  H5Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl.ok() || H5Pset_fapl_core(fapl.get(), 1 << 16, /*backing_store=*/0) < 0 ||
      H5Pset_file_image_callbacks(fapl.get(), &callbacks) < 0 ||
      H5Pset_file_image(fapl.get(), udata.buffer, udata.size) < 0) {
    return fail("libhdf5 cannot take the file image");
  }
  H5Handle h5(H5Fopen(kImageName, H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  if (!h5.ok()) return fail("libhdf5 cannot open the file (not HDF5, truncated or corrupt)");
  H5Handle root(H5Gopen2(h5.get(), "/", H5P_DEFAULT), H5Gclose);
  if (!root.ok()) return fail("libhdf5 cannot open the root group");
  std::string config, why;
  bool absent = false;
  if (!ReadStringAttribute(root.get(), "model_config", limits.max_attribute_bytes, &config,
                           &absent, &why)) {
    if (!absent) return fail("the root attribute \"model_config\" cannot be judged: " + why);
    config.clear();  // weights only
  }
  if (attributes) {
    std::string ignored;
    for (auto [name, out] : {std::pair{"keras_version", &attributes->keras_version},
                             std::pair{"backend", &attributes->backend}}) {
      if (!ReadStringAttribute(root.get(), name, 4096, out, &absent, &ignored)) out->clear();
    }
  }
  return config;
}

void PutString(std::string* out, const std::string& v) {
  const uint64_t n = v.size();
  out->append(reinterpret_cast<const char*>(&n), sizeof n);
  out->append(v);
}

bool GetString(std::string_view* in, std::string* v) {
  uint64_t n = 0;
  if (in->size() < sizeof n) return false;
  std::memcpy(&n, in->data(), sizeof n);
  in->remove_prefix(sizeof n);
  if (n > in->size()) return false;
  v->assign(in->substr(0, static_cast<size_t>(n)));
  in->remove_prefix(static_cast<size_t>(n));
  return true;
}

}  // namespace

namespace {

// VmBytes: the child's address space as it starts (it inherits the parent's
// mappings, the mapped file among them), from /proc/self/statm; 0 when it
// cannot be read (the caller then fails closed).
[[maybe_unused]] uint64_t VmBytes() {
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  char* end = nullptr;
  const unsigned long long pages = std::strtoull(buf, &end, 10);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (end == buf || page <= 0 || pages > UINT64_MAX / static_cast<uint64_t>(page)) return 0;
  return pages * static_cast<uint64_t>(page);
}

bool SetLimit(int resource, uint64_t soft, uint64_t hard, const char* name, std::string* why) {
  const rlimit r{static_cast<rlim_t>(soft), static_cast<rlim_t>(hard)};
  if (::setrlimit(resource, &r) == 0) return true;
  *why = std::string("setrlimit ") + name + " failed: " + std::strerror(errno);
  return false;
}

// AddRules installs the allowlist in `ctx`; false when libseccomp refuses a rule.
bool AddRules(scmp_filter_ctx ctx, int answer_fd) {
  const auto allow = [&](int nr) { return seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0) == 0; };
  // Memory: glibc malloc (brk, mmap for large blocks, mremap for realloc),
  // never executable.
  for (int nr : {SCMP_SYS(brk), SCMP_SYS(munmap), SCMP_SYS(mremap), SCMP_SYS(madvise),
                 SCMP_SYS(futex), SCMP_SYS(exit), SCMP_SYS(exit_group), SCMP_SYS(rt_sigreturn),
                 SCMP_SYS(clock_gettime), SCMP_SYS(getpid), SCMP_SYS(gettid)}) {
    if (!allow(nr)) return false;
  }
#if defined(__s390x__)
  // s390x's mmap takes its arguments in a block in memory (old_mmap), out
  // of the filter's reach: there only mprotect's prot is checked.
  if (!allow(SCMP_SYS(mmap))) return false;
  for (int nr : {SCMP_SYS(mprotect)}) {
#else
  for (int nr : {SCMP_SYS(mmap), SCMP_SYS(mprotect)}) {
#endif
    // prot (argument 2) & PROT_EXEC == 0. Structs, not libseccomp's SCMP_A*
    // macros, which are C compound literals.
    const scmp_arg_cmp no_exec{2, SCMP_CMP_MASKED_EQ, static_cast<scmp_datum_t>(PROT_EXEC), 0};
    if (seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, nr, 1, &no_exec) != 0) return false;
  }
#ifdef MG_H5_ASAN
  // ASan's _exit interceptor queries the alternate signal stack.
  if (!allow(SCMP_SYS(sigaltstack))) return false;
#endif
  // The answer, and nothing else, is written.
  const scmp_arg_cmp to_answer{0, SCMP_CMP_EQ, static_cast<scmp_datum_t>(answer_fd), 0};
  if (seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, SCMP_SYS(write), 1, &to_answer) != 0) {
    return false;
  }
  // libhdf5's core driver, given an image, first open()s the file name to
  // make sure no such file exists (H5FD__core_open): the call is answered
  // ENOENT without reaching the kernel, so nothing is opened.
  for (int nr : {SCMP_SYS(open), SCMP_SYS(openat)}) {
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOENT), nr, 0) != 0) return false;
  }
  return true;
}

}  // namespace

bool ConfineH5Child(int answer_fd, std::string* why, uint64_t memory_bytes) {
  if (answer_fd < 0) return *why = "no answer descriptor", false;
  // The address space: what the child inherited plus memory_bytes. ASan
  // reserves terabytes of shadow up front, so sanitizer builds bound memory
  // by nothing but the deadline.
  [[maybe_unused]] uint64_t vm = 0;
#ifndef MG_H5_ASAN
  vm = VmBytes();
  if (vm == 0) return *why = "cannot read the address space size", false;
  if (memory_bytes > UINT64_MAX - vm) return *why = "memory bound overflows", false;
#else
  (void)memory_bytes;
#endif
  // The filter is built before the descriptors go (libseccomp allocates).
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
  if (ctx == nullptr) return *why = "seccomp_init failed", false;
  struct Release {
    scmp_filter_ctx c;
    ~Release() { seccomp_release(c); }
  } release{ctx};
  if (!AddRules(ctx, answer_fd)) return *why = "a seccomp rule was refused", false;
  // Every descriptor but the answer goes, stdin/out/err included.
  if (answer_fd > 0 && ::close_range(0, static_cast<unsigned>(answer_fd) - 1, 0) != 0) {
    return *why = std::string("close_range failed: ") + std::strerror(errno), false;
  }
  if (::close_range(static_cast<unsigned>(answer_fd) + 1, ~0u, 0) != 0) {
    return *why = std::string("close_range failed: ") + std::strerror(errno), false;
  }
  const uint64_t cpu = static_cast<uint64_t>(kH5TimeoutSeconds) + 1;
  if (!SetLimit(RLIMIT_CPU, cpu, cpu + 1, "RLIMIT_CPU", why) ||
      !SetLimit(RLIMIT_NOFILE, 0, 0, "RLIMIT_NOFILE", why) ||
      !SetLimit(RLIMIT_FSIZE, 0, 0, "RLIMIT_FSIZE", why) ||
      !SetLimit(RLIMIT_CORE, 0, 0, "RLIMIT_CORE", why) ||
      !SetLimit(RLIMIT_NPROC, 0, 0, "RLIMIT_NPROC", why)) {
    return false;
  }
#ifndef MG_H5_ASAN
  if (!SetLimit(RLIMIT_AS, vm + memory_bytes, vm + memory_bytes, "RLIMIT_AS", why)) return false;
#endif
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    return *why = std::string("prctl failed: ") + std::strerror(errno), false;
  }
  if (seccomp_load(ctx) != 0) return *why = "seccomp_load failed", false;
  return true;
}

// libhdf5 is a large C library reading hostile bytes: a crafted file has
// made it spin (a variable-length string through the global heap, found by
// fuzz_scan) and it has had memory-safety bugs. So it runs in a child
// process (fork: the child only calls libhdf5 and _exits; glibc's fork
// keeps malloc usable in the child) that reports over a pipe, with a
// deadline of kH5TimeoutSeconds. A child that times out is killed; one
// that crashes or says nothing is a file that cannot be judged: MG-KERAS-H5,
// high, fail closed.
std::optional<std::string> ReadH5ModelConfig(std::span<const uint8_t> file,
                                             std::vector<Finding>* findings,
                                             H5KerasAttributes* attributes,
                                             const H5Limits& limits) {
  auto fail = [&](std::string m) -> std::optional<std::string> {
    findings->push_back(MakeFinding("MG-KERAS-H5", Severity::kHigh, std::move(m), 0));
    return std::nullopt;
  };
  if (file.size() > limits.max_image_bytes) {
    return fail("HDF5 file of " + std::to_string(file.size()) + " bytes exceeds " +
                std::to_string(limits.max_image_bytes) + " (limit max_image_bytes)");
  }
  if (file.empty()) return fail("empty file: not HDF5");
  // libhdf5 looks for the superblock signature where LooksLikeHdf5 does
  // (H5FD_locate_signature: 0, then 512, 1024, ... within the file): without
  // one it cannot open the file, so no child is started for it. This also
  // keeps the answer the same where the child's sandbox cannot be set up
  // (qemu-user has no seccomp): such a host refuses every real HDF5 file.
  if (!LooksLikeHdf5(file)) {
    return fail("libhdf5 cannot open the file (not HDF5, truncated or corrupt)");
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return fail("cannot run libhdf5: pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return fail("cannot run libhdf5: fork failed");
  }
  if (pid == 0) {
    ::close(fds[0]);
    std::vector<Finding> f;
    H5KerasAttributes a;
    std::string msg, why;
    InitHdf5();
    std::optional<std::string> config;
    if (ConfineH5Child(fds[1], &why)) {
      config = ReadInProcess(file, &f, &a, limits);
    } else {
      f.push_back(MakeFinding("MG-KERAS-H5", Severity::kHigh,
                              "libhdf5 was not run: its sandbox could not be set up (" + why +
                                  "): not judged",
                              0));
    }
    if (config) {
      msg = "C";
      PutString(&msg, *config);
      PutString(&msg, a.keras_version);
      PutString(&msg, a.backend);
    } else {
      msg = "F";
      PutString(&msg, f.empty() ? std::string("libhdf5 cannot read the file") : f.front().message);
    }
    size_t off = 0;
    while (off < msg.size()) {
      const ssize_t n = ::write(fds[1], msg.data() + off, msg.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  // The reply is at most the attribute limit plus the two short strings.
  const uint64_t cap = limits.max_attribute_bytes + 3 * sizeof(uint64_t) + 2 * 4096 + 1;
  std::string reply;
  bool timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kH5TimeoutSeconds);
  char buf[65536];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd pfd{fds[0], POLLIN, 0};
    const int r = ::poll(&pfd, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      timed_out = r == 0;
      break;
    }
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the child is done
    if (reply.size() + static_cast<size_t>(n) > cap) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return fail("libhdf5 did not finish reading the file within " +
                std::to_string(kH5TimeoutSeconds) + " s (kH5TimeoutSeconds): not judged");
  }
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS) {
    return fail("the sandbox killed libhdf5 for a forbidden system call while it read the file "
                "(SIGSYS): not judged");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return fail("libhdf5 crashed reading the file (signal " +
                std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : 0) + "): not judged");
  }
  std::string_view in(reply);
  if (in.empty()) return fail("libhdf5 gave no answer for the file: not judged");
  const char kind = in.front();
  in.remove_prefix(1);
  std::string config, version, backend;
  if (kind == 'F' && GetString(&in, &config)) return fail(config);
  if (kind != 'C' || !GetString(&in, &config) || !GetString(&in, &version) ||
      !GetString(&in, &backend)) {
    return fail("libhdf5's answer for the file is cut short: not judged");
  }
  if (attributes) {
    attributes->keras_version = std::move(version);
    attributes->backend = std::move(backend);
  }
  return config;
}

bool LooksLikeHdf5(std::span<const uint8_t> head) {
  auto at = [&](size_t off) {
    return head.size() >= off + kHdf5Magic.size() &&
           std::memcmp(head.data() + off, kHdf5Magic.data(), kHdf5Magic.size()) == 0;
  };
  if (at(0)) return true;
  for (size_t off = 512; off < head.size() && off <= (SIZE_MAX >> 1); off *= 2) {
    if (at(off)) return true;
  }
  return false;
}

}  // namespace modelgate::scanner::internal
