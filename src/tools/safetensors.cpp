#include "tools/safetensors.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "checkpoint/json_text.hpp"
#include "core/error.hpp"

namespace fsdp::tools {

std::size_t safetensors_dtype_size(const std::string& t) {
  if (t == "F64" || t == "I64" || t == "U64") return 8;
  if (t == "F32" || t == "I32" || t == "U32") return 4;
  if (t == "F16" || t == "BF16" || t == "I16" || t == "U16") return 2;
  if (t == "I8" || t == "U8" || t == "BOOL" || t == "F8_E5M2" || t == "F8_E4M3") return 1;
  return 0;
}

namespace {

// A small JSON reader for the header: objects, arrays, strings, integers.
class Json {
 public:
  explicit Json(const std::string& s) : s_(s) {}
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r'))
      ++i_;
  }
  bool peek(char c) {
    ws();
    return i_ < s_.size() && s_[i_] == c;
  }
  void expect(char c) {
    if (!peek(c)) bad(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string str() {
    expect('"');
    std::string out;
    while (i_ < s_.size() && s_[i_] != '"') {
      char c = s_[i_++];
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) bad("unterminated escape");
      c = s_[i_++];
      switch (c) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          if (i_ + 4 > s_.size()) bad("bad \\u escape");
          unsigned cp = static_cast<unsigned>(std::stoul(s_.substr(i_, 4), nullptr, 16));
          i_ += 4;
          if (cp >= 0xd800 && cp < 0xdc00 && i_ + 6 <= s_.size() && s_[i_] == '\\') {
            const unsigned lo =
                static_cast<unsigned>(std::stoul(s_.substr(i_ + 2, 4), nullptr, 16));
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            i_ += 6;
          }
          utf8(cp, out);
          break;
        }
        default: out += c;
      }
    }
    expect('"');
    return out;
  }
  uint64_t integer() {
    ws();
    const std::size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    if (start == i_) bad("expected a non-negative integer");
    return std::stoull(s_.substr(start, i_ - start));
  }
  std::vector<uint64_t> integers() {
    std::vector<uint64_t> v;
    expect('[');
    if (peek(']')) return ++i_, v;
    do v.push_back(integer());
    while (peek(',') && ++i_);
    expect(']');
    return v;
  }
  [[noreturn]] void bad(const std::string& what) {
    fail(Errc::Format, "safetensors header: " + what + " at byte " + std::to_string(i_));
  }
  bool at_end() {
    ws();
    return i_ == s_.size();
  }

 private:
  static void utf8(unsigned cp, std::string& out) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6)), out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f)),
          out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18)),
          out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f)),
          out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  const std::string& s_;
  std::size_t i_ = 0;
};

}  // namespace

SafetensorsHeader parse_safetensors(const std::string& json, uint64_t file_size) {
  SafetensorsHeader h;
  h.data_start = 8 + json.size();
  Json j(json);
  j.expect('{');
  std::set<std::string> seen;
  bool first = true;
  while (!j.peek('}')) {
    if (!first) j.expect(',');
    first = false;
    const std::string key = j.str();
    j.expect(':');
    if (!seen.insert(key).second) j.bad("duplicate key '" + key + "'");
    if (key == "__metadata__") {
      j.expect('{');
      bool f2 = true;
      while (!j.peek('}')) {
        if (!f2) j.expect(',');
        f2 = false;
        const std::string k = j.str();
        j.expect(':');
        h.metadata[k] = j.str();
      }
      j.expect('}');
      continue;
    }
    TensorEntry t;
    t.name = key;
    bool have_dtype = false, have_shape = false, have_offsets = false;
    j.expect('{');
    bool f2 = true;
    while (!j.peek('}')) {
      if (!f2) j.expect(',');
      f2 = false;
      const std::string field = j.str();
      j.expect(':');
      if (field == "dtype") {
        t.dtype = j.str(), have_dtype = true;
      } else if (field == "shape") {
        for (uint64_t e : j.integers()) t.shape.push_back(static_cast<int64_t>(e));
        have_shape = true;
      } else if (field == "data_offsets") {
        const auto o = j.integers();
        if (o.size() != 2) j.bad("'" + key + "': data_offsets needs two numbers");
        t.begin = o[0], t.end = o[1], have_offsets = true;
      } else {
        j.bad("'" + key + "': unknown field '" + field + "'");
      }
    }
    j.expect('}');
    if (!have_dtype || !have_shape || !have_offsets)
      j.bad("'" + key + "': needs dtype, shape and data_offsets");
    h.tensors.push_back(std::move(t));
  }
  j.expect('}');
  if (!j.at_end()) j.bad("text after the header object");
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const TensorEntry& a, const TensorEntry& b) { return a.begin < b.begin; });
  uint64_t expected = 0;
  for (const TensorEntry& t : h.tensors) {
    const std::size_t es = safetensors_dtype_size(t.dtype);
    if (es == 0) fail(Errc::Format, "safetensors: '" + t.name + "': unknown dtype " + t.dtype);
    uint64_t n = 1;
    for (int64_t e : t.shape) n *= static_cast<uint64_t>(e);
    if (t.end < t.begin || t.end - t.begin != n * es)
      fail(Errc::Format, "safetensors: '" + t.name + "': data_offsets do not match its shape");
    if (t.begin != expected)
      fail(Errc::Format, "safetensors: '" + t.name + "': the byte buffer has a hole or overlap");
    expected = t.end;
  }
  if (h.data_start + expected != file_size)
    fail(Errc::Format, "safetensors: the tensors cover " + std::to_string(expected) +
                           " bytes but the file holds " + std::to_string(file_size - h.data_start) +
                           " after the header (truncated or padded file)");
  return h;
}

std::string safetensors_header_json(const std::vector<TensorEntry>& tensors,
                                    const std::map<std::string, std::string>& metadata) {
  std::string j = "{";
  if (!metadata.empty()) {
    j += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata)
      j += (first ? "" : ",") + ckpt::json_quote(k) + ":" + ckpt::json_quote(v), first = false;
    j += "}";
  }
  for (const TensorEntry& t : tensors) {
    j += (j.size() > 1 ? "," : "") + ckpt::json_quote(t.name) + ":{\"dtype\":\"" + t.dtype +
         "\",\"shape\":[";
    for (std::size_t d = 0; d < t.shape.size(); ++d)
      j += (d ? "," : "") + std::to_string(t.shape[d]);
    j += "],\"data_offsets\":[" + std::to_string(t.begin) + "," + std::to_string(t.end) + "]}";
  }
  j += "}";
  j.append((8 - j.size() % 8) % 8, ' ');
  return j;
}

}  // namespace fsdp::tools
