// replay_main drives a fuzz target without libFuzzer: it calls
// LLVMFuzzerTestOneInput once on every file named on the command line
// (directories are walked recursively, in sorted order). libFuzzer-style
// flags (`-runs=0`, `-dict=...`) are ignored so ctest can pass the same
// arguments either way. Replay only: the inputs are our own seed corpus.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);
// Present when linked with a sanitizer runtime (MG_SANITIZE).
extern "C" __attribute__((weak)) void __sanitizer_set_death_callback(void (*callback)(void));

namespace {

namespace fs = std::filesystem;

// The input being replayed, named when it kills the process (a trap from an
// invariant, a signal, or a sanitizer report) so a failing ctest says which.
const char* g_current = nullptr;

void NameCurrentInput() {
  if (g_current == nullptr) return;
  static const char kPrefix[] = "\nreplay: failing input: ";
  ssize_t ignored = write(STDERR_FILENO, kPrefix, sizeof kPrefix - 1);
  ignored = write(STDERR_FILENO, g_current, strlen(g_current));
  ignored = write(STDERR_FILENO, "\n", 1);
  (void)ignored;
}

void OnFatalSignal(int sig) {
  NameCurrentInput();
  raise(sig);  // SA_RESETHAND restored the default action
}

void InstallCrashReporters() {
  struct sigaction sa {};
  sa.sa_handler = OnFatalSignal;
  sa.sa_flags = SA_RESETHAND;
  for (int sig : {SIGILL, SIGTRAP, SIGABRT, SIGFPE, SIGBUS, SIGSEGV}) sigaction(sig, &sa, nullptr);
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(NameCurrentInput);
}

bool ReadWholeFile(const fs::path& path, std::vector<uint8_t>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

// CollectInputs appends `path` (a file) or every regular file below it.
bool CollectInputs(const fs::path& path, std::vector<fs::path>* out) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> found;
    for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end;
         it.increment(ec)) {
      if (it->is_regular_file(ec)) found.push_back(it->path());
    }
    if (ec) {
      std::fprintf(stderr, "replay: %s: %s\n", path.c_str(), ec.message().c_str());
      return false;
    }
    std::sort(found.begin(), found.end());
    out->insert(out->end(), found.begin(), found.end());
    return true;
  }
  if (!fs::exists(path, ec)) {
    std::fprintf(stderr, "replay: %s: no such file or directory\n", path.c_str());
    return false;
  }
  out->push_back(path);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  InstallCrashReporters();
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<fs::path> inputs;
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() > 1 && arg[0] == '-') continue;  // libFuzzer flag
    ok &= CollectInputs(arg, &inputs);
  }
  size_t replayed = 0;
  for (const fs::path& path : inputs) {
    std::vector<uint8_t> bytes;
    if (!ReadWholeFile(path, &bytes)) {
      std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
      ok = false;
      continue;
    }
    // A heap copy of exactly `size` bytes (vector capacity may be larger),
    // so ASan catches a read one past the end.
    std::unique_ptr<uint8_t[]> exact(new uint8_t[bytes.size()]);
    std::copy(bytes.begin(), bytes.end(), exact.get());
    g_current = path.c_str();
    LLVMFuzzerTestOneInput(exact.get(), bytes.size());
    g_current = nullptr;
    ++replayed;
  }
  std::fprintf(stderr, "replay: %zu input(s) ran\n", replayed);
  return ok ? 0 : 1;
}
