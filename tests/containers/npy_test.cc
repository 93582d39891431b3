#include <catch2/catch.hpp>

#include "npy.h"

namespace sc = modelgate::scanner;

namespace {

std::vector<uint8_t> Npy(std::string dict, int major = 1, size_t pad_to = 64) {
  std::string magic("\x93NUMPY", 6);
  std::string head = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + head.size() + 1) % pad_to != 0) head += ' ';
  head += '\n';
  std::vector<uint8_t> out(magic.begin(), magic.end());
  out.push_back(static_cast<uint8_t>(major));
  out.push_back(0);
  const size_t n = head.size();
  out.push_back(static_cast<uint8_t>(n));
  out.push_back(static_cast<uint8_t>(n >> 8));
  if (major != 1) {
    out.push_back(static_cast<uint8_t>(n >> 16));
    out.push_back(static_cast<uint8_t>(n >> 24));
  }
  out.insert(out.end(), head.begin(), head.end());
  return out;
}

struct Parsed {
  std::optional<sc::NpyHeader> h;
  std::vector<sc::Finding> f;
};

Parsed Parse(const std::vector<uint8_t>& b, sc::NpyLimits limits = {}) {
  Parsed p;
  p.h = sc::ParseNpyHeader(b, 0, limits, &p.f);
  return p;
}

std::string FirstId(const Parsed& p) { return p.f.empty() ? "" : p.f[0].id; }

}  // namespace

TEST_CASE("np.save headers of every version parse", "[npy]") {
  for (int major : {1, 2, 3}) {
    auto b = Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", major);
    auto p = Parse(b);
    INFO(major);
    REQUIRE(p.h);
    CHECK(p.h->shape == std::vector<uint64_t>{3, 4});
    CHECK(p.h->body_bytes == 48u);
    CHECK_FALSE(p.h->has_object);
    CHECK(p.h->data_offset == b.size());
  }
  auto scalar = Parse(Npy("{'descr': '|b1', 'fortran_order': True, 'shape': (), }"));
  REQUIRE(scalar.h);
  CHECK(scalar.h->body_bytes == 1u);
  auto one = Parse(Npy("{'descr': '<U3', 'fortran_order': False, 'shape': (5,), }"));
  REQUIRE(one.h);
  CHECK(one.h->body_bytes == 60u);
}

TEST_CASE("object dtypes mean a pickle body, including inside structured dtypes", "[npy]") {
  auto o = Parse(Npy("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }"));
  REQUIRE(o.h);
  CHECK(o.h->has_object);
  CHECK_FALSE(o.h->body_bytes.has_value());
  auto s = Parse(Npy("{'descr': [('a', '<f4'), ('b', '|O')], 'fortran_order': False, 'shape': (2,), }"));
  REQUIRE(s.h);
  CHECK(s.h->has_object);
  auto nested = Parse(Npy(
      "{'descr': [('a', [('x', '<i8'), (('title', 'y'), '|O', (2,))])], 'fortran_order': False, 'shape': (1,), }"));
  REQUIRE(nested.h);
  CHECK(nested.h->has_object);
}

TEST_CASE("malformed headers are rejected with a reason", "[npy]") {
  CHECK(FirstId(Parse(Npy("{'descr': '<f4', 'shape': (3,), }"))) == "MG-NPY-HEADER");
  CHECK(FirstId(Parse(Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}"))) ==
        "MG-NPY-HEADER");
  CHECK(FirstId(Parse(Npy("{'descr': '<f4', 'descr': '|O', 'fortran_order': False, 'shape': (3,)}"))) ==
        "MG-NPY-HEADER");
  CHECK(FirstId(Parse(Npy("{'descr': '<f4', 'fortran_order': 0, 'shape': (3,), }"))) == "MG-NPY-HEADER");
  CHECK(FirstId(Parse(Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3), }"))) == "MG-NPY-HEADER");
  CHECK(FirstId(Parse(Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }"))) == "MG-NPY-HEADER");
  CHECK(FirstId(Parse(Npy("{'descr': '<q9', 'fortran_order': False, 'shape': (3,), }"))) == "MG-NPY-BAD-DESCR");
  CHECK(FirstId(Parse(Npy("__import__('os').system('id')"))) == "MG-NPY-HEADER");
  CHECK(FirstId(Parse(Npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"))) ==
        "MG-NPY-SHAPE-OVERFLOW");
  std::vector<uint8_t> v4 = Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }");
  v4[6] = 4;
  CHECK(FirstId(Parse(v4)) == "MG-NPY-MALFORMED");
  auto truncated = Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }");
  truncated.resize(truncated.size() - 5);
  CHECK(FirstId(Parse(truncated)) == "MG-NPY-MALFORMED");
}

TEST_CASE("npy header and rank limits at N and N+1", "[npy][limits]") {
  auto b = Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1), }");
  const uint64_t n = b.size() - 10;
  sc::NpyLimits at;
  at.max_header_bytes = n;
  CHECK(Parse(b, at).h.has_value());
  sc::NpyLimits past;
  past.max_header_bytes = n - 1;
  CHECK(FirstId(Parse(b, past)) == "MG-NPY-HEADER-TOO-LARGE");
  sc::NpyLimits rank_at;
  rank_at.max_rank = 3;
  CHECK(Parse(b, rank_at).h.has_value());
  sc::NpyLimits rank_past;
  rank_past.max_rank = 2;
  CHECK(FirstId(Parse(b, rank_past)) == "MG-NPY-HEADER");
}
