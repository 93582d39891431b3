// bench_sign_verify: sign / verify / OpenVerified throughput on synthetic
// safetensors models, next to `openssl dgst -sha256` of the same file in
// the same run. Every measured operation runs in its own child process
// (fork + exec, wait4), so its wall time includes process start-up, as a
// user would see it, and its peak RSS (ru_maxrss) is that operation's alone.
//
//   bench_sign_verify all --dir DIR [--reps 3] [--models 256x16,1024x64,1024x1]
//   bench_sign_verify gen FILE TENSORS TENSOR_MIB       (unsigned model)
//   bench_sign_verify sign IN OUT | verify FILE | open FILE eager|copy|lazy
//
// Models are named SIZE_MIBxTENSORS: "1024x64" is 64 tensors of 16 MiB.
// The key is a fixed bench seed, so no key files are involved.
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "modelgate/signer.h"

namespace core = modelgate::core;
namespace signer = modelgate::signer;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_sign_verify: %s\n", what.c_str());
  std::exit(2);
}

signer::PrivateKey BenchKey() {
  std::array<uint8_t, signer::kSeedBytes> seed{};
  for (size_t i = 0; i < seed.size(); ++i) seed[i] = static_cast<uint8_t>(0xb0 + i);
  auto k = signer::PrivateKey::FromSeed(seed);
  if (!k.ok()) Die("FromSeed: " + k.error().message);
  return std::move(k).value();
}

// Gen writes an unsigned model of `tensors` U8 tensors of `tensor_mib` MiB
// each, filled with xorshift bytes, header padded as the reference does.
int Gen(const std::string& path, uint64_t tensors, uint64_t tensor_mib) {
  const uint64_t tensor_bytes = tensor_mib << 20;
  std::string header = "{";
  for (uint64_t i = 0; i < tensors; ++i) {
    char entry[160];
    std::snprintf(entry, sizeof entry,
                  "%s\"layer.%04llu.weight\":{\"dtype\":\"U8\",\"shape\":[%llu],\"data_offsets\":[%llu,%llu]}",
                  i ? "," : "", static_cast<unsigned long long>(i),
                  static_cast<unsigned long long>(tensor_bytes),
                  static_cast<unsigned long long>(i * tensor_bytes),
                  static_cast<unsigned long long>((i + 1) * tensor_bytes));
    header += entry;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) Die("cannot create " + path);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(header.size() >> (8 * i));
  std::fwrite(len, 1, 8, f);
  std::fwrite(header.data(), 1, header.size(), f);
  std::vector<uint64_t> block((size_t{16} << 20) / 8);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (uint64_t left = tensors * tensor_bytes; left > 0;) {
    for (auto& w : block) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      w = x;
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, block.size() * 8));
    if (std::fwrite(block.data(), 1, n, f) != n) Die("write failed: " + path);
    left -= n;
  }
  if (std::fclose(f) != 0) Die("close failed: " + path);
  return 0;
}

int Sign(const std::string& in, const std::string& out) {
  signer::SignOptions opt;
  opt.created = 1764374400;
  auto r = signer::SignFile(in, BenchKey(), opt, out);
  if (!r.ok()) Die("sign: " + std::string(core::FindingId(r.error().code)) + ": " + r.error().message);
  return 0;
}

// HashOptionsFromEnv: MG_BENCH_BUFFER_KIB / MG_BENCH_THREADS override the
// hash buffer and thread count (for tuning runs; unset: library defaults).
core::HashOptions HashOptionsFromEnv() {
  core::HashOptions h;
  if (const char* kib = std::getenv("MG_BENCH_BUFFER_KIB")) h.buffer_bytes = std::strtoull(kib, nullptr, 10) << 10;
  if (const char* t = std::getenv("MG_BENCH_THREADS")) h.threads = static_cast<unsigned>(std::atoi(t));
  return h;
}

