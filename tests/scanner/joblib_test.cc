// joblib (issue 3 point 3): pickle interleaved with raw array data. Real
// joblib.dump outputs pass with only the pickle-format finding; streams
// written opcode by opcode check the exact byte counts joblib reads and
// that nothing can be hidden in, or by, the bytes the machine skips.
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "pickle_builder.h"

namespace sc = modelgate::scanner;
using modelgate::core::Severity;
using sc::GlobalClass;
using sc::PickleAnomalyKind;

namespace {

std::vector<uint8_t> ReadFixture(const std::string& name) {
  std::ifstream f(std::string(MG_REAL_FIXTURE_DIR) + "/" + name, std::ios::binary);
  REQUIRE(f.good());
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Dtype is what numpy's dtype.__reduce__ writes: numpy.dtype(typestr,
// False, True) and a BUILD with (3, byteorder, None, None, None, elsize,
// alignment, flags).
struct Dtype {
  std::string typestr = "f8";
  int32_t elsize = -1;
  uint8_t flags = 0;
};

struct Wrapper {
  std::string module = "joblib.numpy_pickle";
  std::vector<uint64_t> shape = {3};
  Dtype dtype;
  bool aligned = true;       // numpy_array_alignment_bytes: 16
  bool align_none = false;   // numpy_array_alignment_bytes: None
  std::string extra_key;     // one more state entry (set to None)
};

PickleBuilder& True(PickleBuilder& b) { return b.Op(0x88); }
PickleBuilder& BinInt(PickleBuilder& b, int32_t v) {
  return b.Op('J').Le(static_cast<uint32_t>(v), 4);
}

PickleBuilder& DtypeOps(PickleBuilder& b, const Dtype& d) {
  b.ShortUnicode("numpy").ShortUnicode("dtype").StackGlobal().ShortUnicode(d.typestr).False();
  True(b).Tuple3().Reduce();
  b.Mark().BinInt1(3).ShortUnicode("<").None().None().None();
  BinInt(b, d.elsize);
  BinInt(b, -1);
  return b.BinInt1(d.flags).Tuple().Build();
}

PickleBuilder& ShapeOps(PickleBuilder& b, const std::vector<uint64_t>& shape) {
  b.Mark();
  for (uint64_t dim : shape) b.Op(0x8a).Le(8, 1).Le(dim, 8);  // LONG1, 8 bytes
  return b.Tuple();
}

// WrapperOps writes what NumpyPickler writes for one array: the wrapper
// class, NEWOBJ, its state dict and the BUILD (the array data follows).
PickleBuilder& WrapperOps(PickleBuilder& b, const Wrapper& w) {
  b.ShortUnicode(w.module).ShortUnicode("NumpyArrayWrapper").StackGlobal().EmptyTuple().NewObj();
  b.EmptyDict().Mark();
  b.ShortUnicode("subclass").ShortUnicode("numpy").ShortUnicode("ndarray").StackGlobal();
  ShapeOps(b.ShortUnicode("shape"), w.shape);
  b.ShortUnicode("order").ShortUnicode("C");
  DtypeOps(b.ShortUnicode("dtype"), w.dtype);
  True(b.ShortUnicode("allow_mmap"));
  if (w.align_none) {
    b.ShortUnicode("numpy_array_alignment_bytes").None();
  } else if (w.aligned) {
    b.ShortUnicode("numpy_array_alignment_bytes").BinInt1(16);
  }
  if (!w.extra_key.empty()) b.ShortUnicode(w.extra_key).None();
  return b.SetItems().Build();
}

PickleBuilder& Data(PickleBuilder& b, size_t n, char fill = '\0') {
  return b.Raw(std::string(n, fill));
}

const sc::PickleAnomaly* Malformed(const sc::PickleAnalysis& a) {
  for (const auto& x : a.anomalies) {
    if (x.kind == PickleAnomalyKind::kMalformed) return &x;
  }
  return nullptr;
}

void RequireOnlyFormatFinding(const sc::PickleAnalysis& a) {
  auto fs = sc::PickleFindings(a);
  for (const auto& f : fs) INFO(f.id << ": " << f.message);
  REQUIRE(fs.size() == 1);
  CHECK(fs[0].id == "MG-PK-PICKLE-FORMAT");
  CHECK(fs[0].severity == Severity::kMedium);
}

// Where joblib 1.2's NumpyArrayWrapper.read starts and stops reading
// (file_handle.tell() around it), logged by loading these self-made files.
struct Read {
  uint64_t from, to;
};

void CheckReal(const std::string& name, const std::vector<Read>& reads, size_t streams) {
  INFO(name);
  std::vector<uint8_t> bytes = ReadFixture(name);
  auto a = sc::AnalyzePickle(bytes);
  RequireOnlyFormatFinding(a);
  REQUIRE(a.streams.size() == streams);
  CHECK(a.streams[0].complete);
  CHECK(a.streams[0].end == bytes.size());
  REQUIRE(a.arrays.size() == reads.size());
  for (size_t i = 0; i < reads.size(); ++i) {
    INFO("array " << i);
    CHECK(a.arrays[i].offset == reads[i].from);
    CHECK(a.arrays[i].build_offset == reads[i].from - 1);
    CHECK(a.arrays[i].offset + a.arrays[i].padding_bytes + a.arrays[i].data_bytes == reads[i].to);
  }
  for (const auto& imp : a.imports) CHECK(imp.safety == GlobalClass::kSafe);
}

}  // namespace

TEST_CASE("real joblib.dump of a dict of arrays passes with the medium finding only", "[joblib]") {
  std::vector<uint8_t> bytes = ReadFixture("joblib-arrays.joblib");
  auto a = sc::AnalyzePickle(bytes);
  RequireOnlyFormatFinding(a);
  REQUIRE(a.streams.size() == 1);
  CHECK(a.streams[0].complete);
  REQUIRE(a.arrays.size() == 1);
  // np.arange(5, dtype=float64): BUILD at 223, padding length byte 15 and 15
  // bytes of 0xff, then 40 bytes of data; the pickle resumes at 280.
  CHECK(a.arrays[0].build_offset == 223);
  CHECK(a.arrays[0].offset == 224);
  CHECK(a.arrays[0].padding_bytes == 16);
  CHECK(a.arrays[0].data_bytes == 40);
  CHECK_FALSE(a.arrays[0].object_pickle);
  bool joblib_import = false;
  for (const auto& imp : a.imports) joblib_import |= imp.FullName() == "joblib.numpy_pickle.NumpyArrayWrapper";
  CHECK(joblib_import);  // what makes scan.cc call the format "joblib"
}

TEST_CASE("real joblib dumps: list (protocol 2), object arrays, Fortran order", "[joblib]") {
  CheckReal("joblib-arrays.joblib", {{224, 280}}, 1);
  CheckReal("joblib-list.joblib", {{254, 268}, {349, 353}, {432, 455}, {536, 544}}, 1);
  // The object array is a nested pickle (stream 1) of strings, ints, None.
  CheckReal("joblib-object.joblib", {{226, 443}, {525, 552}, {630, 644}}, 2);
  CheckReal("joblib-fortran.joblib", {{223, 264}, {346, 368}}, 1);
  auto a = sc::AnalyzePickle(ReadFixture("joblib-object.joblib"));
  REQUIRE(a.arrays.size() == 3);
  CHECK(a.arrays[0].object_pickle);
  CHECK(a.arrays[0].nested_stream == 1);
  CHECK(a.streams[1].depth == 1);
  CHECK(a.streams[1].offset == 226);
  CHECK(a.streams[1].complete);
}

TEST_CASE("aligned wrapper: padding-length byte, padding, count * itemsize", "[joblib]") {
  PickleBuilder b;
  b.Proto(4);
  WrapperOps(b, Wrapper{});
  const uint64_t data_at = b.size();
  b.Op(5);
  Data(b, 5, '\xff');
  Data(b, 3 * 8, 'c');  // 'c' would be GLOBAL if read as opcodes
  b.Stop();
  auto a = Analyze(b);
  RequireOnlyFormatFinding(a);
  REQUIRE(a.streams.size() == 1);
  CHECK(a.streams[0].complete);
  REQUIRE(a.arrays.size() == 1);
  CHECK(a.arrays[0].offset == data_at);
  CHECK(a.arrays[0].build_offset == data_at - 1);
  CHECK(a.arrays[0].padding_bytes == 6);
  CHECK(a.arrays[0].data_bytes == 24);
}

TEST_CASE("shape () is one element, no or None alignment means no padding byte", "[joblib]") {
  for (bool none : {false, true}) {
    PickleBuilder b;
    b.Proto(4);
    Wrapper w;
    w.shape = {};
    w.dtype.typestr = "i4";
    w.aligned = false;
    w.align_none = none;
    WrapperOps(b, w);
    const uint64_t data_at = b.size();
    Data(b, 4, '\x01');
    b.Stop();
    auto a = Analyze(b);
    RequireOnlyFormatFinding(a);
    REQUIRE(a.arrays.size() == 1);
    CHECK(a.arrays[0].offset == data_at);
    CHECK(a.arrays[0].padding_bytes == 0);
    CHECK(a.arrays[0].data_bytes == 4);
  }
}

TEST_CASE("unicode, bytes and void itemsizes come from the typestr", "[joblib]") {
  struct Case {
    const char* typestr;
    int32_t elsize;
    uint64_t itemsize;
  };
  for (const Case& c : {Case{"U3", 12, 12}, Case{"S2", 2, 2}, Case{"V8", 8, 8}, Case{"b1", -1, 1},
                        Case{"c16", -1, 16}, Case{"M8", -1, 8}}) {
    INFO(c.typestr);
    PickleBuilder b;
    b.Proto(4);
    Wrapper w;
    w.shape = {2, 3};
    w.dtype.typestr = c.typestr;
    w.dtype.elsize = c.elsize;
    WrapperOps(b, w);
    b.Op(0);
    Data(b, 6 * c.itemsize);
    b.Stop();
    auto a = Analyze(b);
    RequireOnlyFormatFinding(a);
    REQUIRE(a.arrays.size() == 1);
    CHECK(a.arrays[0].data_bytes == 6 * c.itemsize);
  }
}

TEST_CASE("object dtype: the nested pickle is analyzed, os.system in it is critical", "[joblib]") {
  PickleBuilder b;
  b.Proto(4);
  Wrapper w;
  w.dtype.typestr = "O8";
  w.dtype.flags = 63;
  WrapperOps(b, w);
  const uint64_t nested_at = b.size();
  b.Proto(2).CallGlobal("os", "system").Stop();
  const uint64_t after = b.size();
  b.Stop();
  auto a = Analyze(b);
  REQUIRE(a.streams.size() == 2);
  CHECK(a.streams[0].complete);
  CHECK(a.streams[0].end == b.size());
  CHECK(a.streams[1].offset == nested_at);
  CHECK(a.streams[1].end == after);
  CHECK(a.streams[1].depth == 1);
  REQUIRE(a.arrays.size() == 1);
  CHECK(a.arrays[0].object_pickle);
  CHECK(a.arrays[0].nested_stream == 1);
  CHECK(a.arrays[0].data_bytes == after - nested_at);
  auto fs = sc::PickleFindings(a);
  const sc::Finding* f = FindId(fs, "MG-PK-CRITICAL-IMPORT");
  REQUIRE(f != nullptr);
  CHECK(f->severity == Severity::kCritical);
  CHECK(f->offset == nested_at + 2);
  CHECK(f->global == "os.system");
  CHECK(Malformed(a) == nullptr);
}

TEST_CASE("object dtype whose nested pickle never stops: the outer stream stops too", "[joblib]") {
  PickleBuilder b;
  b.Proto(4);
  Wrapper w;
  w.dtype.typestr = "O8";
  w.dtype.flags = 63;
  WrapperOps(b, w);
  b.Proto(2).None();
  auto a = Analyze(b);
  REQUIRE(a.streams.size() == 2);
  CHECK_FALSE(a.streams[0].complete);
  CHECK_FALSE(a.streams[1].complete);
  CHECK(a.arrays.empty());
}

TEST_CASE("a wrapper claiming more bytes than remain is malformed where its data starts",
          "[joblib]") {
  SECTION("array data") {
    PickleBuilder b;
    b.Proto(4);
    Wrapper w;
    w.shape = {100};
    WrapperOps(b, w);
    const uint64_t pad_at = b.size();
    b.Op(2).Raw("\xff\xff");
    Data(b, 10);
    b.Stop();
    auto a = Analyze(b);
    CHECK_FALSE(a.streams[0].complete);
    CHECK(a.arrays.empty());
    const sc::PickleAnomaly* m = Malformed(a);
    REQUIRE(m != nullptr);
    CHECK(m->offset == pad_at + 3);
    CHECK(m->message.find("800 bytes") != std::string::npos);
    CHECK(m->message.find("11 remain") != std::string::npos);
    CHECK(CountId(sc::PickleFindings(a), "MG-PK-MALFORMED") == 1);
  }
  SECTION("padding") {
    PickleBuilder b;
    b.Proto(4);
    WrapperOps(b, Wrapper{});
    const uint64_t pad_at = b.size();
    b.Op(200).Raw("\xff");
    auto a = Analyze(b);
    const sc::PickleAnomaly* m = Malformed(a);
    REQUIRE(m != nullptr);
    CHECK(m->offset == pad_at + 1);
    CHECK(m->message.find("padding of 200 bytes") != std::string::npos);
  }
  SECTION("the padding-length byte") {
    PickleBuilder b;
    b.Proto(4);
    WrapperOps(b, Wrapper{});
    const uint64_t pad_at = b.size();
    auto a = Analyze(b);
    const sc::PickleAnomaly* m = Malformed(a);
    REQUIRE(m != nullptr);
    CHECK(m->offset == pad_at);
  }
}

TEST_CASE("a NumpyArrayWrapper from another module skips nothing", "[joblib]") {
  PickleBuilder b;
  b.Proto(4);
  Wrapper w;
  w.module = "evil.numpy_pickle";
  WrapperOps(b, w);
  const uint64_t data_at = b.size();
  b.Op(15);  // what joblib would read as the padding length
  Data(b, 15, '\xff');
  Data(b, 24);
  b.Stop();
  auto a = Analyze(b);
  CHECK(a.arrays.empty());
  const sc::PickleAnomaly* m = Malformed(a);
  REQUIRE(m != nullptr);
  CHECK(m->offset == data_at);  // the raw bytes fail as opcodes
  CHECK(m->message.find("invalid load key") != std::string::npos);
  auto fs = sc::PickleFindings(a);
  const sc::Finding* f = FindId(fs, "MG-PK-UNKNOWN-IMPORT");
  REQUIRE(f != nullptr);
  CHECK(f->global == "evil.numpy_pickle.NumpyArrayWrapper");
}

TEST_CASE("a shape whose byte count overflows stops the stream at the BUILD", "[joblib]") {
  struct Case {
    std::vector<uint64_t> shape;
    const char* what;
  };
  for (const Case& c : {Case{{1ull << 62, 1ull << 62}, "element count"},
                        Case{{1ull << 61}, "byte count"},
                        Case{{1ull << 40, 1ull << 23}, "element count"}}) {
    INFO(c.what);
    PickleBuilder b;
    b.Proto(4);
    Wrapper w;
    w.shape = c.shape;
    WrapperOps(b, w);
    const uint64_t build_at = b.size() - 1;
    Data(b, 64);
    b.Stop();
    auto a = Analyze(b);
    CHECK(a.arrays.empty());
    const sc::PickleAnomaly* m = Malformed(a);
    REQUIRE(m != nullptr);
    CHECK(m->offset == build_at);
    CHECK(m->opcode == "BUILD");
    CHECK(m->message.find("overflows") != std::string::npos);
    CHECK(m->message.find(c.what) != std::string::npos);
  }
}

TEST_CASE("what the itemsize cannot be computed from stops the stream, never a guess",
          "[joblib]") {
  struct Case {
    Dtype dtype;
    const char* why;
  };
  for (const Case& c : {Case{{"float64", -1, 0}, "not a typestr"},
                        Case{{"f3", -1, 0}, "not a typestr"},
                        Case{{"<f8", -1, 0}, "not a typestr"},
                        Case{{"f08", -1, 0}, "not a typestr"},
                        Case{{"O8", -1, 0}, "object items"},     // flags say no objects
                        Case{{"f8", -1, 63}, "object items"},    // flags say objects
                        Case{{"U3", 100, 8}, "elsize 100"},
                        Case{{"S0", 0, 0}, "itemsize is 0"}}) {
    INFO(c.dtype.typestr);
    PickleBuilder b;
    b.Proto(4);
    Wrapper w;
    w.dtype = c.dtype;
    WrapperOps(b, w);
    const uint64_t build_at = b.size() - 1;
    Data(b, 64);
    b.Stop();
    auto a = Analyze(b);
    CHECK(a.arrays.empty());
    const sc::PickleAnomaly* m = Malformed(a);
    REQUIRE(m != nullptr);
    CHECK(m->offset == build_at);
    CHECK(m->message.find(c.why) != std::string::npos);
  }
}

TEST_CASE("a structured dtype is not followed", "[joblib]") {
  // numpy.dtype([('a', 'f4')]): the type is a list, not a typestr.
  PickleBuilder b;
  b.Proto(4);
  b.ShortUnicode("joblib.numpy_pickle").ShortUnicode("NumpyArrayWrapper").StackGlobal().EmptyTuple().NewObj();
  b.EmptyDict().Mark();
  b.ShortUnicode("subclass").ShortUnicode("numpy").ShortUnicode("ndarray").StackGlobal();
  ShapeOps(b.ShortUnicode("shape"), {2});
  b.ShortUnicode("order").ShortUnicode("C").ShortUnicode("dtype");
  b.ShortUnicode("numpy").ShortUnicode("dtype").StackGlobal().EmptyList().Mark().ShortUnicode("a");
  b.ShortUnicode("f4").Tuple2().Appends().Tuple1().Reduce();
  b.SetItems().Build();
  Data(b, 8);
  b.Stop();
  auto a = Analyze(b);
  CHECK(a.arrays.empty());
  const sc::PickleAnomaly* m = Malformed(a);
  REQUIRE(m != nullptr);
  CHECK(m->message.find("structured dtypes are not followed") != std::string::npos);
}

TEST_CASE("state that overrides the wrapper's methods or type is not followed", "[joblib]") {
  for (const char* key : {"read", "read_array", "__class__", "__setstate__"}) {
    INFO(key);
    PickleBuilder b;
    b.Proto(4);
    Wrapper w;
    w.extra_key = key;
    WrapperOps(b, w);
    b.Op(0);
    Data(b, 24);
    b.Stop();
    auto a = Analyze(b);
    CHECK(a.arrays.empty());
    const sc::PickleAnomaly* m = Malformed(a);
    REQUIRE(m != nullptr);
    CHECK(m->message.find(key) != std::string::npos);
  }
}

TEST_CASE("a wrapper built by REDUCE gets __init__'s default alignment", "[joblib]") {
  // NumpyArrayWrapper(ndarray, (2,), 'C', dtype('i4')) then BUILD with {}:
  // numpy_array_alignment_bytes defaults to 16, so a padding byte is read.
  PickleBuilder b;
  b.Proto(4);
  b.ShortUnicode("joblib.numpy_pickle").ShortUnicode("NumpyArrayWrapper").StackGlobal().Mark();
  b.ShortUnicode("numpy").ShortUnicode("ndarray").StackGlobal();
  ShapeOps(b, {2});
  b.ShortUnicode("C");
  DtypeOps(b, Dtype{"i4", -1, 0});
  b.Tuple().Reduce().EmptyDict().Build();
  const uint64_t data_at = b.size();
  b.Op(1).Raw("\xff");
  Data(b, 8);
  b.Stop();
  auto a = Analyze(b);
  RequireOnlyFormatFinding(a);
  REQUIRE(a.arrays.size() == 1);
  CHECK(a.arrays[0].offset == data_at);
  CHECK(a.arrays[0].padding_bytes == 2);
  CHECK(a.arrays[0].data_bytes == 8);
}

TEST_CASE("a payload in the array data is found: pickle.load runs those bytes", "[joblib]") {
  // joblib.load skips the uint8 data; pickle.load (torch.load, ...) reads
  // it as opcodes: os.system('ls').
  PickleBuilder payload;
  payload.CallGlobal("os", "system").Pop();
  PickleBuilder b;
  b.Proto(4);
  Wrapper w;
  w.shape = {payload.size()};
  w.dtype.typestr = "u1";
  w.aligned = false;
  WrapperOps(b, w);
  const uint64_t data_at = b.size();
  b.Raw(std::string(payload.bytes().begin(), payload.bytes().end()));
  b.Stop();
  auto a = Analyze(b);
  REQUIRE(a.arrays.size() == 1);
  CHECK(a.arrays[0].data_bytes == payload.size());
  auto fs = sc::PickleFindings(a);
  const sc::Finding* f = FindId(fs, "MG-PK-CRITICAL-IMPORT");
  REQUIRE(f != nullptr);
  CHECK(f->offset == data_at);
  CHECK(f->global == "os.system");
  const sc::Finding* d = FindId(fs, "MG-PK-DISAGREEMENT");
  REQUIRE(d != nullptr);
  CHECK(d->message.find("joblib.load reads the bytes from " + std::to_string(data_at)) != std::string::npos);
  for (const auto& imp : a.imports) CHECK(imp.stream < a.streams.size());
}

TEST_CASE("array data that a FRAME still covers is not followed", "[joblib]") {
  PickleBuilder body;
  WrapperOps(body, Wrapper{});
  PickleBuilder b;
  b.Proto(4).Frame(body.size() + 1);
  b.Raw(std::string(body.bytes().begin(), body.bytes().end()));
  b.Stop();  // inside the frame: pickle.py reads it from memory, joblib reads after the frame
  b.Op(0);
  Data(b, 24);
  b.Stop();
  auto a = Analyze(b);
  CHECK(a.arrays.empty());
  const sc::PickleAnomaly* m = Malformed(a);
  REQUIRE(m != nullptr);
  CHECK(m->message.find("FRAME") != std::string::npos);
}

TEST_CASE("joblib's NDArrayWrapper loads a separate file with allow_pickle: flagged", "[joblib]") {
  PickleBuilder b;
  b.Proto(4);
  b.ShortUnicode("joblib.numpy_pickle").ShortUnicode("NDArrayWrapper").StackGlobal().EmptyTuple().NewObj();
  b.EmptyDict().Mark().ShortUnicode("filename").ShortUnicode("/tmp/x.npy");
  b.ShortUnicode("subclass").ShortUnicode("numpy").ShortUnicode("ndarray").StackGlobal();
  b.SetItems().Build().Stop();
  auto a = Analyze(b);
  CHECK(a.arrays.empty());
  CHECK(a.streams[0].complete);
  auto fs = sc::PickleFindings(a);
  const sc::Finding* f = FindId(fs, "MG-PK-CALL-NOT-ALLOWED");
  REQUIRE(f != nullptr);
  CHECK(f->severity == Severity::kCritical);
  CHECK(f->message.find("/tmp/x.npy") != std::string::npos);
  CHECK(f->message.find("allow_pickle=True") != std::string::npos);
}

TEST_CASE("a memoized wrapper BUILT again reads again", "[joblib]") {
  PickleBuilder b;
  b.Proto(4);
  b.ShortUnicode("joblib.numpy_pickle").ShortUnicode("NumpyArrayWrapper").StackGlobal().EmptyTuple().NewObj();
  b.BinPut(0).EmptyDict().Mark();
  b.ShortUnicode("subclass").ShortUnicode("numpy").ShortUnicode("ndarray").StackGlobal();
  ShapeOps(b.ShortUnicode("shape"), {2});
  b.ShortUnicode("order").ShortUnicode("C");
  DtypeOps(b.ShortUnicode("dtype"), Dtype{"i2", -1, 0});
  b.SetItems().Build();
  Data(b, 4, '\x07');
  b.Pop().BinGet(0).EmptyDict().Build();  // same attributes: 4 more bytes
  Data(b, 4, '\x07');
  b.Stop();
  auto a = Analyze(b);
  RequireOnlyFormatFinding(a);
  REQUIRE(a.arrays.size() == 2);
  CHECK(a.arrays[1].data_bytes == 4);
  CHECK(a.streams[0].complete);
}
