// The verified loader (issue 4 point 4): OpenVerified in eager, lazy and
// copy mode hands out views only after verification, refuses unsigned,
// untrusted and tampered files and symlinks, and notices a file that changes
// between verification and mapping.
#include <catch2/catch.hpp>
#include <sys/time.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "signer_test_util.h"

namespace core = modelgate::core;
namespace signer = modelgate::signer;
using namespace sigtest;
using signer::LoadMode;

namespace {

constexpr LoadMode kAllModes[] = {LoadMode::kEager, LoadMode::kLazy, LoadMode::kCopy};

// Five tensors: two F32 matrices larger than the 4 KiB hash buffer the
// tests use (so reads and hashes go in pieces), an I64 vector, a scalar and
// a zero-size tensor.
struct Layout {
  const char* name;
  const char* dtype;
  std::vector<uint64_t> shape;
  size_t bytes;
};
const std::vector<Layout> kLayout = {
    {"embed.weight", "F32", {64, 40}, 64 * 40 * 4},
    {"head.weight", "F32", {40, 33}, 40 * 33 * 4},
    {"pos.ids", "I64", {7}, 56},
    {"scale", "F32", {}, 4},
    {"empty", "F32", {0, 3}, 0},
};

Bytes UnsignedModel() {
  ojson h = ojson::object();
  Bytes data;
  for (const Layout& l : kLayout) {
    const size_t begin = data.size();
    for (size_t i = 0; i < l.bytes; ++i) {
      data.push_back(static_cast<uint8_t>((i * 131 + begin * 7 + std::strlen(l.name)) & 0xff));
    }
    h[l.name] = {{"dtype", l.dtype}, {"shape", l.shape}, {"data_offsets", {begin, data.size()}}};
  }
  h["__metadata__"] = {{"format", "pt"}};
  return Assemble(h.dump(), data);
}

struct Fixture {
  TempDir dir;
  signer::PrivateKey key = TestKey();
  signer::PrivateKey other = TestKey(100);
  std::vector<signer::PublicKey> trusted = {key.public_key()};
  std::string path = dir / "model.safetensors";
  Bytes signed_bytes;

  Fixture() {
    WriteBytes(path, UnsignedModel());
    signer::SignOptions opt;
    opt.created = 1764374400;
    auto r = signer::SignFile(path, key, opt);
    REQUIRE(r.ok());
    signed_bytes = ReadBytes(path);
  }

  static signer::LoadOptions Options(LoadMode mode) {
    signer::LoadOptions o;
    o.mode = mode;
    o.verify.hash.buffer_bytes = 4096;
    o.verify.hash.threads = 2;
    return o;
  }

  core::Result<signer::VerifiedModel> Open(LoadMode mode) {
    return signer::OpenVerified(path, trusted, Options(mode));
  }

  // Offset in the file of the first data byte of `name`.
  size_t DataOffset(const std::string& name) const {
    ojson h = ojson::parse(HeaderText(signed_bytes));
    return 8 + HeaderLen(signed_bytes) + h[name]["data_offsets"][0].get<size_t>();
  }

  // PwriteInPlace writes into the same inode (no new file, no rename).
  void PwriteInPlace(size_t offset, uint8_t value) const {
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::pwrite(fd, &value, 1, static_cast<off_t>(offset)) == 1);
    ::close(fd);
  }

  // Backdate sets the file's mtime an hour back, so a later write always
  // moves it (timestamps have clock-tick granularity).
  void Backdate() const {
    timeval times[2];
    ::gettimeofday(&times[0], nullptr);
    times[0].tv_sec -= 3600;
    times[1] = times[0];
    REQUIRE(::utimes(path.c_str(), times) == 0);
  }
};

void ExpectError(const core::Result<signer::VerifiedModel>& r, core::Code code,
                 const std::string& needle = "") {
  REQUIRE_FALSE(r.ok());
  CAPTURE(r.error().message);
  CHECK(core::FindingId(r.error().code) == core::FindingId(code));
  CHECK(r.error().message.find(needle) != std::string::npos);
}

