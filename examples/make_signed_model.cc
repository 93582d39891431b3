// make_signed_model DIR: creates DIR if needed, writes a small F32 model, signs it with a fresh
// key through the library, and writes a tampered copy -- the inputs of the
// load_verified tests, and a minimal example of keygen + sign by API.
//
//   DIR/key.key, DIR/key.pub        a new Ed25519 key pair (old ones replaced)
//   DIR/model.safetensors           signed
//   DIR/tampered.safetensors        the same with one data byte flipped
//   DIR/unsigned.safetensors        the model before signing
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <bit>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "modelgate/signer.h"

namespace signer = modelgate::signer;

namespace {

using Bytes = std::vector<uint8_t>;

void AppendF32(Bytes& out, float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(bits >> (8 * i)));
}

// Model: "layer.weight" F32 [2, 3] = 0.5 1.5 ... 5.5, "layer.bias" F32 [3]
// = -1 -2 -3, header padded with spaces as the reference writer does.
Bytes Model() {
  Bytes data;
  for (int i = 0; i < 6; ++i) AppendF32(data, static_cast<float>(i) + 0.5f);
  for (int i = 1; i <= 3; ++i) AppendF32(data, -static_cast<float>(i));
  std::string header =
      R"({"layer.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("layer.bias":{"dtype":"F32","shape":[3],"data_offsets":[24,36]},)"
      R"("__metadata__":{"format":"pt"}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  Bytes out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

bool Write(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return static_cast<bool>(out);
}

int Die(const std::string& what) {
  std::cerr << "make_signed_model: " << what << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return Die("usage: make_signed_model DIR");
  const std::string dir = argv[1];
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Die("cannot create " + dir);
  ::unlink((dir + "/key.key").c_str());  // Keygen never overwrites
  ::unlink((dir + "/key.pub").c_str());
  auto keys = signer::Keygen(dir + "/key");
  if (!keys.ok()) return Die(keys.error().message);
  auto key = signer::LoadPrivateKey(keys.value().private_path);
  if (!key.ok()) return Die(key.error().message);

  const Bytes model = Model();
  if (!Write(dir + "/unsigned.safetensors", model) || !Write(dir + "/model.safetensors", model)) {
    return Die("cannot write into " + dir);
  }
  auto signed_model = signer::SignFile(dir + "/model.safetensors", key.value(), {});
  if (!signed_model.ok()) return Die(signed_model.error().message);

  std::ifstream in(dir + "/model.safetensors", std::ios::binary);
  Bytes tampered((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  tampered.back() ^= 0x01;  // last byte of layer.bias
  if (!Write(dir + "/tampered.safetensors", tampered)) return Die("cannot write into " + dir);
  std::cout << "signed " << dir << "/model.safetensors with kid "
            << keys.value().public_key.kid_hex() << "\n";
  return 0;
}
