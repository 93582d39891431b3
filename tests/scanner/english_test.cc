// Messages read as English (issue 10: "a unknown file"): the article before
// a word known only at run time comes from WithArticle.
#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <vector>

#include "modelgate/scanner.h"

namespace scanner = modelgate::scanner;

TEST_CASE("WithArticle: every format name as messages print it", "[scanner][english]") {
  const std::vector<std::pair<scanner::Format, const char*>> want = {
      {scanner::Format::kUnknown, "an unknown"},       {scanner::Format::kSafetensors, "a safetensors"},
      {scanner::Format::kPickle, "a pickle"},          {scanner::Format::kPytorchZip, "a pytorch-zip"},
      {scanner::Format::kPytorchTar, "a pytorch-tar"}, {scanner::Format::kNumpy, "a numpy"},
      {scanner::Format::kNumpyZip, "a numpy-zip"},     {scanner::Format::kJoblib, "a joblib"},
      {scanner::Format::kZip, "a zip"},                {scanner::Format::kTar, "a tar"},
      {scanner::Format::kGzip, "a gzip"},              {scanner::Format::kBzip2, "a bzip2"},
      {scanner::Format::kXz, "an xz"},                 {scanner::Format::kSevenZip, "a 7z"},
      {scanner::Format::kGguf, "a gguf"},              {scanner::Format::kOnnx, "an onnx"},
      {scanner::Format::kZlib, "a zlib"},              {scanner::Format::kLzma, "an lzma"},
      {scanner::Format::kLfsPointer, "an lfs-pointer"}, {scanner::Format::kZstd, "a zstd"},
      {scanner::Format::kLz4, "an lz4"},               {scanner::Format::kJoblibZf, "a joblib-zf"},
      {scanner::Format::kKeras, "a keras"},            {scanner::Format::kHdf5, "an hdf5"},
      {scanner::Format::kJson, "a json"},              {scanner::Format::kJinja, "a jinja"},
      {scanner::Format::kPython, "a python"},
  };
  REQUIRE(want.size() == static_cast<size_t>(scanner::kLastFormat) + 1);
  for (const auto& [format, text] : want) {
    CHECK(scanner::WithArticle(scanner::FormatName(format)) == text);
  }
}

TEST_CASE("WithArticle: vowel sounds, not vowel letters", "[scanner][english]") {
  const std::vector<std::pair<const char*, const char*>> want = {
      {"int", "an int"},          {"'int'", "an 'int'"},       {"NoneType", "a NoneType"},
      {"str", "a str"},           {"'tuple'", "a 'tuple'"},    {"object", "an object"},
      {"unknown", "an unknown"},  {"unsigned", "an unsigned"}, {"unicode", "a unicode"},
      {"UTF-8", "a UTF-8"},       {"one", "a one"},            {"hour", "an hour"},
      {"NPY", "an NPY"},          {"ZIP", "a ZIP"},            {"npz", "an npz"},
      {"8-bit", "an 8-bit"},      {"11", "an 11"},             {"110", "a 110"},
      {"18-byte", "an 18-byte"},  {"7", "a 7"},                {"", "a "},
  };
  for (const auto& [word, text] : want) CHECK(scanner::WithArticle(word) == text);
}