// ExpectViewsEqual: every view is the file's bytes for that tensor, with
// the header's dtype and shape.
void ExpectViewsEqual(const signer::VerifiedModel& m, const Bytes& file) {
  ojson h = ojson::parse(HeaderText(file));
  const size_t data_start = 8 + HeaderLen(file);
  REQUIRE(m.tensor_count() == kLayout.size());
  for (const Layout& l : kLayout) {
    CAPTURE(l.name);
    auto v = m.Tensor(std::string_view(l.name));
    REQUIRE(v.ok());
    CHECK(v.value().name == l.name);
    CHECK(core::DtypeName(v.value().dtype) == l.dtype);
    CHECK(std::vector<uint64_t>(v.value().shape.begin(), v.value().shape.end()) == l.shape);
    const size_t begin = data_start + h[l.name]["data_offsets"][0].get<size_t>();
    REQUIRE(v.value().bytes.size() == l.bytes);
    CHECK(std::equal(v.value().bytes.begin(), v.value().bytes.end(),
                     file.begin() + static_cast<std::ptrdiff_t>(begin)));
  }
}

}  // namespace

TEST_CASE("loader: a valid signed file loads in every mode, views equal the bytes",
          "[signer][loader]") {
  Fixture f;
  for (LoadMode mode : kAllModes) {
    CAPTURE(signer::LoadModeName(mode));
    auto m = f.Open(mode);
    REQUIRE(m.ok());
    CHECK(m.value().mode() == mode);
    CHECK(m.value().verification().valid());
    REQUIRE(m.value().verification().verified_kids.size() == 1);
    CHECK(m.value().verification().verified_kids[0] == f.key.public_key().kid_hex());
    ExpectViewsEqual(m.value(), f.signed_bytes);
    CHECK(m.value().CheckAll().ok());
    // Views by index follow data order, as header().tensors does.
    for (size_t i = 0; i < m.value().tensor_count(); ++i) {
      auto v = m.value().Tensor(i);
      REQUIRE(v.ok());
      CHECK(v.value().name == m.value().header().tensors[i].name);
    }
  }
}

TEST_CASE("loader: MAP_PRIVATE mappings load the same views", "[signer][loader]") {
  Fixture f;
  for (LoadMode mode : {LoadMode::kEager, LoadMode::kLazy}) {
    auto o = Fixture::Options(mode);
    o.sharing = signer::MapSharing::kPrivate;
    auto m = signer::OpenVerified(f.path, f.trusted, o);
    REQUIRE(m.ok());
    ExpectViewsEqual(m.value(), f.signed_bytes);
  }
}

TEST_CASE("loader: default options (eager, all cores, 1 MiB buffer) load", "[signer][loader]") {
  Fixture f;
  auto m = signer::OpenVerified(f.path, f.trusted);
  REQUIRE(m.ok());
  CHECK(m.value().mode() == LoadMode::kEager);
  ExpectViewsEqual(m.value(), f.signed_bytes);
}

TEST_CASE("loader: a flipped data byte fails eager and copy at open", "[signer][loader]") {
  Fixture f;
  for (const char* name : {"embed.weight", "head.weight", "pos.ids", "scale"}) {
    for (LoadMode mode : {LoadMode::kEager, LoadMode::kCopy}) {
      CAPTURE(name, signer::LoadModeName(mode));
      Bytes bad = f.signed_bytes;
      bad[f.DataOffset(name) + 3] ^= 0x40;
      WriteBytes(f.path, bad);
      ExpectError(f.Open(mode), core::Code::kSigTensorMismatch, "\"" + std::string(name) + "\"");
    }
  }
}

TEST_CASE("loader: lazy fails only the tampered tensor, on its access, every time",
          "[signer][loader]") {
  Fixture f;
  Bytes bad = f.signed_bytes;
  bad[f.DataOffset("head.weight") + 100] ^= 0x01;
  WriteBytes(f.path, bad);
  auto m = f.Open(LoadMode::kLazy);
  REQUIRE(m.ok());  // the header signature is fine
  for (const char* name : {"embed.weight", "pos.ids", "scale", "empty"}) {
    CAPTURE(name);
    CHECK(m.value().Tensor(std::string_view(name)).ok());
  }
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto v = m.value().Tensor(std::string_view("head.weight"));
    REQUIRE_FALSE(v.ok());
    CHECK(v.error().code == core::Code::kSigTensorMismatch);
    CHECK(v.error().offset == f.DataOffset("head.weight"));
    CHECK(v.error().message.find("\"head.weight\"") != std::string::npos);
  }
  auto all = m.value().CheckAll();
  REQUIRE_FALSE(all.ok());
  CHECK(all.error().code == core::Code::kSigTensorMismatch);
  // Still fine afterwards.
  CHECK(m.value().Tensor(std::string_view("embed.weight")).ok());
}

