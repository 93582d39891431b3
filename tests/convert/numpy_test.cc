// Convert() on .npy and .npz files built here byte by byte (the round trips
// against Debian's numpy and joblib are numpy_roundtrip_test.py): the
// ConvertLimits that apply to numpy arrays, each at N and N+1, and the
// bytes written for a big-endian Fortran-order array, stored and deflated.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "modelgate/convert.h"

namespace convert = modelgate::convert;
namespace core = modelgate::core;

namespace {

using Bytes = std::vector<uint8_t>;

void Le(Bytes& b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// Npy is a version 1.0 .npy file as np.save writes it (header padded to 64).
Bytes Npy(const std::string& descr, bool fortran, const std::vector<uint64_t>& shape, const Bytes& body) {
  std::string dims;  // "(2, 3)", but "(2,)" and "()"
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string h = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                  ", 'shape': (" + dims + "), }";
  while ((10 + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  Bytes out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  Le(out, h.size(), 2);
  out.insert(out.end(), h.begin(), h.end());
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

Bytes Deflate(const Bytes& in) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  Bytes out(deflateBound(&z, in.size()));
  z.next_in = const_cast<uint8_t*>(in.data());
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

struct Member {
  std::string name;
  Bytes data;
  bool deflate = false;
};

// Zip is an archive as zipfile writes np.savez's (no data descriptors).
Bytes Zip(const std::vector<Member>& members) {
  Bytes out, central;
  for (const Member& m : members) {
    const Bytes packed = m.deflate ? Deflate(m.data) : m.data;
    const uint32_t crc = static_cast<uint32_t>(crc32(0, m.data.data(), static_cast<uInt>(m.data.size())));
    const uint64_t local = out.size();
    auto fields = [&](Bytes& b) {
      Le(b, 20, 2);  // version needed
      Le(b, 0, 2);   // flags
      Le(b, m.deflate ? 8 : 0, 2);
      Le(b, 0, 2);
      Le(b, 0x21, 2);  // time, date
      Le(b, crc, 4);
      Le(b, packed.size(), 4);
      Le(b, m.data.size(), 4);
      Le(b, m.name.size(), 2);
      Le(b, 0, 2);  // extra
    };
    Le(out, 0x04034b50, 4);
    fields(out);
    out.insert(out.end(), m.name.begin(), m.name.end());
    out.insert(out.end(), packed.begin(), packed.end());
    Le(central, 0x02014b50, 4);
    Le(central, 20, 2);  // version made by
    fields(central);
    Le(central, 0, 2);  // comment
    Le(central, 0, 2);  // disk
    Le(central, 0, 2);  // internal attributes
    Le(central, 0, 4);  // external attributes
    Le(central, local, 4);
    central.insert(central.end(), m.name.begin(), m.name.end());
  }
  const uint64_t cd = out.size();
  out.insert(out.end(), central.begin(), central.end());
  Le(out, 0x06054b50, 4);
  Le(out, 0, 4);
  Le(out, members.size(), 2);
  Le(out, members.size(), 2);
  Le(out, central.size(), 4);
  Le(out, cd, 4);
  Le(out, 0, 2);
  return out;
}

// Dir is a scratch directory removed at the end of the test.
struct Dir {
  std::string path;
  Dir() {
    char t[] = "/tmp/mg-numpy-test-XXXXXX";
    REQUIRE(mkdtemp(t) != nullptr);
    path = t;
  }
  ~Dir() { std::filesystem::remove_all(path); }
  std::string Write(const std::string& name, const Bytes& b) const {
    std::string p = path + "/" + name;
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
    return p;
  }
};

convert::ConvertReport Run(const std::string& in, const std::string& out, const convert::ConvertOptions& o) {
  auto f = core::OpenRegularFile(in, false);
  REQUIRE(f.ok());
  return convert::Convert(f.value(), in, out, o);
}

std::string FirstId(const convert::ConvertReport& r) { return r.blocking.empty() ? "" : r.blocking.front().id; }

bool Exists(const std::string& p) { return access(p.c_str(), F_OK) == 0; }

Bytes ReadAll(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

// A 2 x 3 big-endian float32 array in Fortran order: column-major bytes.
// Row-major little-endian, its values are 0, 1, ..., 5.
Bytes FortranBigEndianBody() {
  const float col_major[] = {0, 3, 1, 4, 2, 5};
  Bytes b;
  for (float f : col_major) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    for (int i = 3; i >= 0; --i) b.push_back(static_cast<uint8_t>(u >> (8 * i)));
  }
  return b;
}

Bytes LittleEndianZeroToFive() {
  Bytes b;
  for (int v = 0; v < 6; ++v) {
    float f = static_cast<float>(v);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    Le(b, u, 4);
  }
  return b;
}

// The last 24 bytes of a converted file with one 2 x 3 F32 tensor: its data.
Bytes Data(const std::string& p) {
  Bytes all = ReadAll(p);
  REQUIRE(all.size() >= 24);
  return Bytes(all.end() - 24, all.end());
}

}  // namespace

TEST_CASE("a big-endian Fortran-order .npy is written row-major little-endian", "[convert][npy]") {
  Dir d;
  const std::string in = d.Write("f.npy", Npy(">f4", true, {2, 3}, FortranBigEndianBody()));
  convert::ConvertOptions o;
  auto r = Run(in, d.path + "/f.safetensors", o);
  REQUIRE(r.converted);
  REQUIRE(r.tensors.size() == 1);
  CHECK(r.tensors[0].name == "arr_0");
  CHECK(r.tensors[0].dtype == core::Dtype::kF32);
  CHECK(r.tensors[0].shape == std::vector<uint64_t>{2, 3});
  CHECK_FALSE(r.tensors[0].contiguous);
  CHECK(Data(d.path + "/f.safetensors") == LittleEndianZeroToFive());
}

TEST_CASE("npz members stored and deflated convert alike", "[convert][npz]") {
  Dir d;
  const Bytes npy = Npy(">f4", true, {2, 3}, FortranBigEndianBody());
  for (bool deflate : {false, true}) {
    const std::string in = d.Write("a.npz", Zip({{"w.npy", npy, deflate}}));
    convert::ConvertOptions o;
    const std::string out = d.path + "/a.safetensors";
    auto r = Run(in, out, o);
    REQUIRE(r.converted);
    REQUIRE(r.tensors.size() == 1);
    CHECK(r.tensors[0].name == "w");
    CHECK(Data(out) == LittleEndianZeroToFive());
  }
}

TEST_CASE("gather_window_bytes bounds a deflated Fortran-order array: N converts, N-1 is refused",
          "[convert][npz][limits]") {
  Dir d;
  const std::string in = d.Write("a.npz", Zip({{"w.npy", Npy(">f4", true, {2, 3}, FortranBigEndianBody()), true}}));
  convert::ConvertOptions o;
  o.limits.gather_window_bytes = 24;  // the whole array
  CHECK(Run(in, d.path + "/at.safetensors", o).converted);
  o.limits.gather_window_bytes = 23;
  auto r = Run(in, d.path + "/past.safetensors", o);
  CHECK_FALSE(r.converted);
  CHECK(FirstId(r) == "MG-CONV-LIMIT");
  CHECK(r.blocking.front().message.find("gather_window_bytes") != std::string::npos);
  CHECK_FALSE(Exists(d.path + "/past.safetensors"));
}

TEST_CASE("max_view_reads bounds a stored Fortran-order array read run by run", "[convert][npy][limits]") {
  Dir d;
  const std::string in = d.Write("f.npy", Npy(">f4", true, {2, 3}, FortranBigEndianBody()));
  convert::ConvertOptions o;
  o.limits.gather_window_bytes = 0;  // one pread per element: 6 runs
  o.limits.max_view_reads = 6;
  const std::string at = d.path + "/at.safetensors";
  REQUIRE(Run(in, at, o).converted);
  CHECK(Data(at) == LittleEndianZeroToFive());
  o.limits.max_view_reads = 5;
  auto r = Run(in, d.path + "/past.safetensors", o);
  CHECK(FirstId(r) == "MG-CONV-LIMIT");
  CHECK_FALSE(Exists(d.path + "/past.safetensors"));
}

TEST_CASE("max_tensors and max_rank apply to numpy arrays: N converts, N+1 is refused", "[convert][npz][limits]") {
  Dir d;
  const Bytes one = Npy("<i2", false, {1, 1, 2}, Bytes{1, 0, 2, 0});
  const std::string in = d.Write("a.npz", Zip({{"a.npy", one}, {"b.npy", one, true}, {"c.npy", one}}));
  convert::ConvertOptions o;
  o.limits.max_tensors = 3;
  o.limits.max_rank = 3;
  auto ok = Run(in, d.path + "/ok.safetensors", o);
  REQUIRE(ok.converted);
  CHECK(ok.tensors.size() == 3);
  o.limits.max_tensors = 2;
  auto r = Run(in, d.path + "/t.safetensors", o);
  CHECK(FirstId(r) == "MG-CONV-LIMIT");
  CHECK(r.blocking.front().message.find("max_tensors") != std::string::npos);
  o.limits.max_tensors = 3;
  o.limits.max_rank = 2;
  r = Run(in, d.path + "/r.safetensors", o);
  CHECK(FirstId(r) == "MG-CONV-LIMIT");
  CHECK(r.blocking.front().message.find("max_rank") != std::string::npos);
  CHECK_FALSE(Exists(d.path + "/t.safetensors"));
  CHECK_FALSE(Exists(d.path + "/r.safetensors"));
}

TEST_CASE("npz: a member that is not .npy is refused or dropped, and duplicate keys are refused", "[convert][npz]") {
  Dir d;
  const Bytes one = Npy("|u1", false, {2}, Bytes{7, 9});
  const std::string in = d.Write("a.npz", Zip({{"a.npy", one}, {"notes.txt", Bytes{'h', 'i'}}}));
  convert::ConvertOptions o;
  auto r = Run(in, d.path + "/a.safetensors", o);
  CHECK(FirstId(r) == "MG-CONV-NOT-TENSOR");
  o.drop_non_tensors = true;
  r = Run(in, d.path + "/a.safetensors", o);
  REQUIRE(r.converted);
  CHECK(r.dropped == std::vector<std::string>{"\"notes.txt\" (npz member, not .npy)"});
  const std::string dup = d.Write("d.npz", Zip({{"a.npy", one}, {"a", one}}));
  r = Run(dup, d.path + "/d.safetensors", o);
  CHECK(FirstId(r) == "MG-CONV-NAME");
}

TEST_CASE("numpy dtypes without a safetensors dtype are refused naming the descr", "[convert][npy]") {
  Dir d;
  const std::pair<const char*, size_t> kDescrs[] = {{"<c16", 16}, {"<f16", 16}, {"|f4", 4}, {"=f4", 4},
                                                    {"<U1", 4},   {"|V4", 4},   {"<M8", 8}, {"<f4", 4}};
  for (const auto& [descr, bytes] : kDescrs) {
    const bool mapped = std::string(descr) == "<f4";  // the control: it converts
    const std::string in = d.Write("x.npy", Npy(descr, false, {1}, Bytes(bytes, 0)));
    convert::ConvertOptions o;
    o.fail_on = core::Severity::kCritical;  // the scan may also question some
    auto r = Run(in, d.path + "/x.safetensors", o);
    INFO(descr << ": " << FirstId(r) << " " << (r.blocking.empty() ? "" : r.blocking.front().message));
    CHECK(r.converted == mapped);
    if (mapped) continue;
    CHECK(FirstId(r) == "MG-CONV-UNSUPPORTED");
    CHECK_FALSE(Exists(d.path + "/x.safetensors"));
  }
}
