#include "checkpoint/safetensors_format.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>

#include "base/error.hpp"
#include "checkpoint/json_text.hpp"

namespace fsdp::ckpt {

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
          unsigned cp = hex4();
          if (cp >= 0xdc00 && cp < 0xe000) bad("a lone low surrogate in a \\u escape");
          if (cp >= 0xd800 && cp < 0xdc00) {  // a high surrogate: its low half must follow
            if (i_ + 2 > s_.size() || s_[i_] != '\\' || s_[i_ + 1] != 'u')
              bad("a lone high surrogate in a \\u escape");
            i_ += 2;
            const unsigned lo = hex4();
            if (lo < 0xdc00 || lo >= 0xe000) bad("a high surrogate without its low half");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
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
    uint64_t v = 0;
    for (; i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; ++i_) {
      const unsigned d = static_cast<unsigned>(s_[i_] - '0');
      if (v > (UINT64_MAX - d) / 10) bad("an integer beyond 2^64 - 1");
      v = v * 10 + d;
    }
    if (start == i_) bad("expected a non-negative integer");
    return v;
  }
  // Four hex digits of a \u escape (std::stoul would also take signs, spaces and fewer digits).
  unsigned hex4() {
    if (i_ + 4 > s_.size()) bad("a \\u escape needs four hex digits");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) bad("a \\u escape needs four hex digits");
      v = v * 16 + static_cast<unsigned>(d);
    }
    return v;
  }
  // An object: member(key) reads each value, in order.
  template <class Member>
  void object(Member&& member) {
    expect('{');
    for (bool first = true; !peek('}'); first = false) {
      if (!first) expect(',');
      const std::string key = str();
      expect(':');
      member(key);
    }
    expect('}');
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
  std::set<std::string> seen;
  j.object([&](const std::string& key) {
    if (!seen.insert(key).second) j.bad("duplicate key '" + key + "'");
    if (key == "__metadata__") {
      j.object([&](const std::string& k) { h.metadata[k] = j.str(); });
      return;
    }
    TensorEntry t;
    t.name = key;
    bool have_dtype = false, have_shape = false, have_offsets = false;
    j.object([&](const std::string& field) {
      if (field == "dtype") {
        t.dtype = j.str(), have_dtype = true;
      } else if (field == "shape") {
        for (uint64_t e : j.integers()) {
          if (e > static_cast<uint64_t>(INT64_MAX)) j.bad("'" + key + "': an extent beyond 2^63");
          t.shape.push_back(static_cast<int64_t>(e));
        }
        have_shape = true;
      } else if (field == "data_offsets") {
        const auto o = j.integers();
        if (o.size() != 2) j.bad("'" + key + "': data_offsets needs two numbers");
        t.begin = o[0], t.end = o[1], have_offsets = true;
      } else {
        j.bad("'" + key + "': unknown field '" + field + "'");
      }
    });
    if (!have_dtype || !have_shape || !have_offsets)
      j.bad("'" + key + "': needs dtype, shape and data_offsets");
    h.tensors.push_back(std::move(t));
  });
  if (!j.at_end()) j.bad("text after the header object");
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const TensorEntry& a, const TensorEntry& b) { return a.begin < b.begin; });
  uint64_t expected = 0;
  for (const TensorEntry& t : h.tensors) {
    const std::size_t es = safetensors_dtype_size(t.dtype);
    if (es == 0) fail(Errc::Format, "safetensors: '" + t.name + "': unknown dtype " + t.dtype);
    // The byte count, refused before it can wrap: a header whose shape overflows 64 bits could
    // otherwise claim a tiny buffer for a huge tensor.
    uint64_t n = es;
    for (int64_t e : t.shape)
      if (__builtin_mul_overflow(n, static_cast<uint64_t>(e), &n))
        fail(Errc::Format, "safetensors: '" + t.name + "': its shape overflows 64 bits");
    if (t.end < t.begin || t.end - t.begin != n)
      fail(Errc::Format, "safetensors: '" + t.name + "': data_offsets do not match its shape");
    if (t.begin != expected)
      fail(Errc::Format, "safetensors: '" + t.name + "': the byte buffer has a hole or overlap");
    expected = t.end;
  }
  if (file_size < h.data_start || file_size - h.data_start != expected)
    fail(Errc::Format, "safetensors: the tensors cover " + std::to_string(expected) +
                           " bytes but the file holds " +
                           std::to_string(file_size < h.data_start ? 0 : file_size - h.data_start) +
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

}  // namespace fsdp::ckpt

namespace fsdp::ckpt {

SafetensorsIndex parse_safetensors_index(const std::string& json) {
  SafetensorsIndex index;
  Json j(json);
  bool have_map = false, have_metadata = false;
  j.object([&](const std::string& key) {
    const bool is_map = key == "weight_map";
    if (!is_map && key != "metadata") j.bad("unknown key '" + key + "'");
    bool& seen = is_map ? have_map : have_metadata;
    if (seen) j.bad("duplicate key '" + key + "'");
    seen = true;
    j.object([&](const std::string& k) {
      if (is_map) {
        if (!index.weight_map.emplace(k, j.str()).second) j.bad("'" + k + "' listed twice");
      } else {  // metadata values: strings or integers (total_size)
        index.metadata[k] = j.peek('"') ? j.str() : std::to_string(j.integer());
      }
    });
  });
  if (!j.at_end()) j.bad("text after the index object");
  if (!have_map) j.bad("no weight_map");
  return index;
}

std::string safetensors_index_json(uint64_t total_size,
                                   const std::map<std::string, std::string>& weight_map) {
  std::string j = "{\n  \"metadata\": {\n    \"total_size\": " + std::to_string(total_size) +
                  "\n  },\n  \"weight_map\": {";
  bool first = true;
  for (const auto& [name, file] : weight_map)
    j += std::string(first ? "" : ",") + "\n    " + json_quote(name) + ": " + json_quote(file),
        first = false;
  return j + "\n  }\n}\n";
}

}  // namespace fsdp::ckpt