TEST_CASE("loader: lazy access is thread-safe, all threads see one outcome per tensor",
          "[signer][loader]") {
  Fixture f;
  Bytes bad = f.signed_bytes;
  bad[f.DataOffset("pos.ids")] ^= 0x80;
  WriteBytes(f.path, bad);
  auto m = f.Open(LoadMode::kLazy);
  REQUIRE(m.ok());
  const signer::VerifiedModel& model = m.value();
  std::atomic<int> ok_count{0}, mismatch_count{0}, other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < model.tensor_count(); ++k) {
        const size_t i = (k + static_cast<size_t>(t)) % model.tensor_count();
        auto v = model.Tensor(i);
        if (v.ok()) {
          ++ok_count;
        } else if (v.error().code == core::Code::kSigTensorMismatch) {
          ++mismatch_count;
        } else {
          ++other;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(mismatch_count == 8);  // pos.ids, once per thread
  CHECK(ok_count == 8 * 4);
  CHECK(other == 0);
}

TEST_CASE("loader: unsigned, untrusted and forged files are refused in every mode",
          "[signer][loader]") {
  Fixture f;
  const Bytes unsigned_bytes = UnsignedModel();
  const std::vector<signer::PublicKey> wrong = {f.other.public_key()};
  for (LoadMode mode : kAllModes) {
    CAPTURE(signer::LoadModeName(mode));
    WriteBytes(f.path, f.signed_bytes);
    ExpectError(signer::OpenVerified(f.path, wrong, Fixture::Options(mode)),
                core::Code::kSigUntrusted, f.key.public_key().kid_hex());
    ExpectError(signer::OpenVerified(f.path, {}, Fixture::Options(mode)),
                core::Code::kSigUntrusted);

    WriteBytes(f.path, unsigned_bytes);
    ExpectError(f.Open(mode), core::Code::kSigMissing);

    // A header edit the signature covers (a shape) fails before any data.
    WriteBytes(f.path, EditHeader(f.signed_bytes, [](ojson& h) {
                 h["embed.weight"]["shape"] = {40, 64};
               }));
    ExpectError(f.Open(mode), core::Code::kSigBadSignature);

    // Not a safetensors file at all.
    WriteBytes(f.path, Bytes{1, 2, 3});
    auto r = f.Open(mode);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().code == core::Code::kStTruncated);
  }
}

TEST_CASE("loader: a symlink is refused unless follow_symlink is set", "[signer][loader]") {
  Fixture f;
  const std::string link = f.dir / "link.safetensors";
  REQUIRE(::symlink(f.path.c_str(), link.c_str()) == 0);
  for (LoadMode mode : kAllModes) {
    CAPTURE(signer::LoadModeName(mode));
    ExpectError(signer::OpenVerified(link, f.trusted, Fixture::Options(mode)),
                core::Code::kIoNotRegular, "symbolic link");
    auto o = Fixture::Options(mode);
    o.verify.follow_symlink = true;
    CHECK(signer::OpenVerified(link, f.trusted, o).ok());
  }
  ExpectError(signer::OpenVerified(f.dir.path(), f.trusted), core::Code::kIoNotRegular);
  ExpectError(signer::OpenVerified(f.dir / "absent", f.trusted), core::Code::kIoOpen);
}