int Verify(const std::string& path) {
  const signer::PublicKey key = BenchKey().public_key();
  signer::VerifyOptions opt;
  opt.hash = HashOptionsFromEnv();
  auto r = signer::VerifyFile(path, std::span<const signer::PublicKey>(&key, 1), opt);
  if (!r.ok()) Die("verify: " + r.error().message);
  if (!r.value().valid()) Die("verify: not valid: " + r.value().reason.message);
  return 0;
}

int Open(const std::string& path, const std::string& mode) {
  const signer::PublicKey key = BenchKey().public_key();
  signer::LoadOptions opt;
  opt.verify.hash = HashOptionsFromEnv();
  if (mode == "eager") {
    opt.mode = signer::LoadMode::kEager;
  } else if (mode == "copy") {
    opt.mode = signer::LoadMode::kCopy;
  } else if (mode == "lazy") {
    opt.mode = signer::LoadMode::kLazy;
  } else {
    Die("open: unknown mode " + mode);
  }
  auto m = signer::OpenVerified(path, std::span<const signer::PublicKey>(&key, 1), opt);
  if (!m.ok()) Die("open " + mode + ": " + m.error().message);
  // Lazy: check every tensor (as a loader that uses all of them would).
  core::Status all = m.value().CheckAll();
  if (!all.ok()) Die("open lazy: " + all.error().message);
  return 0;
}

struct Run {
  double seconds = 0;      // wall
  double cpu_seconds = 0;  // user + system, of the same (best) run
  double peak_rss_mb = 0;
};

// RunChild execs `argv` (argv[0] a path, or "self" for this program), waits
// with wait4, and returns its wall time and peak RSS; a failure is fatal.
Run RunChild(std::vector<std::string> argv) {
  std::fflush(stdout);
  const bool self = argv[0] == "self";
  const auto t0 = Clock::now();
  pid_t pid = fork();
  if (pid < 0) Die("fork failed");
  if (pid == 0) {
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    if (self) {
      execv("/proc/self/exe", args.data());
    } else {
      // openssl's output (the digest) is not wanted.
      if (!std::freopen("/dev/null", "w", stdout)) _exit(126);
      execvp(args[0], args.data());
    }
    std::perror("exec");
    _exit(127);
  }
  int status = 0;
  rusage ru{};
  if (wait4(pid, &status, 0, &ru) < 0) Die("wait4 failed");
  Run r;
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.peak_rss_mb = static_cast<double>(ru.ru_maxrss) / 1024.0;  // KiB
  auto secs = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6; };
  r.cpu_seconds = secs(ru.ru_utime) + secs(ru.ru_stime);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string cmd;
    for (auto& a : argv) cmd += a + " ";
    Die("child failed: " + cmd);
  }
  return r;
}

// Best is the run with the least wall time; its RSS is the largest seen.
Run Best(const std::vector<std::string>& argv, int reps) {
  Run best{1e30, 0, 0};
  double rss = 0;
  for (int i = 0; i < reps; ++i) {
    Run r = RunChild(argv);
    if (r.seconds < best.seconds) best = r;
    rss = std::max(rss, r.peak_rss_mb);
  }
  best.peak_rss_mb = rss;
  return best;
}

uint64_t FileBytes(const std::string& path) {
  struct stat s {};
  if (::stat(path.c_str(), &s) != 0) Die("cannot stat " + path);
  return static_cast<uint64_t>(s.st_size);
}

void Warm(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) Die("cannot read " + path);
  std::vector<char> buf(size_t{256} << 10);
  while (std::fread(buf.data(), 1, buf.size(), f) == buf.size()) {
  }
  std::fclose(f);
}

struct Model {
  uint64_t mib = 0, tensors = 0;
  std::string name() const { return std::to_string(mib) + "MiBx" + std::to_string(tensors); }
};

std::vector<Model> ParseModels(const std::string& spec) {
  std::vector<Model> out;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    const std::string item = spec.substr(pos, comma - pos);
    Model m;
    char x = 0;
    unsigned long long mib = 0, tensors = 0;
    if (std::sscanf(item.c_str(), "%llu%c%llu", &mib, &x, &tensors) != 3 || x != 'x' ||
        tensors == 0 || mib % tensors != 0) {
      Die("bad model spec '" + item + "' (SIZE_MIBxTENSORS, size a multiple of tensors)");
    }
    m.mib = mib;
    m.tensors = tensors;
    out.push_back(m);
    pos = comma + 1;
  }
  return out;
}

