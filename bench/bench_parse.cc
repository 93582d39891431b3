// bench_parse times the strict safetensors parser on its worst case and on
// a directory of ordinary files, and reports peak memory.
//
//   bench_parse [all] [--dir DIR] [--big FILE]   driver: one child per scenario
//   bench_parse gen-big FILE [--header-bytes N] [--tensors N]
//   bench_parse gen-small DIR [--count N]
//   bench_parse parse-big FILE [--repeat R]    ReadSafetensors, max_tensors 2M
//   bench_parse reject-big FILE [--repeat R]   default limits: kStTooManyTensors
//   bench_parse parse-dir DIR [--repeat R]     OpenRegularFile + ReadSafetensors
//
// The driver re-executes itself (/proc/self/exe) for each scenario, so each
// peak RSS (getrusage ru_maxrss) is that scenario's alone, not the
// generator's. Each child prints one table row.
#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "modelgate/core.h"

namespace {

namespace core = modelgate::core;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kDefaultHeaderBytes = 100'000'000;  // the default limit
constexpr uint64_t kRaisedMaxTensors = 2'000'000;
constexpr int kSmallFiles = 1000;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double PeakRssMb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB
}

double CurrentRssMb() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long pages = 0, resident = 0;
  int n = std::fscanf(f, "%lu %lu", &pages, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1048576.0;
}

// HeapInUseMb is what malloc has handed out and not had back.
double HeapInUseMb() {
  struct mallinfo2 mi = mallinfo2();
  return static_cast<double>(mi.uordblks + mi.hblkhd) / 1048576.0;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_parse: %s\n", what.c_str());
  std::exit(2);
}

bool WriteFile(const std::string& path, std::string_view bytes) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      close(fd);
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return close(fd) == 0;
}

void AppendU64(std::string* out, uint64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out->append(buf, r.ptr);
}

// Frame returns the file bytes for `header` (compact JSON text) laid out
// like the reference writer: 8-byte LE length, header padded with spaces so
// 8 + N is a multiple of 8, then the data.
std::string Frame(std::string header, uint64_t data_bytes) {
  while (header.size() % 8 != 0) header.push_back(' ');
  std::string file;
  file.reserve(8 + header.size() + data_bytes);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) file.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  file += header;
  for (uint64_t i = 0; i < data_bytes; ++i) file.push_back(static_cast<char>((i * 131) & 0xFF));
  return file;
}

// --- scenarios ---------------------------------------------------------------

void PrintRow(const char* scenario, const std::string& result, double best_s, double median_s,
              const std::string& rate, double peak_mb, double held_mb) {
  std::printf("%-11s %-34s %9.3f %9.3f  %-30s %8.1f %8.1f\n", scenario, result.c_str(), best_s,
              median_s, rate.c_str(), peak_mb, held_mb);
  std::fflush(stdout);
}

std::string Fmt(const char* fmt, double a, double b = 0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, fmt, a, b);
  return buf;
}

// GenBig writes the worst case: as many one-byte U8 tensors as fit in the
// header, `"t0000001":{"dtype":"U8","shape":[1],"data_offsets":[i,i+1]}`.
int GenBig(const std::string& path, uint64_t header_bytes, uint64_t max_count) {
  auto t0 = Clock::now();
  std::string h;
  h.reserve(header_bytes + 64);
  h.push_back('{');
  uint64_t count = 0;
  std::string entry;
  const uint64_t budget = header_bytes - 8;  // room for '}' and the padding
  while (count < max_count) {
    entry.clear();
    char name[32];
    std::snprintf(name, sizeof name, "%s\"t%07llu\":", count ? "," : "",
                  static_cast<unsigned long long>(count));
    entry += name;
    entry += R"({"dtype":"U8","shape":[1],"data_offsets":[)";
    AppendU64(&entry, count);
    entry.push_back(',');
    AppendU64(&entry, count + 1);
    entry += "]}";
    if (h.size() + entry.size() + 1 > budget) break;
    h += entry;
    ++count;
  }
  h.push_back('}');
  std::string file = Frame(std::move(h), count);
  if (!WriteFile(path, file)) Die("cannot write " + path);
  auto t1 = Clock::now();
  double s = Seconds(t0, t1);
  uint64_t n = file.size() - 8 - count;
  PrintRow("gen-big", std::to_string(count) + " tensors, N=" + std::to_string(n), s, s,
           Fmt("%.1f MB header", static_cast<double>(n) / 1e6), PeakRssMb(), 0);
  return 0;
}