TEST_CASE("loader: a file renamed over the path between verify and map is detected",
          "[signer][loader]") {
  Fixture f;
  // The replacement is itself a valid signed file with other tensor bytes:
  // the swap must not go unnoticed even though it would verify on its own.
  Bytes replacement_src = UnsignedModel();
  replacement_src[replacement_src.size() - 5] ^= 0xff;
  const std::string other_path = f.dir / "other.safetensors";
  WriteBytes(other_path, replacement_src);
  signer::SignOptions opt;
  opt.created = 1764374400;
  REQUIRE(signer::SignFile(other_path, f.key, opt).ok());
  const Bytes replacement = ReadBytes(other_path);
  for (LoadMode mode : kAllModes) {
    CAPTURE(signer::LoadModeName(mode));
    WriteBytes(f.path, f.signed_bytes);
    const std::string staged = f.dir / "staged";
    WriteBytes(staged, replacement);
    auto o = Fixture::Options(mode);
    bool called = false;
    o.before_map_for_testing = [&](const std::string& p) {
      called = true;
      REQUIRE(::rename(staged.c_str(), p.c_str()) == 0);
    };
    // The verified inode lost its name: its ctime moved (and the mapping, had
    // it been returned, would still show the verified inode, not `staged`).
    ExpectError(signer::OpenVerified(f.path, f.trusted, o), core::Code::kIoChanged, "ctime");
    CHECK(called);
  }
}

TEST_CASE("loader: an in-place write between verify and map is detected", "[signer][loader]") {
  Fixture f;
  for (LoadMode mode : kAllModes) {
    CAPTURE(signer::LoadModeName(mode));
    WriteBytes(f.path, f.signed_bytes);
    f.Backdate();
    auto o = Fixture::Options(mode);
    o.before_map_for_testing = [&](const std::string&) {
      f.PwriteInPlace(f.DataOffset("embed.weight"), 0xAA);
    };
    ExpectError(signer::OpenVerified(f.path, f.trusted, o), core::Code::kIoChanged, "mtime");
  }
  // Truncation in the window: size differs.
  WriteBytes(f.path, f.signed_bytes);
  auto o = Fixture::Options(LoadMode::kEager);
  o.before_map_for_testing = [&](const std::string& p) {
    REQUIRE(::truncate(p.c_str(), static_cast<off_t>(f.signed_bytes.size() - 4)) == 0);
  };
  ExpectError(signer::OpenVerified(f.path, f.trusted, o), core::Code::kIoChanged, "size");
}

TEST_CASE("loader: after open, a path swap does not reach eager or copy views",
          "[signer][loader]") {
  Fixture f;
  for (LoadMode mode : {LoadMode::kEager, LoadMode::kCopy}) {
    CAPTURE(signer::LoadModeName(mode));
    WriteBytes(f.path, f.signed_bytes);
    auto m = f.Open(mode);
    REQUIRE(m.ok());
    const std::string staged = f.dir / "staged";
    Bytes evil = f.signed_bytes;
    for (size_t i = 8 + HeaderLen(evil); i < evil.size(); ++i) evil[i] = 0xEE;
    WriteBytes(staged, evil);
    REQUIRE(::rename(staged.c_str(), f.path.c_str()) == 0);
    ExpectViewsEqual(m.value(), f.signed_bytes);  // the verified inode, not the path
  }
}

TEST_CASE("loader: lazy notices a write to the inode before a tensor's first access",
          "[signer][loader]") {
  Fixture f;
  f.Backdate();
  auto m = f.Open(LoadMode::kLazy);
  REQUIRE(m.ok());
  REQUIRE(m.value().Tensor(std::string_view("scale")).ok());  // checked before the write
  // Same byte value: the content still matches, but the inode was written.
  f.PwriteInPlace(f.DataOffset("head.weight"), f.signed_bytes[f.DataOffset("head.weight")]);
  auto v = m.value().Tensor(std::string_view("embed.weight"));
  REQUIRE_FALSE(v.ok());
  CHECK(v.error().code == core::Code::kIoChanged);
  CHECK(m.value().Tensor(std::string_view("scale")).ok());  // its check already passed
}

TEST_CASE("loader: copy views are private: later writes and truncation don't reach them",
          "[signer][loader]") {
  Fixture f;
  auto m = f.Open(LoadMode::kCopy);
  REQUIRE(m.ok());
  f.PwriteInPlace(f.DataOffset("embed.weight"), 0x00);
  f.PwriteInPlace(f.DataOffset("embed.weight") + 1, 0xFF);
  REQUIRE(::truncate(f.path.c_str(), static_cast<off_t>(f.DataOffset("pos.ids"))) == 0);
  ExpectViewsEqual(m.value(), f.signed_bytes);  // no SIGBUS, no change
}

