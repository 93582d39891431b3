// The progress line: when it draws, what a frame says, that it fits the
// terminal, and that it is erased. A pipe stands in for the terminal and a
// fake clock for time; no ticker thread, frames come from Tick().
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "progress.h"

namespace mc = modelgate::cli;

namespace {

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    REQUIRE(::pipe2(fds, O_NONBLOCK) == 0);
    r = fds[0];
    w = fds[1];
  }
  ~Pipe() {
    ::close(r);
    ::close(w);
  }
  std::string Drain() const {
    std::string s;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(r, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
    return s;
  }
};

struct Fake {
  uint64_t now = 1000;
  Pipe pipe;
  mc::Progress::Options Options(int width = 80) {
    mc::Progress::Options o;
    o.fd = pipe.w;
    o.width = width;
    o.ticker = false;
    o.now_ms = [this] { return now; };
    return o;
  }
};

size_t Columns(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

TEST_CASE("small files in a short run draw nothing, then the line appears after the delay") {
  Fake f;
  mc::Progress p({100, 200}, f.Options());
  p.StartFile(0, "a.pkl");
  p.Tick();
  f.now += 499;  // delay_ms is 500: nothing yet
  p.Tick();
  CHECK(f.pipe.Drain().empty());
  f.now += 1;
  p.Tick();
  const std::string frame = f.pipe.Drain();
  CHECK(frame.rfind("\r1/2 scanning [", 0) == 0);
  CHECK(frame.find("a.pkl\033[K") != std::string::npos);
  // Redraws wait for tick_ms.
  f.now += 99;
  p.Tick();
  CHECK(f.pipe.Drain().empty());
  f.now += 1;
  p.Tick();
  CHECK_FALSE(f.pipe.Drain().empty());
  p.Finish();
  CHECK(f.pipe.Drain() == "\r\033[K");
  p.Finish();  // idempotent
  CHECK(f.pipe.Drain().empty());
}

TEST_CASE("a run that drew nothing erases nothing") {
  Fake f;
  {
    mc::Progress p({10}, f.Options());
    p.StartFile(0, "x");
    p.EndFile();
  }  // destructor finishes
  CHECK(f.pipe.Drain().empty());
}

TEST_CASE("a large file draws at once, hashing moves the bar, the whole run is the 100%") {
  Fake f;
  auto o = f.Options();
  o.large_bytes = 1000;
  mc::Progress p({1000, 1000}, o);
  p.StartFile(0, "big.safetensors");
  CHECK(f.pipe.Drain() == "\r" + p.Frame() + "\033[K");
  INFO(p.Frame());
  CHECK(p.Frame().find("[------------]   0% 0 B/2.0 KiB 00:00") != std::string::npos);
  p.Phase("hashing");
  auto hashed = p.Hashed();
  hashed(250);
  hashed(250);
  CHECK(p.Frame().rfind("1/2 hashing [###---------]  25% 500 B/2.0 KiB 00:00  big.safetensors", 0) == 0);
  hashed(5000);  // more than the file (it grew): capped at the file's size
  CHECK(p.Frame().find(" 50% 1000 B/") != std::string::npos);
  p.EndFile();
  p.StartFile(1, "b");
  f.now += 61'000;
  CHECK(p.Frame().rfind("2/2 scanning [######------]  50% 1000 B/2.0 KiB 01:01  b", 0) == 0);
  p.EndFile();
  CHECK(p.Frame().find("[############] 100%") != std::string::npos);
}

TEST_CASE("frames fit the terminal at every width, whatever the path") {
  Fake f;
  const std::vector<std::string> paths = {
      "m.safetensors", std::string(300, 'p') + "/tail.bin",
      "d/\xc3\xa9\xc3\xa9\xc3\xa9\xe2\x82\xac/" + std::string(100, 'x'), "evil\n\033[2Jname"};
  for (const auto& path : paths) {
    for (int width : {0, 1, 2, 5, 20, 40, 63, 64, 79, 80, 200}) {
      mc::Progress p({UINT64_MAX, 5}, f.Options(width));  // sizes saturate, never wrap
      p.StartFile(0, path);
      const std::string frame = p.Frame();
      INFO("width " << width << " path " << path);
      CHECK(Columns(frame) <= static_cast<size_t>(width > 1 ? width - 1 : 0));
      CHECK(frame.find('\n') == std::string::npos);
      CHECK(frame.find('\033') == std::string::npos);  // a name cannot drive the terminal
      // Cut only at code point boundaries: never a continuation byte first.
      if (!frame.empty()) CHECK((static_cast<unsigned char>(frame[0]) & 0xC0) != 0x80);
    }
  }
  mc::Progress p({10}, f.Options(200));
  p.StartFile(0, std::string(300, 'p') + "/tail.bin");
  CHECK(p.Frame().find("...") != std::string::npos);
  CHECK(p.Frame().size() >= 9);
  CHECK(p.Frame().substr(p.Frame().size() - 9) == "/tail.bin");  // the end of a path is kept
}

TEST_CASE("HumanBytes") {
  CHECK(mc::HumanBytes(0) == "0 B");
  CHECK(mc::HumanBytes(1023) == "1023 B");
  CHECK(mc::HumanBytes(1024) == "1.0 KiB");
  CHECK(mc::HumanBytes(1536) == "1.5 KiB");
  CHECK(mc::HumanBytes(uint64_t{3} << 30) == "3.0 GiB");
  CHECK(mc::HumanBytes(UINT64_MAX) == "16.0 EiB");
}
