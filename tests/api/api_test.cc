// The C API through libmodelgate.so and modelgate.h only: every function,
// every mode, an embedded-signed file, sharded sets (good, mixed, missing
// shard), detached bundles (good, tampered in each mode, a file the bundle
// does not cover, a bad bundle that must not fall back to embedded
// signatures), NULL arguments, names holding NUL, metadata, writable views,
// lazy failures that repeat, and mg_scan's report. Fixtures are signed at
// test time with the built `modelgate` program (MG_MODELGATE_BIN).
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "modelgate.h"

// c_callers.c: out-of-range enum values, which only C can form.
extern "C" {
const char* c_status_name(int status);
void c_set_mode(mg_open_options* opts, int mode);
void c_set_signature(mg_open_options* opts, int kind);
}

namespace {

using Bytes = std::vector<uint8_t>;
using json = nlohmann::json;

constexpr mg_mode kAllModes[] = {MG_MODE_EAGER, MG_MODE_LAZY, MG_MODE_COPY};

const char* ModeName(mg_mode m) {
  return m == MG_MODE_EAGER ? "eager" : m == MG_MODE_LAZY ? "lazy" : "copy";
}

void WriteFile(const std::string& path, const Bytes& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

void WriteText(const std::string& path, const std::string& text) {
  WriteFile(path, Bytes(text.begin(), text.end()));
}

Bytes ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  return Bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string ReadText(const std::string& path) {
  Bytes b = ReadFile(path);
  return std::string(b.begin(), b.end());
}

// Run runs the modelgate program with `args` (no shell metacharacters in
// the temp paths used) and returns its exit status.
int Run(const std::string& args) {
  const std::string cmd = std::string(MG_MODELGATE_BIN) + " " + args + " >/dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(rc));
  return WEXITSTATUS(rc);
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/mg-api-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    ::nftw(path.c_str(), [](const char* p, const struct stat*, int, FTW*) { return ::remove(p); },
           16, FTW_DEPTH | FTW_PHYS);
  }
  std::string operator/(const std::string& rel) const { return path + "/" + rel; }
};

// Tensor is one tensor of a fixture; data is filled with a pattern.
struct Tensor {
  std::string name;  // raw bytes (may hold NUL)
  std::string dtype;
  std::vector<uint64_t> shape;
  size_t bytes;
  uint8_t seed;
};

std::string JsonString(const std::string& s) { return json(s).dump(); }

// Safetensors writes a file from `tensors` (data in the given order) and
// metadata.
Bytes Safetensors(const std::vector<Tensor>& tensors,
                  const std::vector<std::pair<std::string, std::string>>& metadata = {}) {
  std::string h = "{";
  Bytes data;
  for (const Tensor& t : tensors) {
    const size_t begin = data.size();
    for (size_t i = 0; i < t.bytes; ++i) data.push_back(static_cast<uint8_t>(t.seed + i * 7));
    if (h.size() > 1) h += ",";
    h += JsonString(t.name) + ":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) h += (i ? "," : "") + std::to_string(t.shape[i]);
    h += "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(data.size()) + "]}";
  }
  if (!metadata.empty()) {
    h += std::string(h.size() > 1 ? "," : "") + "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i) {
      h += (i ? "," : "") + JsonString(metadata[i].first) + ":" + JsonString(metadata[i].second);
    }
    h += "}";
  }
  h += "}";
  while ((8 + h.size()) % 8 != 0) h += ' ';
  Bytes out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>((uint64_t{h.size()} >> (8 * i)) & 0xff);
  out.insert(out.end(), h.begin(), h.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// The expected bytes of a fixture tensor.
Bytes Pattern(const Tensor& t) {
  Bytes b;
  for (size_t i = 0; i < t.bytes; ++i) b.push_back(static_cast<uint8_t>(t.seed + i * 7));
  return b;
}

const std::vector<Tensor> kTensors = {
    {"layer.1.weight", "F32", {8, 16}, 8 * 16 * 4, 1},
    {"embed", "BF16", {32, 4}, 32 * 4 * 2, 2},
    {"bias", "F16", {16}, 32, 3},
    {"scalar", "I64", {}, 8, 4},
    {"empty", "F32", {0, 5}, 0, 5},
};

// Keys makes an Ed25519 key pair in `dir` (PREFIX "key").
struct Keys {
  std::string prefix, pub, priv;
  Keys(const TempDir& dir, const std::string& name = "key", const std::string& alg = "") {
    prefix = dir / name;
    pub = prefix + ".pub";
    priv = prefix + ".key";
    REQUIRE(Run("keygen --out " + prefix + (alg.empty() ? "" : " --alg " + alg)) == 0);
  }
};

struct Ring {
  mg_keyring* keys = nullptr;
  explicit Ring(const std::vector<std::string>& pubs) {
    mg_error err;
    REQUIRE(mg_keyring_new(&keys, &err) == MG_OK);
    for (const std::string& p : pubs) REQUIRE(mg_keyring_add_file(keys, p.c_str(), nullptr, &err) == MG_OK);
  }
  ~Ring() { mg_keyring_free(keys); }
};

struct Model {
  mg_model* m = nullptr;
  mg_error err{};
  mg_status status = MG_ERR_INTERNAL;
  Model(const std::string& path, const Ring& ring, mg_mode mode, uint32_t flags = 0,
        mg_signature_kind kind = MG_SIGNATURE_ANY, const char* bundle = nullptr) {
    mg_open_options o;
    mg_open_options_init(&o);
    o.mode = mode;
    o.flags = flags;
    o.signature = kind;
    o.bundle_path = bundle;
    o.hash_threads = 2;
    status = mg_open(path.c_str(), ring.keys, &o, &m, &err);
    if (status != MG_OK) CHECK(m == nullptr);
  }
  ~Model() { mg_model_free(m); }
  bool ok() const { return status == MG_OK; }
};

std::string Describe(const mg_error& e) {
  return std::string(mg_status_name(e.status)) + " " + e.id + " @" +
         (e.offset == MG_NO_OFFSET ? std::string("-") : std::to_string(e.offset)) + " [" + e.file +
         "] " + e.message;
}

void ExpectError(const Model& m, mg_status status, const std::string& id) {
  CAPTURE(Describe(m.err));
  CHECK(m.status == status);
  CHECK(m.err.status == status);
  CHECK(std::string(m.err.id) == id);
  CHECK(m.m == nullptr);
}

// TensorBytes is tensor `name`'s verified bytes (REQUIREs success).
Bytes TensorBytes(const mg_model* m, const std::string& name) {
  size_t index = 0;
  mg_error err;
  REQUIRE(mg_model_find(m, name.data(), name.size(), &index, &err) == MG_OK);
  const void* data = nullptr;
  uint64_t len = 0;
  INFO(Describe(err));
  REQUIRE(mg_model_tensor_data(m, index, &data, &len, &err) == MG_OK);
  const auto* p = static_cast<const uint8_t*>(data);
  return len == 0 ? Bytes() : Bytes(p, p + len);
}

// ExpectTensors: the model holds exactly `tensors`, by name, with their
// dtype, shape and bytes.
void ExpectTensors(const mg_model* m, std::vector<Tensor> tensors) {
  std::sort(tensors.begin(), tensors.end(),
            [](const Tensor& a, const Tensor& b) { return a.name < b.name; });
  REQUIRE(mg_model_tensor_count(m) == tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    mg_tensor_info info;
    mg_error err;
    REQUIRE(mg_model_tensor_info(m, i, &info, &err) == MG_OK);
    CHECK(std::string(info.name, info.name_len) == tensors[i].name);
    CHECK(std::string(info.dtype) == tensors[i].dtype);
    CHECK(info.rank == tensors[i].shape.size());
    CHECK(std::vector<uint64_t>(info.shape, info.shape + info.rank) == tensors[i].shape);
    CHECK((info.rank == 0) == (info.shape == nullptr));
    CHECK(info.byte_length == tensors[i].bytes);
    CHECK(info.file_index < mg_model_file_count(m));
    CHECK(TensorBytes(m, tensors[i].name) == Pattern(tensors[i]));
  }
}

// SignedFile: a model file signed with an embedded STSIG record.
struct SignedFile {
  TempDir dir;
  Keys keys{dir};
  std::string path = dir / "model.safetensors";
  Bytes bytes;
  explicit SignedFile(const std::vector<Tensor>& tensors = kTensors,
                      const std::vector<std::pair<std::string, std::string>>& md = {
                          {"format", "pt"}, {"author", "me"}}) {
    WriteFile(path, Safetensors(tensors, md));
    REQUIRE(Run("sign -q --key " + keys.priv + " --model demo --version 3 " + path) == 0);
    bytes = ReadFile(path);
  }
  // DataOffset is the file offset of tensor `name`'s first byte.
  size_t DataOffset(const std::string& name) const {
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t{bytes[i]} << (8 * i);
    json h = json::parse(std::string(bytes.begin() + 8, bytes.begin() + 8 + static_cast<long>(n)));
    return 8 + n + h[name]["data_offsets"][0].get<size_t>();
  }
};

}  // namespace

