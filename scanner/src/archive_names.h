// Member names inside archives (zip, tar), judged the same way for both.
#pragma once

#include <string>

namespace modelgate::scanner {

// UnsafeNameReason says why a loader that joins `name` onto a directory
// could write or read outside it: parent steps, absolute paths, drive
// letters, backslashes, NUL or control bytes. nullptr when the name is safe.
inline const char* UnsafeNameReason(const std::string& name) {
  if (name.empty()) return "empty name";
  if (name[0] == '/') return "absolute path";
  if (name.size() >= 2 && name[1] == ':') return "drive letter";
  if (name.find('\\') != std::string::npos) return "backslash in name";
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7F) return "control character in name";
  }
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    if (name.compare(start, end - start, "..") == 0) return "'..' component";
    start = end + 1;
  }
  return nullptr;
}

}  // namespace modelgate::scanner
