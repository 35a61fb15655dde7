// The library's one JSON reader, header-only and stateless so that the tools over the C API
// (fsdp-ckpt reading fsdp_checkpoint_describe's description) use the same one without linking
// the library's internals. The planner reads its model files with it (plan/model_sources.hpp).
// Objects keep their keys' order; numbers are doubles (the library writes them with 17 significant
// digits, which read back as the same double; integers are exact up to 2^53), and keep their text,
// from which Value::exact_unsigned reads integers up to 2^64 - 1 (offsets into files). Parsing
// follows the JSON grammar (RFC 8259) independently of the C locale; an error is fail(Errc::Format)
// naming the document, the byte offset, the line and the column.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"

namespace fsdp::json {

struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  std::string text;                                   // a string's; a number's as written
  std::vector<Value> items;                           // an array's
  std::vector<std::pair<std::string, Value>> fields;  // an object's, in order

  // The field `key` of an object, or nullptr when absent.
  const Value* find(const std::string& key) const {
    for (const auto& [k, v] : fields)
      if (k == key) return &v;
    return nullptr;
  }
  // The field `key` of an object (a null value when absent).
  const Value& operator[](const std::string& key) const {
    static const Value null;
    const Value* v = find(key);
    return v ? *v : null;
  }
  long long integer() const { return static_cast<long long>(number); }
  // A number written as a non-negative integer that fits 64 bits (no sign, fraction or exponent),
  // exactly; false for anything else.
  bool exact_unsigned(uint64_t* out) const {
    if (kind != Kind::Number || text.empty()) return false;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
    return ec == std::errc() && end == text.data() + text.size() && text[0] != '-';
  }
};

// Names of the kinds, for messages ("expected an object, got a string").
inline const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::Null: return "null";
    case Value::Kind::Bool: return "a boolean";
    case Value::Kind::Number: return "a number";
    case Value::Kind::String: return "a string";
    case Value::Kind::Array: return "an array";
    case Value::Kind::Object: return "an object";
  }
  return "unknown";
}

class Reader {
 public:
  // `where` names the document in messages: a file name, "checkpoint description".
  Reader(const std::string& text, std::string where) : s_(text), where_(std::move(where)) {}

  Value document() {
    Value v = value(0);
    space();
    if (i_ != s_.size()) bad("text after the document");
    return v;
  }

 private:
  // Deeper nesting is refused rather than recursed into (a hostile file would exhaust the stack).
  static constexpr int kMaxDepth = 256;

  [[noreturn]] void bad(const std::string& what) const {
    std::size_t line = 1, column = 1;
    for (std::size_t k = 0; k < i_ && k < s_.size(); ++k) {
      if (s_[k] == '\n') {
        ++line, column = 1;
      } else {
        ++column;
      }
    }
    fail(Errc::Format, where_ + ": " + what + " at byte " + std::to_string(i_) + " (line " +
                           std::to_string(line) + ", column " + std::to_string(column) +
                           "): not valid JSON");
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
  bool digit() const { return i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; }

  Value value(int depth) {
    space();
    if (i_ >= s_.size()) bad("unexpected end");
    if (depth > kMaxDepth) bad("nesting deeper than " + std::to_string(kMaxDepth));
    Value v;
    const char c = s_[i_];
    if (c == '{') {
      v.kind = Value::Kind::Object;
      ++i_;
      if (take('}')) return v;
      do {
        space();
        std::string key = string();
        expect(':');
        v.fields.emplace_back(std::move(key), value(depth + 1));
      } while (take(','));
      expect('}');
    } else if (c == '[') {
      v.kind = Value::Kind::Array;
      ++i_;
      if (take(']')) return v;
      do v.items.push_back(value(depth + 1));
      while (take(','));
      expect(']');
    } else if (c == '"') {
      v.kind = Value::Kind::String;
      v.text = string();
    } else if (word("true") || word("false")) {
      v.kind = Value::Kind::Bool;
      v.boolean = s_[i_ - 1] == 'e' && s_[i_ - 2] == 'u';
    } else if (word("null")) {
      v.kind = Value::Kind::Null;
    } else {
      v.kind = Value::Kind::Number;
      const std::size_t begin = i_;
      v.number = number();
      v.text = s_.substr(begin, i_ - begin);
    }
    return v;
  }

  // -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?, converted by from_chars (no locale).
  double number() {
    const std::size_t begin = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    if (!digit()) bad("not a JSON value");
    if (s_[i_] == '0') {
      ++i_;
    } else {
      while (digit()) ++i_;
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      if (!digit()) bad("expected a digit after '.'");
      while (digit()) ++i_;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digit()) bad("expected a digit in the exponent");
      while (digit()) ++i_;
    }
    double out = 0;
    const auto [end, ec] = std::from_chars(s_.data() + begin, s_.data() + i_, out);
    if (ec != std::errc() || end != s_.data() + i_) {
      i_ = begin;
      bad("a number out of range");
    }
    return out;
  }

  unsigned hex4() {
    if (i_ + 4 >= s_.size()) bad("short \\u escape");
    unsigned code = 0;
    for (int k = 1; k <= 4; ++k) {
      const char h = s_[i_ + k];
      const int d = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (d < 0) bad("bad \\u escape");
      code = code * 16 + static_cast<unsigned>(d);
    }
    i_ += 4;
    return code;
  }

  static void utf8(unsigned code, std::string& out) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xC0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xE0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (code & 0x3F));
    }
  }

  std::string string() {
    if (i_ >= s_.size() || s_[i_] != '"') bad("expected a string");
    std::string out;
    for (++i_; i_ < s_.size() && s_[i_] != '"'; ++i_) {
      if (static_cast<unsigned char>(s_[i_]) < 0x20) bad("a control character in a string");
      if (s_[i_] != '\\') {
        out += s_[i_];
        continue;
      }
      if (++i_ >= s_.size()) bad("unterminated escape");
      const char e = s_[i_];
      if (e == 'u') {
        unsigned code = hex4();
        if (code >= 0xDC00 && code < 0xE000) bad("a lone low surrogate in a \\u escape");
        if (code >= 0xD800 && code < 0xDC00) {  // a high surrogate: its low half must follow
          if (i_ + 2 >= s_.size() || s_[i_ + 1] != '\\' || s_[i_ + 2] != 'u')
            bad("a lone high surrogate in a \\u escape");
          i_ += 2;
          const unsigned low = hex4();
          if (low < 0xDC00 || low >= 0xE000) bad("a high surrogate without its low half");
          code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
        }
        utf8(code, out);
        continue;
      }
      static constexpr char kFrom[] = "\"\\/bfnrt", kTo[] = "\"\\/\b\f\n\r\t";
      const std::size_t k = std::string(kFrom).find(e);
      if (k == std::string::npos) bad("unknown escape");
      out += kTo[k];
    }
    if (i_ >= s_.size()) bad("unterminated string");
    ++i_;
    return out;
  }

  const std::string& s_;
  std::string where_;
  std::size_t i_ = 0;
};

// The document `text`, named `where` in messages.
inline Value parse(const std::string& text, const std::string& where) {
  return Reader(text, where).document();
}

}  // namespace fsdp::json