TEST_CASE("api: version, ABI version and status names") {
  CHECK(std::string(mg_version()) == "0.1.0");
  CHECK(mg_api_version() == MG_API_VERSION);
  const std::pair<mg_status, const char*> names[] = {
      {MG_OK, "ok"},         {MG_ERR_ARGUMENT, "argument"}, {MG_ERR_IO, "io"},
      {MG_ERR_FORMAT, "format"}, {MG_ERR_VERIFY, "verify"}, {MG_ERR_KEY, "key"},
      {MG_ERR_UNSUPPORTED, "unsupported"}, {MG_ERR_INTERNAL, "internal"}};
  for (const auto& [status, name] : names) CHECK(std::string(mg_status_name(status)) == name);
  CHECK(std::string(c_status_name(99)) == "unknown");
  CHECK(std::string(c_status_name(-1)) == "unknown");
  CHECK(std::string(c_status_name(8)) == "unknown");
  CHECK(std::string(c_status_name(7)) == "internal");
  mg_open_options o;
  std::memset(&o, 0xff, sizeof o);
  mg_open_options_init(&o);
  CHECK(o.struct_size == sizeof o);
  CHECK(o.mode == MG_MODE_EAGER);
  CHECK(o.signature == MG_SIGNATURE_ANY);
  CHECK(o.bundle_path == nullptr);
  CHECK(o.flags == 0);
  CHECK(o.hash_threads == 0);
  mg_open_options_init(nullptr);
}