double RssMb() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long pages = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &pages, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1048576.0
                : 0;
}

int All(const std::string& dir, int reps, const std::string& models_spec) {
  const std::vector<Model> models = ParseModels(models_spec);
  std::printf("(each child's peak RSS includes this driver's %.1f MB at fork: a floor for every row)\n",
              RssMb());
  std::printf("%-12s %-16s %8s %9s %11s %7s %12s %12s\n", "model", "operation", "best_s", "MB/s",
              "vs_openssl", "cpu_s", "MB/cpu_s", "peak_RSS_MB");
  for (const Model& m : models) {
    const std::string base = dir + "/" + m.name();
    const std::string unsigned_path = base + ".unsigned.safetensors";
    const std::string signed_path = base + ".signed.safetensors";
    // In children too: a child's ru_maxrss starts at the parent's RSS when
    // it forked, so the parent stays small.
    RunChild({"self", "gen", unsigned_path, std::to_string(m.tensors),
              std::to_string(m.mib / m.tensors)});
    RunChild({"self", "sign", unsigned_path, signed_path});  // the file verify/open read
    Warm(unsigned_path);
    Warm(signed_path);
    const double mb = static_cast<double>(FileBytes(signed_path)) / 1e6;

    const Run openssl = Best({"openssl", "dgst", "-sha256", signed_path}, reps);
    struct Row {
      const char* label;
      std::vector<std::string> argv;
    };
    const std::vector<Row> rows = {
        {"sign (+fsync)", {"self", "sign", unsigned_path, base + ".resigned.safetensors"}},
        {"VerifyFile", {"self", "verify", signed_path}},
        {"open eager", {"self", "open", signed_path, "eager"}},
        {"open copy", {"self", "open", signed_path, "copy"}},
        {"open lazy+all", {"self", "open", signed_path, "lazy"}},
    };
    auto print = [&](const char* label, const Run& r) {
      std::printf("%-12s %-16s %8.3f %9.0f %10.2fx %7.3f %12.0f %12.1f\n", m.name().c_str(), label,
                  r.seconds, mb / r.seconds, openssl.seconds / r.seconds, r.cpu_seconds,
                  mb / r.cpu_seconds, r.peak_rss_mb);
    };
    print("openssl dgst", openssl);
    for (const Row& row : rows) print(row.label, Best(row.argv, reps));
    std::remove((base + ".resigned.safetensors").c_str());
    std::remove(unsigned_path.c_str());
    std::remove(signed_path.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  if (a.empty()) Die("usage: bench_sign_verify all --dir DIR [--reps N] [--models 256x16,...]");
  const std::string cmd = a[0];
  if (cmd == "gen" && a.size() == 4) {
    return Gen(a[1], std::strtoull(a[2].c_str(), nullptr, 10), std::strtoull(a[3].c_str(), nullptr, 10));
  }
  if (cmd == "sign" && a.size() == 3) return Sign(a[1], a[2]);
  if (cmd == "verify" && a.size() == 2) return Verify(a[1]);
  if (cmd == "open" && a.size() == 3) return Open(a[1], a[2]);
  if (cmd == "all") {
    std::string dir, models = "256x16,1024x64,1024x1";
    int reps = 3;
    for (size_t i = 1; i + 1 < a.size(); i += 2) {
      if (a[i] == "--dir") {
        dir = a[i + 1];
      } else if (a[i] == "--reps") {
        reps = std::max(1, std::atoi(a[i + 1].c_str()));
      } else if (a[i] == "--models") {
        models = a[i + 1];
      } else {
        Die("unknown option " + a[i]);
      }
    }
    if (dir.empty()) Die("all needs --dir DIR");
    return All(dir, reps, models);
  }
  Die("unknown command (all | gen | sign | verify | open)");
}
