// Issue 9 point 4: a file truncated after it was opened (or while it is
// scanned) is an MG-IO-CHANGED / MG-IO-READ error from ScanOpened, never a
// crash (SIGBUS through a mapping) and never a verdict on the bytes left.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "modelgate/scanner.h"

namespace core = modelgate::core;
namespace scanner = modelgate::scanner;
namespace fs = std::filesystem;

namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "mg-regress-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string Write(const std::string& name, const std::vector<uint8_t>& bytes) const {
    std::string p = (path_ / name).string();
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw std::runtime_error("cannot create " + p);
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) {
        ::close(fd);
        throw std::runtime_error("cannot write " + p);
      }
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    return p;
  }

 private:
  fs::path path_;
};

// BigPickle is a protocol-2 pickle of one `payload_bytes`-byte bytes object
// (BINBYTES, 4-byte length) that calls os.system after it: every loader
// model must read to the end to see the call.
std::vector<uint8_t> BigPickle(uint32_t payload_bytes) {
  std::vector<uint8_t> p = {0x80, 0x02, 'B'};
  for (int i = 0; i < 4; ++i) p.push_back(static_cast<uint8_t>(payload_bytes >> (8 * i)));
  p.insert(p.end(), payload_bytes, 'x');
  p.push_back('0');  // POP
  const std::string tail = "cos\nsystem\n(S'true'\ntR.";
  p.insert(p.end(), tail.begin(), tail.end());
  return p;
}

bool HasIoFinding(const scanner::FileScan& s) {
  for (const auto& f : s.findings) {
    if (f.id == "MG-IO-CHANGED" || f.id == "MG-IO-READ") return true;
  }
  return false;
}

}  // namespace

TEST_CASE("truncated after open: ScanOpened is MG-IO-CHANGED, never a crash",
          "[regress][io][truncate]") {
  TempDir dir;
  constexpr uint32_t kPayload = 4u << 20;  // well past the sniff window and a page
  const std::vector<uint8_t> bytes = BigPickle(kPayload);
  // Whole, the file is judged (the call at its end is critical): the
  // truncation below is what makes it unjudgeable, not the content.
  {
    const std::string whole = dir.Write("whole.pkl", bytes);
    scanner::FileScan s = scanner::ScanFile(whole, false, scanner::ScanOptions{});
    REQUIRE_FALSE(s.io_error);
    bool critical = false;
    for (const auto& f : s.findings) critical |= f.severity == core::Severity::kCritical;
    REQUIRE(critical);
  }
  // Cut inside the payload (not page aligned), inside the first page, and to
  // nothing at all.
  for (off_t keep : {off_t{(1 << 20) + 123}, off_t{100}, off_t{0}}) {
    CAPTURE(keep);
    const std::string path = dir.Write("w.pkl", bytes);
    auto opened = core::OpenRegularFile(path, false);
    REQUIRE(opened.ok());
    REQUIRE(opened.value().size == bytes.size());
    REQUIRE(::truncate(path.c_str(), keep) == 0);
    scanner::FileScan s = scanner::ScanOpened(opened.value(), path, scanner::ScanOptions{});
    CHECK(s.io_error);
    CHECK(HasIoFinding(s));
    CHECK(core::CheckUnchanged(opened.value()).error().code == core::Code::kIoChanged);
  }
}

TEST_CASE("truncated while being scanned: an error or a verdict, never a crash",
          "[regress][io][truncate]") {
  TempDir dir;
  const std::vector<uint8_t> bytes = BigPickle(16u << 20);
  for (int round = 0; round < 8; ++round) {
    CAPTURE(round);
    const std::string path = dir.Write("race.pkl", bytes);
    auto opened = core::OpenRegularFile(path, false);
    REQUIRE(opened.ok());
    std::atomic<bool> started{false};
    bool cut = false;
    std::thread cutter([&] {
      while (!started.load()) std::this_thread::yield();
      // Vary the moment: 0..7 ms into the scan.
      std::this_thread::sleep_for(std::chrono::microseconds(1000 * round));
      cut = ::truncate(path.c_str(), 4096 + round) == 0;
    });
    started.store(true);
    scanner::FileScan s = scanner::ScanOpened(opened.value(), path, scanner::ScanOptions{});
    cutter.join();
    REQUIRE(cut);
    // Whatever the scan saw, it said so coherently, and the re-check before
    // a verdict sees the cut.
    if (s.io_error) CHECK(HasIoFinding(s));
    CHECK_FALSE(core::CheckUnchanged(opened.value()).ok());
  }
}
