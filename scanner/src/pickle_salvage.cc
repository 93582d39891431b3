// The walk past a limit (see "--- salvage" below).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "pickle_machine.h"

namespace modelgate::scanner::pickle_internal {

// --- salvage -----------------------------------------------------------------
// Past a limit the machine stops, but what it did not read still runs on
// load: Salvage walks the rest of the input opcode by opcode (the table's
// argument shapes: exact, since opcodes delimit themselves), up to
// `streams` STOPs, keeping no stack and judging no call, and records every
// import. So padding before a payload cannot hide it: the analysis is
// incomplete (rejected) and still names the payload. STACK_GLOBAL takes the
// two strings pushed just before it, directly or through the memo; anything
// else leaves its name unresolved, and an unresolved name may be any global.

void Machine::SalvageImport(std::string module, std::string qualname, const std::string& after,
                            const char* unresolved) {
  std::string by = "walk past " + after;
  span_begin_ = span_end_ = 0;  // the walk records no import spans
  PickleImport imp;
  if (unresolved != nullptr) {
    imp.module = imp.written_module = "<unresolved>";
    imp.qualname = imp.written_qualname = "<unresolved>";
    imp.offset = op_offset_;
    imp.opcode = op_name_;
    imp.resolved_by = by;
    imp.stream = static_cast<uint32_t>(stream_index_);
    imp.safety = GlobalClass::kCritical;
    imp.reason = std::string(unresolved) + " past " + after + ", so it may import any global";
  } else {
    imp = Classify(std::move(module), std::move(qualname), by, false);
    if (imp.nesting) {  // its argument is not scanned past a limit
      imp.safety = GlobalClass::kUnknown;
      imp.nesting = false;
      imp.reason = "loads a nested pickle that is not scanned past " + after;
    }
  }
  rec_->Import(std::move(imp));
}

void Machine::Salvage(ByteReader& r, const std::string& after, uint64_t streams, bool own_memo) {
  struct Item {
    bool str = false;
    std::string_view text;
  };
  auto as_text = [](std::span<const uint8_t> b) {
    return std::string_view(reinterpret_cast<const char*>(b.data()), b.size());
  };
  Item last[2];  // the two most recent pushes, last[1] the newest
  auto push = [&](Item it) {
    last[0] = last[1];
    last[1] = it;
  };
  // Strings put in the memo, as views into the input; the machine's own
  // memo holds what the stream memoized before the limit.
  std::unordered_map<uint64_t, std::string_view> memo;
  bool machine_memo = own_memo;
  uint64_t memoized = own_memo ? memo_.size() : 0;
  auto get = [&](uint64_t idx) {
    if (auto it = memo.find(idx); it != memo.end()) return Item{true, it->second};
    if (machine_memo) {
      if (auto it = memo_.find(idx); it != memo_.end() && it->second->kind == VKind::kStr &&
                                     !it->second->truncated) {
        return Item{true, it->second->text()};
      }
    }
    return Item{};
  };
  auto put = [&](uint64_t idx) {
    if (!last[1].str) {
      memo.erase(idx);
    } else if (memo.size() < lim_.max_memo_entries || memo.count(idx) != 0) {
      memo[idx] = last[1].text;
    }
  };
  uint64_t stops = 0;
  while (!r.empty() && stops < streams) {
    op_offset_ = r.offset();
    const pi::Opcode* info = pi::FindOpcode(r.U8().value());
    if (info == nullptr) return;
    op_name_ = info->name;
    pi::OpcodeArgs a;
    if (!pi::ReadOpcodeArgs(*info, r, &a)) return;
    auto uint_arg = [&] {
      uint64_t v = 0;
      for (size_t i = a.first.size(); i > 0; --i) v = (v << 8) | a.first[i - 1];
      return v;
    };
    std::string_view t = as_text(a.first);
    switch (info->code) {
      case 'c':
      case 'i':
        SalvageImport(std::string(t), std::string(as_text(a.second)), after, nullptr);
        push({});
        break;
      case 0x93:
        if (last[0].str && last[1].str) {
          SalvageImport(std::string(last[0].text), std::string(last[1].text), after, nullptr);
        } else {
          SalvageImport("", "", after, "STACK_GLOBAL's operands are not two known strings");
        }
        push({});
        break;
      case 0x82:
      case 0x83:
      case 0x84:
        rec_->Import(ExtImport(static_cast<int64_t>(uint_arg())));
        push({});
        break;
      case 'X': case 0x8c: case 0x8d: case 'T': case 'U':
        push({true, t});
        break;
      case 'S':  // quoted; only escape-free text is taken as is
      case 'V':
        if (info->code == 'S' && t.size() >= 2) t = t.substr(1, t.size() - 2);
        push(t.find('\\') == std::string_view::npos ? Item{true, t} : Item{});
        break;
      case 'h': case 'j': push(get(uint_arg())); break;
      case 'g': {
        pi::IntParse i = pi::CMemoIndex(t);
        push(i.ok && i.fits && i.value >= 0 ? get(static_cast<uint64_t>(i.value)) : Item{});
        break;
      }
      case 'q': case 'r': put(uint_arg()); break;
      case 'p': {
        pi::IntParse i = pi::CMemoIndex(t);
        if (i.ok && i.fits && i.value >= 0) put(static_cast<uint64_t>(i.value));
        break;
      }
      case 0x94: put(memoized++); break;
      case '0': last[1] = last[0]; last[0] = Item{}; break;
      case 0x80: case 0x95: case '(': break;
      case '.':
        ++stops;
        memo.clear();
        machine_memo = false;
        memoized = 0;
        last[0] = last[1] = Item{};
        break;
      default: push({}); break;
    }
  }
}

}  // namespace modelgate::scanner::pickle_internal