// GenSmall writes `count` ordinary files: 12 tensors of mixed dtypes and
// 2-3 metadata entries, a few KiB each.
int GenSmall(const std::string& dir, int count) {
  auto t0 = Clock::now();
  mkdir(dir.c_str(), 0755);
  static const char* kDtypes[] = {"F32", "F16", "BF16", "I64", "U8", "F64"};
  static const int kBits[] = {32, 16, 16, 64, 8, 64};
  uint64_t total = 0;
  for (int f = 0; f < count; ++f) {
    std::string h = R"({"__metadata__":{"format":"pt","shard":")" + std::to_string(f) + "\"";
    if (f % 2) h += R"(,"note":"bench file")";
    h += "}";
    uint64_t off = 0;
    for (int t = 0; t < 12; ++t) {
      int d = (f + t) % 6;
      uint64_t rows = 1 + static_cast<uint64_t>((f * 7 + t * 3) % 8);
      uint64_t cols = 4 + static_cast<uint64_t>(t % 5);
      uint64_t bytes = rows * cols * static_cast<uint64_t>(kBits[d]) / 8;
      h += ",\"model.layers." + std::to_string(t / 4) + ".mlp.proj_" + std::to_string(t % 4) +
           ".weight\":{\"dtype\":\"" + kDtypes[d] + "\",\"shape\":[";
      AppendU64(&h, rows);
      h.push_back(',');
      AppendU64(&h, cols);
      h += "],\"data_offsets\":[";
      AppendU64(&h, off);
      h.push_back(',');
      AppendU64(&h, off + bytes);
      h += "]}";
      off += bytes;
    }
    h += "}";
    std::string file = Frame(std::move(h), off);
    char name[64];
    std::snprintf(name, sizeof name, "/shard-%05d.safetensors", f);
    if (!WriteFile(dir + name, file)) Die("cannot write " + dir + name);
    total += file.size();
  }
  auto t1 = Clock::now();
  double s = Seconds(t0, t1);
  PrintRow("gen-small", std::to_string(count) + " files", s, s,
           Fmt("%.1f KB avg", static_cast<double>(total) / count / 1e3), PeakRssMb(), 0);
  return 0;
}

struct Opened {
  int fd;
  uint64_t size;
};

Opened OpenForRead(const std::string& path) {
  auto f = core::OpenRegularFile(path, /*follow_symlink=*/false);
  if (!f.ok()) Die(path + ": " + f.error().message);
  // Keep the fd for the process lifetime; the OpenedFile closes its copy.
  int fd = dup(f.value().fd);
  if (fd < 0) Die("dup failed");
  return {fd, f.value().size};
}

// ParseBig times ReadSafetensors on the big file (expect_ok) or the
// default-limit rejection of it.
int ParseBig(const std::string& path, int repeat, bool raised) {
  Opened f = OpenForRead(path);
  core::Limits limits;
  if (raised) limits.max_tensors = kRaisedMaxTensors;
  std::vector<double> times;
  std::string result;
  double held = 0;
  uint64_t header_bytes = 0, tensors = 0;
  bool good = true;
  double base_rss = CurrentRssMb();
  for (int i = 0; i < repeat; ++i) {
    auto t0 = Clock::now();
    auto r = core::ReadSafetensors(f.fd, f.size, limits);
    auto t1 = Clock::now();
    times.push_back(Seconds(t0, t1));
    if (raised) {
      if (!r.ok()) {
        result = std::string("FAIL ") + std::string(core::FindingId(r.error().code)) + ": " +
                 r.error().message.substr(0, 60);
        good = false;
        break;
      }
      header_bytes = r.value().header_bytes;
      tensors = r.value().tensors.size();
      held = HeapInUseMb();  // the parsed result, still alive
      result = "ok, " + std::to_string(tensors) + " tensors";
    } else {
      if (r.ok() || r.error().code != core::Code::kStTooManyTensors) {
        result = std::string("UNEXPECTED ") +
                 (r.ok() ? std::string("accept") : std::string(core::FindingId(r.error().code)));
        good = false;
        break;
      }
      held = HeapInUseMb();
      result = std::string(core::FindingId(r.error().code)) + " @" +
               std::to_string(r.error().offset);
    }
  }
  if (!good) {
    PrintRow(raised ? "parse-big" : "reject-big", result, 0, 0, "", PeakRssMb(), 0);
    return 1;
  }
  double best = *std::min_element(times.begin(), times.end());
  double med = Median(times);
  std::string rate = raised ? Fmt("%.0f MB/s hdr, %.2f M tensors/s",
                                  static_cast<double>(header_bytes) / 1e6 / med,
                                  static_cast<double>(tensors) / 1e6 / med)
                            : Fmt("%.0f MB/s of file", static_cast<double>(f.size) / 1e6 / med);
  PrintRow(raised ? "parse-big" : "reject-big", result, best, med, rate, PeakRssMb() - base_rss,
           held);
  return 0;
}