TEST_CASE("loader: unknown names and indexes are caller errors", "[signer][loader]") {
  Fixture f;
  for (LoadMode mode : kAllModes) {
    auto m = f.Open(mode);
    REQUIRE(m.ok());
    CHECK_FALSE(m.value().Find("nope").has_value());
    REQUIRE(m.value().Find("scale").has_value());
    auto by_name = m.value().Tensor(std::string_view("nope"));
    REQUIRE_FALSE(by_name.ok());
    CHECK(by_name.error().code == core::Code::kSigOptions);
    auto by_index = m.value().Tensor(m.value().tensor_count());
    REQUIRE_FALSE(by_index.ok());
    CHECK(by_index.error().code == core::Code::kSigOptions);
  }
}

TEST_CASE("loader: a moved-to model keeps its views valid", "[signer][loader]") {
  Fixture f;
  for (LoadMode mode : kAllModes) {
    auto m = f.Open(mode);
    REQUIRE(m.ok());
    signer::VerifiedModel moved = std::move(m).value();
    ExpectViewsEqual(moved, f.signed_bytes);
  }
}

TEST_CASE("loader: a file with no tensors loads (nothing to map but the header)",
          "[signer][loader]") {
  Fixture f;
  WriteBytes(f.path, Assemble(R"({"__metadata__":{"k":"v"}})", {}));
  signer::SignOptions opt;
  opt.created = 1764374400;
  REQUIRE(signer::SignFile(f.path, f.key, opt).ok());
  for (LoadMode mode : kAllModes) {
    auto m = f.Open(mode);
    REQUIRE(m.ok());
    CHECK(m.value().tensor_count() == 0);
    CHECK(m.value().CheckAll().ok());
  }
}

TEST_CASE("loader: writable views can be written in every mode, the file is unchanged",
          "[signer][loader]") {
  Fixture f;
  for (LoadMode mode : kAllModes) {
    CAPTURE(signer::LoadModeName(mode));
    auto o = Fixture::Options(mode);
    o.writable = true;
    auto m = signer::OpenVerified(f.path, f.trusted, o);
    REQUIRE(m.ok());
    ExpectViewsEqual(m.value(), f.signed_bytes);
    auto v = m.value().Tensor(std::string_view("embed.weight"));
    REQUIRE(v.ok());
    // Would fault on a PROT_READ mapping or a sealed copy.
    auto* bytes = const_cast<uint8_t*>(v.value().bytes.data());
    std::memset(bytes, 0xAB, v.value().bytes.size());
    CHECK(m.value().Tensor(std::string_view("embed.weight")).value().bytes[17] == 0xAB);
    CHECK(ReadBytes(f.path) == f.signed_bytes);
  }
}

namespace {

// WholeFile is the detached expectation of a file signed whole: one range
// [0, size) with the SHA-256 of `bytes`.
std::vector<signer::SignedRange> WholeFile(const Bytes& bytes) {
  return {signer::SignedRange{core::ByteRange{0, bytes.size()}, core::Sha256(bytes)}};
}

// Shards is the expectation of `bytes` cut in `piece`-byte ranges.
std::vector<signer::SignedRange> Shards(const Bytes& bytes, size_t piece) {
  std::vector<signer::SignedRange> out;
  for (size_t at = 0; at < bytes.size(); at += piece) {
    const size_t n = std::min(piece, bytes.size() - at);
    out.push_back({core::ByteRange{at, n},
                   core::Sha256(std::span<const uint8_t>(bytes.data() + at, n))});
  }
  return out;
}

core::Result<signer::VerifiedModel> OpenDetached(const Fixture& f, LoadMode mode,
                                                 std::vector<signer::SignedRange> ranges) {
  auto o = Fixture::Options(mode);
  o.detached = std::move(ranges);
  return signer::OpenVerified(f.path, {}, o);  // no key: the ranges are the trust
}

}  // namespace

