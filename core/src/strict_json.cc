#include "modelgate/strict_json.h"

#include <string>
#include <utility>
#include <vector>

namespace modelgate::core {
namespace {

using json = nlohmann::json;

// StrictDom builds a DOM through nlohmann's SAX interface so that every key
// is seen: a duplicate key at any level is an error (the DOM parser keeps
// the last), as is nesting deeper than the bound.
class StrictDom : public nlohmann::json_sax<json> {
 public:
  explicit StrictDom(size_t max_depth) : max_depth_(max_depth) {}

  bool null() override { return Put(json(nullptr)); }
  bool boolean(bool v) override { return Put(json(v)); }
  bool number_integer(number_integer_t v) override { return Put(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return Put(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return Put(json(v)); }
  bool string(string_t& v) override { return Put(json(std::move(v))); }
  bool binary(binary_t&) override { return Fail("binary value"); }
  bool start_object(std::size_t) override { return Open(json::object()); }
  bool start_array(std::size_t) override { return Open(json::array()); }
  bool end_object() override {
    stack_.pop_back();
    return true;
  }
  bool end_array() override {
    stack_.pop_back();
    return true;
  }
  bool key(string_t& k) override {
    json* obj = stack_.back();
    if (obj->contains(k)) return Fail("duplicate key " + Quoted(k));
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    if (error_.empty()) {
      error_ = "JSON syntax error at byte " + std::to_string(position) + ": " + ex.what();
    }
    return false;
  }

  json& root() { return root_; }
  const std::string& error() const { return error_; }

 private:
  bool Fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
    return false;
  }
  json* Place(json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json* parent = stack_.back();
    if (parent->is_array()) {
      parent->push_back(std::move(v));
      return &parent->back();
    }
    return &((*parent)[key_] = std::move(v));
  }
  bool Put(json v) {
    Place(std::move(v));
    return true;
  }
  bool Open(json v) {
    if (stack_.size() >= max_depth_) {
      return Fail("nested deeper than " + std::to_string(max_depth_));
    }
    stack_.push_back(Place(std::move(v)));
    return true;
  }

  size_t max_depth_;
  json root_;
  std::vector<json*> stack_;
  std::string key_;
  std::string error_;
};

}  // namespace

Result<nlohmann::json> ParseStrictJson(std::string_view text, size_t max_depth, Code code,
                                       std::string_view what) {
  StrictDom dom(max_depth);
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &dom, json::input_format_t::json,
                         /*strict=*/true);
  } catch (const std::exception& e) {  // nlohmann may throw on invalid input
    return Error{code, kNoOffset, std::string(what) + ": " + e.what()};
  }
  if (!ok) {
    return Error{code, kNoOffset,
                 std::string(what) + ": " + (dom.error().empty() ? "invalid JSON" : dom.error())};
  }
  return std::move(dom.root());
}

}  // namespace modelgate::core
