// A JSON reader for the one document fsdp-ckpt reads: fsdp_checkpoint_describe's description of
// a checkpoint (the tool sees checkpoints only through the C API). Objects keep their keys'
// order; numbers are doubles (the library writes them with 17 significant digits, which read
// back as the same double).
#pragma once

#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fsdp_tool {

struct Json {
  enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  std::string text;
  std::vector<Json> items;                           // an array's
  std::vector<std::pair<std::string, Json>> fields;  // an object's, in order

  // The field `key` of an object (a null value when absent).
  const Json& operator[](const std::string& key) const {
    static const Json null;
    for (const auto& [k, v] : fields)
      if (k == key) return v;
    return null;
  }
  long long integer() const { return static_cast<long long>(number); }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : s_(text) {}

  Json document() {
    Json v = value();
    space();
    if (i_ != s_.size()) bad("text after the document");
    return v;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    throw std::runtime_error("checkpoint description: " + what + " at byte " + std::to_string(i_));
  }
  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t'))
      ++i_;
  }
  bool take(char c) {
    space();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  void expect(char c) {
    if (!take(c)) bad(std::string("expected '") + c + "'");
  }
  bool word(const char* w) {
    const std::string t(w);
    if (s_.compare(i_, t.size(), t) != 0) return false;
    i_ += t.size();
    return true;
  }

  Json value() {
    space();
    if (i_ >= s_.size()) bad("unexpected end");
    Json v;
    const char c = s_[i_];
    if (c == '{') {
      v.kind = Json::Kind::Object;
      ++i_;
      if (take('}')) return v;
      do {
        space();
        std::string key = string();
        expect(':');
        v.fields.emplace_back(std::move(key), value());
      } while (take(','));
      expect('}');
    } else if (c == '[') {
      v.kind = Json::Kind::Array;
      ++i_;
      if (take(']')) return v;
      do v.items.push_back(value());
      while (take(','));
      expect(']');
    } else if (c == '"') {
      v.kind = Json::Kind::String;
      v.text = string();
    } else if (word("true") || word("false")) {
      v.kind = Json::Kind::Bool;
      v.boolean = s_[i_ - 1] == 'e' && s_[i_ - 2] == 'u';
    } else if (word("null")) {
      v.kind = Json::Kind::Null;
    } else {
      const char* begin = s_.c_str() + i_;
      char* end = nullptr;
      v.kind = Json::Kind::Number;
      v.number = std::strtod(begin, &end);
      if (end == begin) bad("not a JSON value");
      i_ += static_cast<std::size_t>(end - begin);
    }
    return v;
  }

  std::string string() {
    if (i_ >= s_.size() || s_[i_] != '"') bad("expected a string");
    std::string out;
    for (++i_; i_ < s_.size() && s_[i_] != '"'; ++i_) {
      if (s_[i_] != '\\') {
        out += s_[i_];
        continue;
      }
      if (++i_ >= s_.size()) bad("unterminated escape");
      const char e = s_[i_];
      if (e == 'u') {
        if (i_ + 4 >= s_.size()) bad("short \\u escape");
        const unsigned code = static_cast<unsigned>(std::stoul(s_.substr(i_ + 1, 4), nullptr, 16));
        i_ += 4;
        if (code < 0x80) {
          out += static_cast<char>(code);
        } else if (code < 0x800) {
          out += static_cast<char>(0xC0 | (code >> 6));
          out += static_cast<char>(0x80 | (code & 0x3F));
        } else {
          out += static_cast<char>(0xE0 | (code >> 12));
          out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
          out += static_cast<char>(0x80 | (code & 0x3F));
        }
      } else {
        const std::map<char, char> plain = {{'"', '"'},  {'\\', '\\'}, {'/', '/'},  {'b', '\b'},
                                            {'f', '\f'}, {'n', '\n'},  {'r', '\r'}, {'t', '\t'}};
        const auto it = plain.find(e);
        if (it == plain.end()) bad("unknown escape");
        out += it->second;
      }
    }
    if (i_ >= s_.size()) bad("unterminated string");
    ++i_;
    return out;
  }

  const std::string& s_;
  std::size_t i_ = 0;
};

}  // namespace fsdp_tool