TEST_CASE("loader: detached whole-file and shard ranges load in every mode", "[signer][loader]") {
  Fixture f;
  for (size_t piece : {size_t{0}, size_t{1000}, size_t{4096}}) {
    for (LoadMode mode : kAllModes) {
      CAPTURE(piece, signer::LoadModeName(mode));
      auto m = OpenDetached(f, mode, piece == 0 ? WholeFile(f.signed_bytes)
                                                : Shards(f.signed_bytes, piece));
      REQUIRE(m.ok());
      CHECK(m.value().verification().valid());
      ExpectViewsEqual(m.value(), f.signed_bytes);
      CHECK(m.value().CheckAll().ok());
    }
  }
}

TEST_CASE("loader: detached, a changed byte anywhere fails eager and copy at open",
          "[signer][loader]") {
  Fixture f;
  const Bytes good = f.signed_bytes;
  // A data byte, and the header's last byte (no tensor covers it; a
  // changed header is reported as changed bytes, before any parse).
  for (size_t offset : {f.DataOffset("pos.ids") + 2, size_t{8} + HeaderLen(good) - 1}) {
    Bytes bad = good;
    bad[offset] ^= 1;
    WriteBytes(f.path, bad);
    for (LoadMode mode : {LoadMode::kEager, LoadMode::kCopy}) {
      CAPTURE(offset, signer::LoadModeName(mode));
      ExpectError(OpenDetached(f, mode, WholeFile(good)), core::Code::kSigTensorMismatch,
                  "bundle's digest");
      auto shards = OpenDetached(f, mode, Shards(good, 1000));
      ExpectError(shards, core::Code::kSigTensorMismatch, "bundle's digest");
      CHECK(shards.error().offset == offset / 1000 * 1000);
    }
  }
}

TEST_CASE("loader: detached lazy fails on the first access to any tensor, every time",
          "[signer][loader]") {
  Fixture f;
  const Bytes good = f.signed_bytes;
  Bytes bad = good;
  bad[f.DataOffset("head.weight") + 5] ^= 0x10;
  WriteBytes(f.path, bad);
  auto m = OpenDetached(f, LoadMode::kLazy, WholeFile(good));
  REQUIRE(m.ok());  // the header parsed; nothing hashed yet
  for (int round = 0; round < 2; ++round) {
    for (const char* name : {"scale", "embed.weight", "empty"}) {
      auto v = m.value().Tensor(std::string_view(name));
      REQUIRE_FALSE(v.ok());
      CHECK(v.error().code == core::Code::kSigTensorMismatch);
    }
    CHECK(m.value().CheckAll().error().code == core::Code::kSigTensorMismatch);
  }
}

TEST_CASE("loader: detached ranges must tile the whole file", "[signer][loader]") {
  Fixture f;
  const Bytes& good = f.signed_bytes;
  auto short_by_one = WholeFile(good);
  short_by_one[0].range.size_bytes -= 1;
  auto gap = Shards(good, 1000);
  gap.erase(gap.begin() + 1);
  auto past_end = WholeFile(good);
  past_end[0].range.size_bytes += 1;
  auto overflow = Shards(good, 1000);
  overflow[1].range.size_bytes = UINT64_MAX;
  for (auto* ranges : {&short_by_one, &gap, &past_end, &overflow}) {
    for (LoadMode mode : kAllModes) {
      ExpectError(OpenDetached(f, mode, *ranges), core::Code::kSigOptions, "detached ranges");
    }
  }
  for (LoadMode mode : kAllModes) {
    ExpectError(OpenDetached(f, mode, {}), core::Code::kSigOptions, "cover 0 bytes");
  }
}

TEST_CASE("loader: OpenVerifiedFile loads from a descriptor the caller opened",
          "[signer][loader]") {
  Fixture f;
  for (LoadMode mode : kAllModes) {
    auto opened = core::OpenRegularFile(f.path, false);
    REQUIRE(opened.ok());
    auto m = signer::OpenVerifiedFile(std::move(opened).value(), f.path, f.trusted,
                                      Fixture::Options(mode));
    REQUIRE(m.ok());
    ExpectViewsEqual(m.value(), f.signed_bytes);
  }
}
