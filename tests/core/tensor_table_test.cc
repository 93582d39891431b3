// TensorTable's duplicate-name check (core/src/tensor_table.h): the hash
// set, and the sort it falls back to when names are built to collide in
// NameHash. The colliding names are found here with the table's own hash.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "support/st_builder.h"
#include "tensor_table.h"  // core/src: TableAccess, NameCheck

namespace core = modelgate::core;
using core::TableAccess;

namespace {

core::TensorTable TableOf(const std::vector<std::string>& names) {
  core::TensorTable t;
  uint64_t at = 0;
  for (const auto& name : names) {
    core::TensorInfo info;
    info.name = name;
    info.dtype = core::Dtype::kU8;
    info.shape = {1};
    info.begin = at;
    info.end = at + 1;
    ++at;
    t.push_back(info);
  }
  return t;
}

uint64_t HashOf(const std::string& name) {
  core::TensorTable t = TableOf({name});
  return TableAccess::NameHash(t, TableAccess::Recs(t)[0]);
}

// CollidingNames: `count` distinct names ("c0000123", ...) whose NameHash
// agree in the low `bits` bits, so that in a hash set of up to 2^bits
// slots they all start probing at the same slot.
std::vector<std::string> CollidingNames(size_t count, int bits) {
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  std::vector<std::string> out;
  uint64_t want = 0;
  for (uint64_t i = 0; out.size() < count && i < 100'000'000; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "c%07llu", static_cast<unsigned long long>(i));
    const uint64_t h = HashOf(buf) & mask;
    if (out.empty()) want = h;
    if (h == want) out.emplace_back(buf);
  }
  REQUIRE(out.size() == count);
  return out;
}

// Safetensors: one U8 [1] tensor per name, in file order at offsets 0, 1, ...
std::vector<uint8_t> Safetensors(const std::vector<std::string>& names) {
  StBuilder b;
  for (size_t i = 0; i < names.size(); ++i) b.Entry(names[i], "U8", {1}, i, i + 1);
  return b.Build();
}

}  // namespace

TEST_CASE("tensor table: names that differ only in their last bytes do not collide",
          "[core][tensor_table]") {
  // The benchmark's names (bench/header_650k.sh): one 8-byte word each,
  // differing in its high bytes. A hash whose low bits missed those bytes
  // sent this set to the sort (issue 16.4).
  std::vector<std::string> names;
  for (int i = 0; i < 100'000; ++i) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "t%07d", i);
    names.emplace_back(buf);
  }
  core::TensorTable t = TableOf(names);
  const core::NameCheck c = TableAccess::FindDuplicateName(t);
  CHECK_FALSE(c.duplicate);
  CHECK_FALSE(c.sorted);
}

TEST_CASE("tensor table: colliding names fall back to the sort, which still finds duplicates",
          "[core][tensor_table]") {
  // 200 names in one probe run (a set of 512 slots): 0 + 1 + ... + 199
  // probes, far past 8 a name.
  const std::vector<std::string> names = CollidingNames(200, 9);
  for (size_t i = 1; i < names.size(); ++i) REQUIRE(names[i] != names[0]);

  SECTION("no duplicate: the sort says so") {
    core::TensorTable t = TableOf(names);
    const core::NameCheck c = TableAccess::FindDuplicateName(t);
    CHECK(c.sorted);
    CHECK_FALSE(c.duplicate);
  }
  SECTION("a duplicate at the end is found, with both records") {
    std::vector<std::string> dup = names;
    dup.push_back(names[137]);
    core::TensorTable t = TableOf(dup);
    const core::NameCheck c = TableAccess::FindDuplicateName(t);
    CHECK(c.sorted);
    REQUIRE(c.duplicate);
    CHECK(c.first == 137);
    CHECK(c.second == 200);
  }
  SECTION("a duplicate found by the hash before the probes run out") {
    std::vector<std::string> dup = names;
    dup.insert(dup.begin() + 2, names[0]);  // the third name meets the first at once
    core::TensorTable t = TableOf(dup);
    const core::NameCheck c = TableAccess::FindDuplicateName(t);
    CHECK_FALSE(c.sorted);
    REQUIRE(c.duplicate);
    CHECK(c.first == 0);
    CHECK(c.second == 2);
  }
  SECTION("the parse accepts the colliding names, every record where the file put it") {
    auto r = core::ParseSafetensors(Safetensors(names), core::Limits{});
    REQUIRE(r.ok());
    const core::TensorTable& t = r.value().tensors;
    REQUIRE(t.size() == names.size());
    for (size_t i = 0; i < names.size(); ++i) {
      INFO("tensor " << i);
      CHECK(t[i].name == names[i]);
      CHECK(t[i].begin == i);
      CHECK(t[i].end == i + 1);
      CHECK(t[i].shape.size() == 1);
    }
  }
  SECTION("the parse rejects a colliding duplicate as the SAX parse does") {
    std::vector<std::string> dup = names;
    dup.push_back(names[5]);
    const auto file = Safetensors(dup);
    auto r = core::ParseSafetensors(file, core::Limits{});
    auto sax = core::ParseSafetensorsSax(file, core::Limits{});
    REQUIRE_FALSE(r.ok());
    REQUIRE_FALSE(sax.ok());
    CHECK(r.error().code == core::Code::kStDuplicateTensor);
    CHECK(r.error().offset == sax.error().offset);
    CHECK(r.error().message == sax.error().message);
    CHECK(r.error().message.find(names[5]) != std::string::npos);
  }
}

TEST_CASE("tensor table: the probe budget, at N and N+1", "[core][tensor_table][limits]") {
  // k names in one run cost 0 + 1 + ... + (k-1) = k(k-1)/2 probes: 17 names
  // take 136 = 8 x 17 (the budget exactly), 18 take 153 > 8 x 18.
  static_assert(core::kMaxProbesPerName == 8);
  const std::vector<std::string> names = CollidingNames(18, 9);
  core::TensorTable at = TableOf({names.begin(), names.begin() + 17});
  core::TensorTable past = TableOf(names);
  const core::NameCheck a = TableAccess::FindDuplicateName(at);
  const core::NameCheck b = TableAccess::FindDuplicateName(past);
  CHECK_FALSE(a.sorted);
  CHECK_FALSE(a.duplicate);
  CHECK(b.sorted);
  CHECK_FALSE(b.duplicate);
}