TEST_CASE("api: key ring adds PEM text and files, refuses what is not a key") {
  TempDir dir;
  Keys ed(dir, "ed"), ec(dir, "ec", "ecdsa-p256");
  mg_keyring* keys = nullptr;
  mg_error err;
  REQUIRE(mg_keyring_new(&keys, &err) == MG_OK);
  CHECK(err.status == MG_OK);
  CHECK(err.offset == MG_NO_OFFSET);
  CHECK(mg_keyring_count(keys) == 0);
  const std::string pem = ReadText(ed.pub);
  CHECK(mg_keyring_add_pem(keys, pem.data(), pem.size(), "release", &err) == MG_OK);
  CHECK(mg_keyring_add_file(keys, ec.pub.c_str(), nullptr, &err) == MG_OK);
  CHECK(mg_keyring_count(keys) == 2);
  // The length bounds the text: a cut PEM is not a key.
  CHECK(mg_keyring_add_pem(keys, pem.data(), pem.size() / 2, nullptr, &err) == MG_ERR_KEY);
  CHECK(std::string(err.id) == "MG-SIG-KEY-FORMAT");
  CHECK(mg_keyring_add_pem(keys, "garbage", 7, nullptr, &err) == MG_ERR_KEY);
  // A private key is not a public key.
  const std::string priv = ReadText(ed.priv);
  CHECK(mg_keyring_add_pem(keys, priv.data(), priv.size(), nullptr, &err) == MG_ERR_KEY);
  CHECK(mg_keyring_add_file(keys, (dir / "nope.pub").c_str(), nullptr, &err) == MG_ERR_IO);
  CHECK(std::string(err.file) == dir / "nope.pub");
  CHECK(mg_keyring_count(keys) == 2);
  // NULL arguments.
  CHECK(mg_keyring_new(nullptr, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_keyring_add_pem(nullptr, pem.data(), pem.size(), nullptr, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_keyring_add_pem(keys, nullptr, 10, nullptr, &err) == MG_ERR_ARGUMENT);
  CHECK(std::string(err.id) == "MG-API-ARGUMENT");
  CHECK(mg_keyring_add_file(keys, nullptr, nullptr, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_keyring_add_file(nullptr, ed.pub.c_str(), nullptr, nullptr) == MG_ERR_ARGUMENT);
  CHECK(mg_keyring_count(nullptr) == 0);
  mg_keyring_free(keys);
  mg_keyring_free(nullptr);
}

TEST_CASE("api: an embedded-signed file loads in every mode") {
  SignedFile f;
  Ring ring({f.keys.pub});
  for (mg_mode mode : kAllModes) {
    CAPTURE(ModeName(mode));
    Model m(f.path, ring, mode);
    CAPTURE(Describe(m.err));
    REQUIRE(m.ok());
    CHECK(m.err.status == MG_OK);
    CHECK(m.err.id[0] == '\0');
    REQUIRE(mg_model_file_count(m.m) == 1);
    CHECK(std::string(mg_model_file_path(m.m, 0)) == f.path);
    CHECK(mg_model_file_path(m.m, 1) == nullptr);
    ExpectTensors(m.m, kTensors);
    // Signed metadata, sorted, without the stsig.* keys.
    REQUIRE(mg_model_metadata_count(m.m, 0) == 2);
    const char *k = nullptr, *v = nullptr;
    size_t kl = 0, vl = 0;
    REQUIRE(mg_model_metadata_entry(m.m, 0, 0, &k, &kl, &v, &vl, &m.err) == MG_OK);
    CHECK(std::string(k, kl) == "author");
    CHECK(std::string(v, vl) == "me");
    REQUIRE(mg_model_metadata_entry(m.m, 0, 1, &k, &kl, &v, &vl, &m.err) == MG_OK);
    CHECK(std::string(k) == "format");
    CHECK(std::string(v) == "pt");
    CHECK(mg_model_metadata_entry(m.m, 0, 2, &k, &kl, &v, &vl, &m.err) == MG_ERR_ARGUMENT);
    CHECK(mg_model_metadata_entry(m.m, 1, 0, &k, &kl, &v, &vl, &m.err) == MG_ERR_ARGUMENT);
    CHECK(mg_model_metadata_count(m.m, 1) == 0);
    CHECK(mg_model_check_all(m.m, &m.err) == MG_OK);
    json v_json = json::parse(mg_model_verification_json(m.m));
    CHECK(v_json["kind"] == "embedded");
    CHECK(v_json["mode"] == ModeName(mode));
    REQUIRE(v_json["keys"].size() == 1);
    CHECK(v_json["keys"][0]["name"] == f.keys.pub);
    CHECK(v_json["keys"][0]["key_id"].get<std::string>().size() == 32);
    CHECK(v_json["model"] == "demo");
    CHECK(v_json["version"] == 3);
    CHECK(v_json["bundle"].is_null());
    REQUIRE(v_json["files"].size() == 1);
    CHECK(v_json["files"][0]["path"] == f.path);
  }
}

TEST_CASE("api: a tampered tensor fails eager and copy at open, lazy on each access") {
  SignedFile f;
  Ring ring({f.keys.pub});
  Bytes bad = f.bytes;
  const size_t offset = f.DataOffset("embed") + 9;
  bad[offset] ^= 0x20;
  WriteFile(f.path, bad);
  for (mg_mode mode : {MG_MODE_EAGER, MG_MODE_COPY}) {
    CAPTURE(ModeName(mode));
    Model m(f.path, ring, mode);
    ExpectError(m, MG_ERR_VERIFY, "MG-SIG-TENSOR-MISMATCH");
    CHECK(std::string(m.err.file) == f.path);
    CHECK(m.err.offset == f.DataOffset("embed"));
    CHECK(std::string(m.err.message).find("\"embed\"") != std::string::npos);
  }
  Model lazy(f.path, ring, MG_MODE_LAZY);
  REQUIRE(lazy.ok());
  CHECK(TensorBytes(lazy.m, "bias") == Pattern(kTensors[2]));
  size_t index = 0;
  REQUIRE(mg_model_find(lazy.m, "embed", 5, &index, &lazy.err) == MG_OK);
  for (int round = 0; round < 3; ++round) {
    const void* data = reinterpret_cast<const void*>(1);
    uint64_t len = 7;
    mg_error err;
    CHECK(mg_model_tensor_data(lazy.m, index, &data, &len, &err) == MG_ERR_VERIFY);
    CHECK(std::string(err.id) == "MG-SIG-TENSOR-MISMATCH");
    CHECK(data == nullptr);
    CHECK(len == 0);
    CHECK(mg_model_check_all(lazy.m, &err) == MG_ERR_VERIFY);
    CHECK(std::string(err.id) == "MG-SIG-TENSOR-MISMATCH");
  }
  CHECK(TensorBytes(lazy.m, "scalar") == Pattern(kTensors[3]));
}

TEST_CASE("api: unsigned, untrusted and keyless opens are refused") {
  SignedFile f;
  TempDir other_dir;
  Keys other(other_dir, "other");
  Ring untrusted({other.pub});
  for (mg_mode mode : kAllModes) {
    Model m(f.path, untrusted, mode);
    ExpectError(m, MG_ERR_VERIFY, "MG-SIG-UNTRUSTED");
  }
  const std::string plain = f.dir / "plain.safetensors";
  WriteFile(plain, Safetensors(kTensors));
  Ring ring({f.keys.pub});
  for (mg_mode mode : kAllModes) {
    Model m(plain, ring, mode);
    ExpectError(m, MG_ERR_VERIFY, "MG-SIG-MISSING");
  }
  Ring empty({});
  Model none(f.path, empty, MG_MODE_EAGER);
  ExpectError(none, MG_ERR_KEY, "MG-API-NO-KEYS");
  mg_model* out = reinterpret_cast<mg_model*>(1);
  mg_error err;
  CHECK(mg_open(f.path.c_str(), nullptr, nullptr, &out, &err) == MG_ERR_KEY);
  CHECK(out == nullptr);
  // A symlink, a missing path, a file that is not safetensors.
  REQUIRE(::symlink(f.path.c_str(), (f.dir / "link.safetensors").c_str()) == 0);
  Model link(f.dir / "link.safetensors", ring, MG_MODE_EAGER);
  ExpectError(link, MG_ERR_IO, "MG-IO-NOT-REGULAR");
  Model missing(f.dir / "missing.safetensors", ring, MG_MODE_EAGER);
  ExpectError(missing, MG_ERR_IO, "MG-IO-OPEN");
  WriteText(f.dir / "junk.safetensors", "not a safetensors file at all");
  Model junk(f.dir / "junk.safetensors", ring, MG_MODE_EAGER);
  CHECK(junk.status == MG_ERR_FORMAT);
  CHECK(std::string(junk.err.id).rfind("MG-ST-", 0) == 0);
}

TEST_CASE("api: NULL and invalid arguments are MG_ERR_ARGUMENT, never a crash") {
  SignedFile f;
  Ring ring({f.keys.pub});
  mg_error err;
  mg_model* out = nullptr;
  CHECK(mg_open(nullptr, ring.keys, nullptr, &out, &err) == MG_ERR_ARGUMENT);
  CHECK(std::string(err.id) == "MG-API-ARGUMENT");
  CHECK(mg_open(f.path.c_str(), ring.keys, nullptr, nullptr, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_open("", ring.keys, nullptr, &out, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_open(f.path.c_str(), ring.keys, nullptr, &out, nullptr) == MG_OK);  // err may be NULL
  mg_model_free(out);
  mg_open_options o;
  mg_open_options_init(&o);
  o.struct_size = 8;
  CHECK(mg_open(f.path.c_str(), ring.keys, &o, &out, &err) == MG_ERR_ARGUMENT);
  mg_open_options_init(&o);
  c_set_mode(&o, 7);
  CHECK(mg_open(f.path.c_str(), ring.keys, &o, &out, &err) == MG_ERR_UNSUPPORTED);
  mg_open_options_init(&o);
  c_set_signature(&o, -3);
  CHECK(mg_open(f.path.c_str(), ring.keys, &o, &out, &err) == MG_ERR_UNSUPPORTED);
  mg_open_options_init(&o);
  o.flags = 0x80;
  CHECK(mg_open(f.path.c_str(), ring.keys, &o, &out, &err) == MG_ERR_UNSUPPORTED);
  CHECK(out == nullptr);
  // hash_threads: at most 256.
  mg_open_options_init(&o);
  o.mode = MG_MODE_LAZY;
  o.hash_threads = 256;
  REQUIRE(mg_open(f.path.c_str(), ring.keys, &o, &out, &err) == MG_OK);
  CHECK(mg_model_check_all(out, &err) == MG_OK);
  mg_model_free(out);
  o.hash_threads = 257;
  CHECK(mg_open(f.path.c_str(), ring.keys, &o, &out, &err) == MG_ERR_ARGUMENT);
  CHECK(std::string(err.message).find("hash_threads") != std::string::npos);
  CHECK(out == nullptr);

  CHECK(mg_model_file_count(nullptr) == 0);
  CHECK(mg_model_file_path(nullptr, 0) == nullptr);
  CHECK(mg_model_tensor_count(nullptr) == 0);
  mg_tensor_info info;
  CHECK(mg_model_tensor_info(nullptr, 0, &info, &err) == MG_ERR_ARGUMENT);
  size_t index = 0;
  CHECK(mg_model_find(nullptr, "a", 1, &index, &err) == MG_ERR_ARGUMENT);
  const void* data = nullptr;
  uint64_t len = 0;
  CHECK(mg_model_tensor_data(nullptr, 0, &data, &len, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_model_check_all(nullptr, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_model_metadata_count(nullptr, 0) == 0);
  const char *k = nullptr, *v = nullptr;
  CHECK(mg_model_metadata_entry(nullptr, 0, 0, &k, nullptr, &v, nullptr, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_model_verification_json(nullptr) == nullptr);
  mg_model_free(nullptr);

  Model m(f.path, ring, MG_MODE_EAGER);
  REQUIRE(m.ok());
  const size_t n = mg_model_tensor_count(m.m);
  CHECK(mg_model_tensor_info(m.m, n, &info, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_model_tensor_info(m.m, 0, nullptr, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_model_tensor_data(m.m, n, &data, &len, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_model_tensor_data(m.m, 0, nullptr, &len, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_model_tensor_data(m.m, 0, &data, nullptr, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_model_find(m.m, nullptr, 3, &index, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_model_find(m.m, "bias", 4, nullptr, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_model_find(m.m, "nope", 4, &index, &err) == MG_ERR_ARGUMENT);
  CHECK(std::string(err.id) == "MG-API-NO-TENSOR");
  CHECK(mg_model_find(m.m, "bias", 3, &index, &err) == MG_ERR_ARGUMENT);  // "bia"
  CHECK(mg_model_metadata_entry(m.m, 0, 0, nullptr, nullptr, &v, nullptr, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_model_metadata_entry(m.m, 0, 0, &k, nullptr, nullptr, nullptr, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_model_metadata_entry(m.m, 0, 0, &k, nullptr, &v, nullptr, &err) == MG_OK);
}

TEST_CASE("api: names are matched by length: NUL is a byte, not the end") {
  std::vector<Tensor> tensors = {{"a", "U8", {2}, 2, 8}, {"ab", "U8", {4}, 4, 9}};
  SignedFile f(tensors, {});
  Ring ring({f.keys.pub});
  Model m(f.path, ring, MG_MODE_LAZY);
  REQUIRE(m.ok());
  ExpectTensors(m.m, tensors);
  size_t index = 9;
  mg_error err;
  // "a\0b" is neither "a" (what a C string would stop at) nor "ab".
  CHECK(mg_model_find(m.m, "a\0b", 3, &index, &err) == MG_ERR_ARGUMENT);
  CHECK(std::string(err.id) == "MG-API-NO-TENSOR");
  CHECK(mg_model_find(m.m, "a\0", 2, &index, &err) == MG_ERR_ARGUMENT);
  REQUIRE(mg_model_find(m.m, "ab", 2, &index, &err) == MG_OK);
  mg_tensor_info info;
  REQUIRE(mg_model_tensor_info(m.m, index, &info, &err) == MG_OK);
  CHECK(info.name_len == 2);
  CHECK(std::string(info.name) == "ab");
  CHECK(mg_model_metadata_count(m.m, 0) == 0);
  // The strict parser refuses a name holding a control byte ("\u0000" in
  // the header), so no such tensor is ever handed out.
  const std::string nul_file = f.dir / "nul.safetensors";
  WriteFile(nul_file, Safetensors({{std::string("x\0y", 3), "U8", {1}, 1, 1}}));
  Model nul(nul_file, ring, MG_MODE_EAGER);
  ExpectError(nul, MG_ERR_FORMAT, "MG-ST-BAD-NAME");
}

TEST_CASE("api: MG_OPEN_WRITABLE views can be written, the file stays as signed") {
  SignedFile f;
  Ring ring({f.keys.pub});
  for (mg_mode mode : kAllModes) {
    CAPTURE(ModeName(mode));
    Model m(f.path, ring, mode, MG_OPEN_WRITABLE);
    REQUIRE(m.ok());
    size_t index = 0;
    REQUIRE(mg_model_find(m.m, "layer.1.weight", 14, &index, &m.err) == MG_OK);
    const void* data = nullptr;
    uint64_t len = 0;
    REQUIRE(mg_model_tensor_data(m.m, index, &data, &len, &m.err) == MG_OK);
    std::memset(const_cast<void*>(data), 0x5A, static_cast<size_t>(len));
    CHECK(TensorBytes(m.m, "layer.1.weight") == Bytes(static_cast<size_t>(len), 0x5A));
    CHECK(ReadFile(f.path) == f.bytes);
    Model again(f.path, ring, mode);
    REQUIRE(again.ok());
    CHECK(TensorBytes(again.m, "layer.1.weight") == Pattern(kTensors[0]));
  }
}

TEST_CASE("api: errors are cut on a UTF-8 character boundary and NUL-terminated") {
  TempDir dir;
  Keys k(dir);
  Ring ring({k.pub});
  std::string path = "/a";
  for (int i = 0; i < 1200; ++i) path += "\xc3\xa9";  // U+00E9, 2 bytes each
  Model m(path, ring, MG_MODE_EAGER);
  CHECK(m.status == MG_ERR_IO);
  const size_t file_len = std::strlen(m.err.file);
  CHECK(file_len == 1022);  // 1023 would split the 511th character
  CHECK(std::string(m.err.file) == path.substr(0, 1022));
  const size_t msg_len = std::strlen(m.err.message);
  CHECK(msg_len < sizeof(m.err.message));
  CHECK(msg_len > 0);
  // No character cut: the message ends with a whole sequence (or ASCII).
  const auto last = static_cast<unsigned char>(m.err.message[msg_len - 1]);
  CHECK((last < 0x80 || (last & 0xC0) == 0x80));
}

namespace {

// ShardedSet: an index and two shards, signed as one set with embedded
// records (sign DIR).
struct ShardedSet {
  TempDir dir;
  Keys keys{dir};
  std::string model = dir / "model";
  std::vector<Tensor> a = {{"a.weight", "F32", {4, 4}, 64, 11}, {"a.bias", "F32", {4}, 16, 12}};
  std::vector<Tensor> b = {{"b.weight", "F32", {4, 4}, 64, 13}};
  explicit ShardedSet(uint8_t salt = 0, bool sign = true) {
    REQUIRE(::mkdir(model.c_str(), 0755) == 0);
    for (Tensor& t : a) t.seed = static_cast<uint8_t>(t.seed + salt);
    for (Tensor& t : b) t.seed = static_cast<uint8_t>(t.seed + salt);
    WriteFile(model + "/model-00001-of-00002.safetensors", Safetensors(a, {{"format", "pt"}}));
    WriteFile(model + "/model-00002-of-00002.safetensors", Safetensors(b, {{"format", "pt"}}));
    WriteText(model + "/model.safetensors.index.json",
              R"({"metadata":{"total_size":144},"weight_map":{"a.weight":"model-00001-of-00002.safetensors",)"
              R"("a.bias":"model-00001-of-00002.safetensors","b.weight":"model-00002-of-00002.safetensors"}})");
    WriteText(model + "/config.json", "{}");
    if (sign) REQUIRE(Run("sign -q --key " + keys.priv + " " + model) == 0);
  }
  std::vector<Tensor> all() const {
    std::vector<Tensor> out = a;
    out.insert(out.end(), b.begin(), b.end());
    return out;
  }
};

}  // namespace

TEST_CASE("api: an embedded-signed shard set loads from its directory or its index") {
  ShardedSet set;
  Ring ring({set.keys.pub});
  for (const std::string& path : {set.model, set.model + "/model.safetensors.index.json"}) {
    for (mg_mode mode : kAllModes) {
      CAPTURE(path, ModeName(mode));
      Model m(path, ring, mode);
      CAPTURE(Describe(m.err));
      REQUIRE(m.ok());
      REQUIRE(mg_model_file_count(m.m) == 2);
      CHECK(std::string(mg_model_file_path(m.m, 0)) ==
            set.model + "/model-00001-of-00002.safetensors");
      ExpectTensors(m.m, set.all());
      size_t index = 0;
      REQUIRE(mg_model_find(m.m, "b.weight", 8, &index, &m.err) == MG_OK);
      mg_tensor_info info;
      REQUIRE(mg_model_tensor_info(m.m, index, &info, &m.err) == MG_OK);
      CHECK(info.file_index == 1);
      CHECK(mg_model_check_all(m.m, &m.err) == MG_OK);
      CHECK(mg_model_metadata_count(m.m, 1) == 1);
    }
  }
}

TEST_CASE("api: a shard of another signed set, or a missing shard, is refused") {
  ShardedSet set, other(50);
  Ring ring({set.keys.pub, other.keys.pub});
  const std::string shard2 = "/model-00002-of-00002.safetensors";
  SECTION("mixed sets") {
    WriteFile(set.model + shard2, ReadFile(other.model + shard2));
    for (mg_mode mode : kAllModes) {
      Model m(set.model, ring, mode);
      ExpectError(m, MG_ERR_VERIFY, "MG-SET-DIGEST");
    }
  }
  SECTION("missing shard") {
    REQUIRE(::unlink((set.model + shard2).c_str()) == 0);
    for (mg_mode mode : kAllModes) {
      Model m(set.model, ring, mode);
      ExpectError(m, MG_ERR_VERIFY, "MG-SET-SHARD-MISSING");
    }
  }
  SECTION("an edited weight map") {
    WriteText(set.model + "/model.safetensors.index.json",
              R"({"weight_map":{"a.weight":"model-00001-of-00002.safetensors",)"
              R"("a.bias":"model-00001-of-00002.safetensors","b.weight":"model-00001-of-00002.safetensors"}})");
    Model m(set.model, ring, MG_MODE_EAGER);
    CHECK(m.status == MG_ERR_VERIFY);
    CHECK(std::string(m.err.id).rfind("MG-SET-", 0) == 0);
  }
  SECTION("without the index, shards of two sets") {
    REQUIRE(::unlink((set.model + "/model.safetensors.index.json").c_str()) == 0);
    WriteFile(set.model + shard2, ReadFile(other.model + shard2));
    Model m(set.model, ring, MG_MODE_EAGER);
    ExpectError(m, MG_ERR_VERIFY, "MG-SET-DIGEST");
  }
}

TEST_CASE("api: verification JSON says null for no model name and version 0") {
  TempDir dir;
  Keys keys(dir);
  const std::string path = dir / "m.safetensors";
  WriteFile(path, Safetensors(kTensors));
  REQUIRE(Run("sign -q --key " + keys.priv + " " + path) == 0);
  Ring ring({keys.pub});
  Model m(path, ring, MG_MODE_COPY);
  REQUIRE(m.ok());
  json v = json::parse(mg_model_verification_json(m.m));
  CHECK(v["model"].is_null());
  CHECK(v["version"].is_null());
  CHECK(v["files"][0]["sha256"].is_null());
}

TEST_CASE("api: separately signed files in one directory are refused, each opens alone") {
  TempDir dir;
  Keys keys(dir);
  const std::string model = dir / "m";
  REQUIRE(::mkdir(model.c_str(), 0755) == 0);
  std::vector<Tensor> x = {{"x", "U8", {3}, 3, 1}}, y = {{"y", "U8", {3}, 3, 2}};
  WriteFile(model + "/x.safetensors", Safetensors(x));
  WriteFile(model + "/y.safetensors", Safetensors(y));
  REQUIRE(Run("sign -q --key " + keys.priv + " " + model + "/x.safetensors") == 0);
  REQUIRE(Run("sign -q --key " + keys.priv + " " + model + "/y.safetensors") == 0);
  Ring ring({keys.pub});
  for (mg_mode mode : {MG_MODE_EAGER, MG_MODE_LAZY, MG_MODE_COPY}) {
    Model m(model, ring, mode);
    ExpectError(m, MG_ERR_VERIFY, "MG-SET-NOT-SIGNED");
    CHECK_THAT(m.err.message, Catch::Contains("2 separately signed .safetensors files"));
  }
  {
    Model one(model + "/x.safetensors", ring, MG_MODE_EAGER);
    REQUIRE(one.ok());
    ExpectTensors(one.m, {x[0]});
  }
  // One file in a directory is that file.
  REQUIRE(::unlink((model + "/y.safetensors").c_str()) == 0);
  Model single(model, ring, MG_MODE_EAGER);
  REQUIRE(single.ok());
  ExpectTensors(single.m, {x[0]});
  TempDir empty;
  Model none(empty.path, ring, MG_MODE_EAGER);
  ExpectError(none, MG_ERR_FORMAT, "MG-API-LAYOUT");
}

TEST_CASE("api: a tensor name in two files of one signed model is refused") {
  TempDir dir;
  Keys keys(dir);
  const std::string model = dir / "m";
  REQUIRE(::mkdir(model.c_str(), 0755) == 0);
  WriteFile(model + "/x.safetensors", Safetensors({{"x", "U8", {3}, 3, 1}}));
  WriteFile(model + "/z.safetensors", Safetensors({{"x", "U8", {3}, 3, 7}}));
  REQUIRE(Run("sign -q --detached --key " + keys.priv + " " + model) == 0);
  Ring ring({keys.pub});
  Model dup(model, ring, MG_MODE_EAGER);
  ExpectError(dup, MG_ERR_VERIFY, "MG-SET-TENSOR-DUPLICATE");
}

namespace {

// DetachedDir: an unsigned model directory with a detached bundle
// (sign --detached) by an Ed25519 or ECDSA key.
struct DetachedDir {
  TempDir dir;
  Keys keys;
  std::string model = dir / "model";
  std::vector<Tensor> t1 = {{"w1", "F32", {16, 16}, 1024, 21}, {"b1", "F32", {16}, 64, 22}};
  std::vector<Tensor> t2 = {{"w2", "F16", {8, 8}, 128, 23}};
  explicit DetachedDir(const std::string& alg = "") : keys(dir, "key", alg) {
    REQUIRE(::mkdir(model.c_str(), 0755) == 0);
    WriteFile(model + "/one.safetensors", Safetensors(t1, {{"format", "pt"}}));
    WriteFile(model + "/two.safetensors", Safetensors(t2));
    WriteText(model + "/config.json", "{\"x\":1}");
    REQUIRE(Run("sign -q --detached --key " + keys.priv + " " + model) == 0);
  }
  std::vector<Tensor> all() const {
    std::vector<Tensor> out = t1;
    out.insert(out.end(), t2.begin(), t2.end());
    return out;
  }
};

}  // namespace

TEST_CASE("api: a detached-signed directory loads in every mode (Ed25519 and ECDSA)") {
  for (const std::string alg : {"", "ecdsa-p256"}) {
    DetachedDir d(alg);
    Ring ring({d.keys.pub});
    for (mg_mode mode : kAllModes) {
      CAPTURE(alg, ModeName(mode));
      Model m(d.model, ring, mode);
      CAPTURE(Describe(m.err));
      REQUIRE(m.ok());
      CHECK(mg_model_file_count(m.m) == 2);
      ExpectTensors(m.m, d.all());
      CHECK(mg_model_check_all(m.m, &m.err) == MG_OK);
      CHECK(mg_model_metadata_count(m.m, 0) == 1);
      json v = json::parse(mg_model_verification_json(m.m));
      CHECK(v["kind"] == "detached");
      CHECK(v["mode"] == ModeName(mode));
      REQUIRE(v["keys"].size() == 1);
      CHECK(v["model"] == "model");
      CHECK(v["bundle"]["path"] == d.model + "/model.sig");
      CHECK(v["bundle"]["sha256"].get<std::string>().size() == 64);
      REQUIRE(v["files"].size() == 2);
      CHECK(v["files"][0]["sha256"].get<std::string>().size() == 64);
    }
    // Asked for explicitly, and the same bundle named by path.
    Model det(d.model, ring, MG_MODE_EAGER, 0, MG_SIGNATURE_DETACHED);
    CHECK(det.ok());
    // One file of the directory, under the directory's bundle named by path;
    // not named, a file's bundle is FILE.sig, and there is none.
    const std::string one = d.model + "/one.safetensors", sig = d.model + "/model.sig";
    for (mg_mode mode : kAllModes) {
      Model file(one, ring, mode, 0, MG_SIGNATURE_ANY, sig.c_str());
      CAPTURE(Describe(file.err));
      REQUIRE(file.ok());
      ExpectTensors(file.m, d.t1);
    }
    Model unnamed(one, ring, MG_MODE_EAGER, 0, MG_SIGNATURE_DETACHED);
    ExpectError(unnamed, MG_ERR_VERIFY, "MG-API-NO-BUNDLE");
    const std::string moved = d.dir / "elsewhere.sig";
    REQUIRE(::rename((d.model + "/model.sig").c_str(), moved.c_str()) == 0);
    Model named(d.model, ring, MG_MODE_LAZY, 0, MG_SIGNATURE_ANY, moved.c_str());
    CHECK(named.ok());
    // No bundle: DETACHED requires one; ANY falls to embedded (unsigned here).
    Model required(d.model, ring, MG_MODE_EAGER, 0, MG_SIGNATURE_DETACHED);
    ExpectError(required, MG_ERR_VERIFY, "MG-API-NO-BUNDLE");
    Model any(d.model, ring, MG_MODE_EAGER);
    ExpectError(any, MG_ERR_VERIFY, "MG-SIG-MISSING");
  }
}

TEST_CASE("api: a file changed after detached signing fails each mode as it promises") {
  DetachedDir d;
  Ring ring({d.keys.pub});
  const std::string two = d.model + "/two.safetensors";
  Bytes bad = ReadFile(two);
  bad[bad.size() - 3] ^= 0x01;
  WriteFile(two, bad);
  for (mg_mode mode : {MG_MODE_EAGER, MG_MODE_COPY}) {
    Model m(d.model, ring, mode);
    ExpectError(m, MG_ERR_VERIFY, "MG-OMS-FILE-CHANGED");
    CHECK(std::string(m.err.file) == two);
  }
  Model lazy(d.model, ring, MG_MODE_LAZY);
  REQUIRE(lazy.ok());
  CHECK(TensorBytes(lazy.m, "w1") == Pattern(d.t1[0]));  // the other file is fine
  size_t index = 0;
  REQUIRE(mg_model_find(lazy.m, "w2", 2, &index, &lazy.err) == MG_OK);
  for (int round = 0; round < 3; ++round) {
    const void* data = nullptr;
    uint64_t len = 0;
    mg_error err;
    CHECK(mg_model_tensor_data(lazy.m, index, &data, &len, &err) == MG_ERR_VERIFY);
    CHECK(std::string(err.id) == "MG-OMS-FILE-CHANGED");
    CHECK(std::string(err.file) == two);
    CHECK(data == nullptr);
    CHECK(mg_model_check_all(lazy.m, &err) == MG_ERR_VERIFY);
    CHECK(std::string(err.id) == "MG-OMS-FILE-CHANGED");
  }
  // Both files changed: the error is the first's in load order, however the
  // files were verified in parallel.
  const std::string one = d.model + "/one.safetensors";
  const Bytes one_good = ReadFile(one);
  Bytes one_bad = one_good;
  one_bad[one_bad.size() - 1] ^= 0x80;
  WriteFile(one, one_bad);
  for (int round = 0; round < 5; ++round) {
    Model m(d.model, ring, MG_MODE_EAGER);
    ExpectError(m, MG_ERR_VERIFY, "MG-OMS-FILE-CHANGED");
    CHECK(std::string(m.err.file) == one);
  }
  WriteFile(one, one_good);
  // A file that no longer parses is reported as changed, in lazy mode too.
  bad.push_back(0);
  WriteFile(two, bad);
  for (mg_mode mode : kAllModes) {
    Model longer(d.model, ring, mode);
    ExpectError(longer, MG_ERR_VERIFY, "MG-OMS-FILE-CHANGED");
  }
}

TEST_CASE("api: a file the bundle does not cover is refused") {
  DetachedDir d;
  Ring ring({d.keys.pub});
  WriteFile(d.model + "/three.safetensors", Safetensors({{"w3", "U8", {1}, 1, 1}}));
  for (mg_mode mode : kAllModes) {
    Model m(d.model, ring, mode);
    ExpectError(m, MG_ERR_VERIFY, "MG-OMS-FILE-UNSIGNED");
    CHECK(std::string(m.err.file) == d.model + "/three.safetensors");
  }
}

TEST_CASE("api: a bundle that does not verify never falls back to embedded signatures") {
  // Files that are each embedded-signed, beside a broken or foreign bundle.
  DetachedDir d;
  for (const char* f : {"/one.safetensors", "/two.safetensors"}) {
    REQUIRE(Run("sign -q --key " + d.keys.priv + " " + d.model + f) == 0);
  }
  Ring ring({d.keys.pub});
  {
    for (const char* f : {"/one.safetensors", "/two.safetensors"}) {
      Model embedded(d.model + f, ring, MG_MODE_EAGER, 0, MG_SIGNATURE_EMBEDDED);
      CAPTURE(Describe(embedded.err));
      CHECK(embedded.ok());
    }
    Model stale(d.model, ring, MG_MODE_EAGER);  // the bundle predates the embedded signing
    ExpectError(stale, MG_ERR_VERIFY, "MG-OMS-FILE-CHANGED");
  }
  SECTION("malformed") {
    WriteText(d.model + "/model.sig", "{\"not\": \"a bundle\"}");
    for (mg_mode mode : kAllModes) {
      Model m(d.model, ring, mode);
      ExpectError(m, MG_ERR_FORMAT, "MG-OMS-BUNDLE");
    }
  }
  SECTION("by an untrusted key") {
    TempDir other_dir;
    Keys other(other_dir, "other");
    REQUIRE(::unlink((d.model + "/model.sig").c_str()) == 0);
    REQUIRE(Run("sign -q --detached --key " + other.priv + " " + d.model) == 0);
    Model m(d.model, ring, MG_MODE_EAGER);
    ExpectError(m, MG_ERR_VERIFY, "MG-OMS-UNTRUSTED");
  }
  SECTION("a symlink where the bundle belongs") {
    const std::string real = d.dir / "real.sig";
    REQUIRE(::rename((d.model + "/model.sig").c_str(), real.c_str()) == 0);
    REQUIRE(::symlink(real.c_str(), (d.model + "/model.sig").c_str()) == 0);
    Model m(d.model, ring, MG_MODE_EAGER);
    CHECK(m.status != MG_OK);
    CHECK(std::string(m.err.id) == "MG-OMS-BUNDLE");
  }
}

TEST_CASE("api: one file with FILE.sig, and a detached sharded set with its index") {
  TempDir dir;
  Keys keys(dir);
  Ring ring({keys.pub});
  const std::string file = dir / "solo.safetensors";
  WriteFile(file, Safetensors(kTensors));
  REQUIRE(Run("sign -q --detached --key " + keys.priv + " " + file) == 0);
  for (mg_mode mode : kAllModes) {
    Model m(file, ring, mode);
    CAPTURE(Describe(m.err));
    REQUIRE(m.ok());
    ExpectTensors(m.m, kTensors);
  }
  ShardedSet set(0, false);
  REQUIRE(Run("sign -q --detached --key " + set.keys.priv + " " + set.model) == 0);
  Ring set_ring({set.keys.pub});
  for (const std::string& path : {set.model, set.model + "/model.safetensors.index.json"}) {
    for (mg_mode mode : kAllModes) {
      CAPTURE(path, ModeName(mode));
      Model m(path, set_ring, mode);
      CAPTURE(Describe(m.err));
      REQUIRE(m.ok());
      ExpectTensors(m.m, set.all());
    }
  }
  // The index is covered too: an edit to it is a changed file.
  std::string index = ReadText(set.model + "/model.safetensors.index.json");
  index.insert(index.size() - 1, " ");
  WriteText(set.model + "/model.safetensors.index.json", index);
  Model m(set.model, set_ring, MG_MODE_LAZY);
  ExpectError(m, MG_ERR_VERIFY, "MG-OMS-FILE-CHANGED");
  CHECK(std::string(m.err.file) == set.model + "/model.safetensors.index.json");
}

namespace {

// Output is what the modelgate program writes on stdout for `args`, and its
// exit status.
std::pair<std::string, int> Output(const std::string& args) {
  const std::string cmd = std::string(MG_MODELGATE_BIN) + " " + args + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int rc = ::pclose(p);
  REQUIRE(WIFEXITED(rc));
  return {out, WEXITSTATUS(rc)};
}

struct Scan {
  char* report = nullptr;
  int verdict = -1;
  mg_error err{};
  mg_status status;
  Scan(const std::string& path, const char* policy) {
    status = mg_scan(path.c_str(), policy, &report, &verdict, &err);
  }
  ~Scan() { mg_string_free(report); }
};

}  // namespace

TEST_CASE("api: mg_scan writes the program's JSON report and its verdict") {
  SignedFile f;
  const std::string evil = f.dir / "evil.safetensors";
  Bytes bytes = Safetensors(kTensors);
  bytes.push_back(0x42);  // trailing bytes no tensor covers
  WriteFile(evil, bytes);
  const std::string policy = f.dir / "policy.yaml";
  WriteText(policy, "apiVersion: modelgate/v1\nkind: Policy\nsignatures:\n  required: true\n"
                    "  keys:\n    - name: mine\n      file: key.pub\n");
  struct Case {
    std::string path;
    const char* policy;
    int verdict;
  };
  const std::vector<Case> cases = {{f.path, nullptr, 0},     {evil, nullptr, 1},
                                   {f.dir.path, nullptr, 1}, {f.path, policy.c_str(), 0},
                                   {evil, policy.c_str(), 1}};
  for (const Case& c : cases) {
    CAPTURE(c.path, c.policy != nullptr);
    Scan s(c.path, c.policy);
    CAPTURE(Describe(s.err));
    REQUIRE(s.status == MG_OK);
    CHECK(s.verdict == c.verdict);
    REQUIRE(s.report != nullptr);
    const auto [want, rc] =
        Output(c.policy ? "check --policy " + std::string(c.policy) + " -f json " + c.path
                        : "scan -f json " + c.path);
    CHECK(rc == c.verdict);
    CHECK(std::string(s.report) == want);
    const json doc = json::parse(s.report);
    CHECK(doc["schema"] == "modelgate.report/v1");
    CHECK((doc["summary"]["rejected"].get<int>() > 0) == (c.verdict == 1));
  }
  // The signed file under the policy carries its signature in the report.
  Scan signed_scan(f.path, policy.c_str());
  REQUIRE(signed_scan.status == MG_OK);
  CHECK(json::parse(signed_scan.report)["files"][0]["signature"]["status"] == "valid");
}

TEST_CASE("api: mg_scan errors make no report") {
  TempDir dir;
  Scan missing(dir / "missing", nullptr);
  CHECK(missing.status == MG_ERR_IO);
  CHECK(std::string(missing.err.id) == "MG-IO-OPEN");
  CHECK(std::string(missing.err.file) == dir / "missing");
  CHECK(missing.report == nullptr);
  CHECK(missing.verdict == 2);
  WriteFile(dir / "a.safetensors", Safetensors(kTensors));
  WriteText(dir / "bad.yaml", "apiVersion: modelgate/v1\nkind: Nope\n");
  Scan bad_policy(dir / "a.safetensors", (dir / "bad.yaml").c_str());
  CHECK(bad_policy.status == MG_ERR_ARGUMENT);
  CHECK(std::string(bad_policy.err.id) == "MG-API-POLICY");
  CHECK(std::string(bad_policy.err.message).find("policy") != std::string::npos);
  CHECK(bad_policy.report == nullptr);
  Scan no_policy(dir / "a.safetensors", (dir / "none.yaml").c_str());
  CHECK(no_policy.status == MG_ERR_ARGUMENT);
  char* report = reinterpret_cast<char*>(1);
  int verdict = 0;
  mg_error err;
  CHECK(mg_scan(nullptr, nullptr, &report, &verdict, &err) == MG_ERR_ARGUMENT);
  CHECK(report == nullptr);
  CHECK(mg_scan((dir / "a.safetensors").c_str(), nullptr, nullptr, &verdict, &err) == MG_ERR_ARGUMENT);
  CHECK(mg_scan((dir / "a.safetensors").c_str(), nullptr, &report, nullptr, &err) == MG_ERR_ARGUMENT);
  mg_string_free(nullptr);
}

TEST_CASE("api: lazy tensors checked from many threads: one outcome per tensor") {
  SignedFile f;
  Ring ring({f.keys.pub});
  Bytes bad = f.bytes;
  bad[f.DataOffset("layer.1.weight") + 1] ^= 0x01;
  WriteFile(f.path, bad);
  Model m(f.path, ring, MG_MODE_LAZY);
  REQUIRE(m.ok());
  const size_t n = mg_model_tensor_count(m.m);
  std::atomic<int> ok{0}, failed{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (size_t i = 0; i < n; ++i) {
        mg_tensor_info info;
        mg_error err;
        if (mg_model_tensor_info(m.m, i, &info, &err) != MG_OK) {
          ++wrong;
          continue;
        }
        const void* data = nullptr;
        uint64_t len = 0;
        const mg_status s = mg_model_tensor_data(m.m, i, &data, &len, &err);
        const bool tampered = std::string(info.name) == "layer.1.weight";
        if (s == MG_OK && !tampered && len == info.byte_length) {
          ++ok;
        } else if (s == MG_ERR_VERIFY && tampered &&
                   std::string(err.id) == "MG-SIG-TENSOR-MISMATCH") {
          ++failed;
        } else {
          ++wrong;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
  CHECK(failed == 8);
  CHECK(ok == static_cast<int>(8 * (n - 1)));
}

TEST_CASE("api: model_signing 1.1.1 bundles (files and shards methods) load the set") {
  const std::string oms = MG_OMS_FIXTURES;
  TempDir dir;
  const std::string model = dir / "model";
  REQUIRE(Run("--version") == 0);  // the program runs; cp is the shell's
  REQUIRE(std::system(("cp -r " + oms + "/model " + model).c_str()) == 0);
  const std::string shard1 = model + "/model-00001-of-00002.safetensors";
  struct Case {
    const char* sig;
    const char* key;
  };
  for (const Case& c : {Case{"files-p256.sig", "p256"}, Case{"files-p384.sig", "p384"},
                        Case{"files-p521.sig", "p521"}, Case{"shards40-p256.sig", "p256"}}) {
    Ring ring({oms + "/keys/" + c.key + ".pub.pem"});
    const std::string sig = oms + "/model_signing_1.1.1/" + c.sig;
    for (mg_mode mode : kAllModes) {
      CAPTURE(c.sig, ModeName(mode));
      Model m(model, ring, mode, 0, MG_SIGNATURE_DETACHED, sig.c_str());
      CAPTURE(Describe(m.err));
      REQUIRE(m.ok());
      CHECK(mg_model_file_count(m.m) == 2);
      CHECK(mg_model_tensor_count(m.m) > 0);
      CHECK(mg_model_check_all(m.m, &m.err) == MG_OK);
      json v = json::parse(mg_model_verification_json(m.m));
      CHECK(v["kind"] == "detached");
      CHECK(v["files"][0]["sha256"].is_null() == (std::string(c.sig).rfind("shards", 0) == 0));
    }
  }
  // One file signed alone: its resource is ".".
  {
    Ring ring({oms + "/keys/p256.pub.pem"});
    const std::string sig = oms + "/model_signing_1.1.1/single-file-p256.sig";
    Model m(shard1, ring, MG_MODE_EAGER, 0, MG_SIGNATURE_ANY, sig.c_str());
    CAPTURE(Describe(m.err));
    CHECK(m.ok());
  }
  // Shards method: the changed 40-byte shard is named by its offset.
  Bytes bad = ReadFile(shard1);
  bad[130] ^= 0x01;
  WriteFile(shard1, bad);
  Ring ring({oms + "/keys/p256.pub.pem"});
  const std::string sig = oms + "/model_signing_1.1.1/shards40-p256.sig";
  for (mg_mode mode : {MG_MODE_EAGER, MG_MODE_COPY}) {
    Model m(model, ring, mode, 0, MG_SIGNATURE_DETACHED, sig.c_str());
    ExpectError(m, MG_ERR_VERIFY, "MG-OMS-FILE-CHANGED");
    CHECK(m.err.offset == 120);
    CHECK(std::string(m.err.file) == shard1);
  }
}

TEST_CASE("api: at most 4096 safetensors files: 4096 are opened, 4097 refused first") {
  TempDir dir;
  Keys keys(dir);
  Ring ring({keys.pub});
  const std::string model = dir / "m";
  REQUIRE(::mkdir(model.c_str(), 0755) == 0);
  const Bytes unsigned_file = Safetensors({{"x", "U8", {1}, 1, 1}});
  char name[32];
  for (int i = 0; i < 4096; ++i) {
    std::snprintf(name, sizeof name, "/f%05d.safetensors", i);
    WriteFile(model + name, unsigned_file);
  }
  // At the limit the files are opened (the first is unsigned).
  Model at(model, ring, MG_MODE_EAGER);
  ExpectError(at, MG_ERR_VERIFY, "MG-SIG-MISSING");
  WriteFile(model + "/f04096.safetensors", unsigned_file);
  Model over(model, ring, MG_MODE_EAGER);
  ExpectError(over, MG_ERR_FORMAT, "MG-API-LAYOUT");
  CHECK(std::string(over.err.message).find("4096") != std::string::npos);
}

TEST_CASE("api: an index is read only up to 64 MiB, and a directory holds one") {
  TempDir dir;
  Keys keys(dir);
  Ring ring({keys.pub});
  const std::string index = dir / "model.safetensors.index.json";
  // Sparse files: nothing is written, the size is what is judged.
  for (const auto& [size, id] : {std::pair<off_t, const char*>{off_t{64} << 20, "MG-SET-INDEX"},
                                 std::pair<off_t, const char*>{(off_t{64} << 20) + 1, "MG-SET-LIMIT"}}) {
    CAPTURE(size);
    WriteText(index, "");
    REQUIRE(::truncate(index.c_str(), size) == 0);
    Model m(index, ring, MG_MODE_EAGER);
    ExpectError(m, MG_ERR_FORMAT, id);
  }
  WriteText(index, "{}");
  WriteText(dir / "other.safetensors.index.json", "{}");
  Model two(dir.path, ring, MG_MODE_EAGER);
  ExpectError(two, MG_ERR_FORMAT, "MG-API-LAYOUT");
  CHECK(std::string(two.err.message).find("2 shard indexes") != std::string::npos);
}

TEST_CASE("api: a FIFO or a directory named *.safetensors is refused without blocking") {
  SignedFile f;
  Ring ring({f.keys.pub});
  const std::string fifo = f.dir / "pipe.safetensors";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  Model as_file(fifo, ring, MG_MODE_EAGER);
  ExpectError(as_file, MG_ERR_IO, "MG-IO-NOT-REGULAR");
  Model in_dir(f.dir.path, ring, MG_MODE_LAZY);  // model.safetensors and the FIFO
  ExpectError(in_dir, MG_ERR_IO, "MG-IO-NOT-REGULAR");
  CHECK(std::string(in_dir.err.file) == fifo);
  REQUIRE(::unlink(fifo.c_str()) == 0);
  REQUIRE(::mkdir((f.dir / "sub.safetensors").c_str(), 0755) == 0);
  Model dir_entry(f.dir.path, ring, MG_MODE_EAGER);
  CHECK(dir_entry.status == MG_ERR_IO);
  CHECK(std::string(dir_entry.err.file) == f.dir / "sub.safetensors");
}

TEST_CASE("api: mg_scan(\"-\") scans the file named -, not standard input") {
  TempDir dir;
  WriteFile(dir / "-", Safetensors(kTensors));
  char cwd[4096];
  REQUIRE(::getcwd(cwd, sizeof cwd) != nullptr);
  REQUIRE(::chdir(dir.path.c_str()) == 0);
  Scan s("-", nullptr);
  REQUIRE(::chdir(cwd) == 0);
  CAPTURE(Describe(s.err));
  REQUIRE(s.status == MG_OK);
  CHECK(s.verdict == 0);
  const json doc = json::parse(s.report);
  CHECK(doc["files"][0]["path"] == "./-");
  CHECK(doc["files"][0]["format"] == "safetensors");
}