int ParseDir(const std::string& dir, int repeat) {
  std::vector<std::string> paths;
  DIR* d = opendir(dir.c_str());
  if (!d) Die("cannot open " + dir);
  while (dirent* e = readdir(d)) {
    std::string_view n = e->d_name;
    if (n.size() > 12 && n.substr(n.size() - 12) == ".safetensors") paths.push_back(dir + "/" + e->d_name);
  }
  closedir(d);
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) Die("no .safetensors files in " + dir);
  core::Limits limits;
  std::vector<double> times;
  uint64_t tensors = 0;
  for (int i = 0; i < repeat; ++i) {
    tensors = 0;
    auto t0 = Clock::now();
    for (const std::string& p : paths) {
      auto f = core::OpenRegularFile(p, /*follow_symlink=*/false);
      if (!f.ok()) Die(p + ": " + f.error().message);
      auto r = core::ReadSafetensors(f.value().fd, f.value().size, limits);
      if (!r.ok()) Die(p + ": " + std::string(core::FindingId(r.error().code)) + ": " + r.error().message);
      tensors += r.value().tensors.size();
    }
    times.push_back(Seconds(t0, Clock::now()));
  }
  double best = *std::min_element(times.begin(), times.end());
  double med = Median(times);
  PrintRow("parse-dir", "ok, " + std::to_string(paths.size()) + " files, " + std::to_string(tensors) + " tensors",
           best, med, Fmt("%.0f files/s (best %.0f)", static_cast<double>(paths.size()) / med,
                          static_cast<double>(paths.size()) / best),
           PeakRssMb(), HeapInUseMb());
  return 0;
}

// RunChild re-executes this program with `args` and waits for it.
int RunChild(const std::vector<std::string>& args) {
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) Die("fork failed");
  if (pid == 0) {
    std::vector<char*> argv;
    std::string self = "bench_parse";
    argv.push_back(self.data());
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    std::perror("execv");
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) Die("waitpid failed");
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  std::fprintf(stderr, "bench_parse: child %s died (signal %d)\n", args[0].c_str(),
               WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return 1;
}

int All(std::string dir, std::string big) {
  bool made_dir = false;
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/mg-bench.XXXXXX";
    if (!mkdtemp(templ.data())) Die("mkdtemp failed");
    dir = templ;
    made_dir = true;
  }
  std::printf("data: %s\n", dir.c_str());
  std::printf("%-11s %-34s %9s %9s  %-30s %8s %8s\n", "scenario", "result", "best_s", "median_s",
              "rate (median)", "peak_MB", "held_MB");
  int rc = 0;
  if (big.empty()) {
    big = dir + "/big.safetensors";
    rc |= RunChild({"gen-big", big});
  }
  std::string small = dir + "/small";
  rc |= RunChild({"gen-small", small});
  rc |= RunChild({"parse-big", big});
  rc |= RunChild({"reject-big", big});
  rc |= RunChild({"parse-dir", small});
  std::printf("peak_MB: the child's ru_maxrss (parse-big/reject-big: minus RSS before parsing);\n"
              "held_MB: malloc'd bytes still in use after the last parse (the result).\n");
  if (made_dir) {
    std::string cmd = "rm -rf '" + dir + "'";
    if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "bench_parse: could not remove %s\n", dir.c_str());
  }
  return rc ? 1 : 0;
}

uint64_t ParseU64(const char* s) {
  uint64_t v = 0;
  auto r = std::from_chars(s, s + std::strlen(s), v);
  if (r.ec != std::errc() || *r.ptr != '\0') Die(std::string("not a number: ") + s);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string mode = args.empty() || args[0].rfind("--", 0) == 0 ? "all" : args[0];
  size_t first_opt = args.empty() || args[0].rfind("--", 0) == 0 ? 0 : 1;
  std::string positional;
  std::string dir, big;
  uint64_t header_bytes = kDefaultHeaderBytes, max_count = UINT64_MAX, count = kSmallFiles;
  int repeat = mode == "parse-dir" ? 5 : 3;
  for (size_t i = first_opt; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= args.size()) Die(a + " needs a value");
      return args[++i].c_str();
    };
    if (a == "--dir") dir = next();
    else if (a == "--big") big = next();
    else if (a == "--header-bytes") header_bytes = ParseU64(next());
    else if (a == "--tensors") max_count = ParseU64(next());
    else if (a == "--count") count = ParseU64(next());
    else if (a == "--repeat") repeat = static_cast<int>(ParseU64(next()));
    else if (a.rfind("--", 0) != 0 && positional.empty()) positional = a;
    else Die("unknown argument " + a);
  }
  if (repeat < 1) repeat = 1;
  if (mode == "all") return All(dir, big);
  if (positional.empty()) Die(mode + " needs a path");
  if (mode == "gen-big") {
    if (header_bytes < 16 || header_bytes % 8 != 0) Die("--header-bytes must be a multiple of 8, >= 16");
    return GenBig(positional, header_bytes, max_count);
  }
  if (mode == "gen-small") return GenSmall(positional, static_cast<int>(count));
  if (mode == "parse-big") return ParseBig(positional, repeat, /*raised=*/true);
  if (mode == "reject-big") return ParseBig(positional, repeat, /*raised=*/false);
  if (mode == "parse-dir") return ParseDir(positional, repeat);
  Die("unknown mode " + mode);
}
