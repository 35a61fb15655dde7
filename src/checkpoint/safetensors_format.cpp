#include "checkpoint/safetensors_format.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>

#include "base/error.hpp"
#include "base/json_reader.hpp"
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

[[noreturn]] void bad(const std::string& doc, const std::string& what) {
  fail(Errc::Format, doc + ": " + what);
}

const json::Value& object(const json::Value& v, const std::string& doc, const std::string& what) {
  if (v.kind != json::Value::Kind::Object)
    bad(doc, what + " is " + json::kind_name(v.kind) + ", not an object");
  return v;
}

const std::string& string(const json::Value& v, const std::string& doc, const std::string& what) {
  if (v.kind != json::Value::Kind::String)
    bad(doc, what + " is " + json::kind_name(v.kind) + ", not a string");
  return v.text;
}

uint64_t unsigned_integer(const json::Value& v, const std::string& doc, const std::string& what) {
  uint64_t n = 0;
  if (!v.exact_unsigned(&n)) bad(doc, what + ": expected an integer from 0 to 2^64 - 1");
  return n;
}

std::vector<uint64_t> unsigned_integers(const json::Value& v, const std::string& doc,
                                        const std::string& what) {
  if (v.kind != json::Value::Kind::Array)
    bad(doc, what + " is " + json::kind_name(v.kind) + ", not an array");
  std::vector<uint64_t> out;
  for (const json::Value& e : v.items) out.push_back(unsigned_integer(e, doc, what));
  return out;
}

}  // namespace

SafetensorsHeader parse_safetensors(const std::string& json, uint64_t file_size) {
  static const std::string doc = "safetensors header";
  SafetensorsHeader h;
  h.data_start = 8 + json.size();
  const json::Value parsed = json::parse(json, doc);
  const json::Value& root = object(parsed, doc, "the header");
  std::set<std::string> seen;
  for (const auto& [key, value] : root.fields) {
    if (!seen.insert(key).second) bad(doc, "duplicate key '" + key + "'");
    const std::string what = "'" + key + "'";
    if (key == "__metadata__") {
      for (const auto& [k, v] : object(value, doc, what).fields)
        h.metadata[k] = string(v, doc, what + ": '" + k + "'");
      continue;
    }
    TensorEntry t;
    t.name = key;
    bool have_dtype = false, have_shape = false, have_offsets = false;
    for (const auto& [field, v] : object(value, doc, what).fields) {
      if (field == "dtype") {
        t.dtype = string(v, doc, what + ": dtype"), have_dtype = true;
      } else if (field == "shape") {
        for (uint64_t e : unsigned_integers(v, doc, what + ": shape")) {
          if (e > static_cast<uint64_t>(INT64_MAX)) bad(doc, what + ": an extent beyond 2^63");
          t.shape.push_back(static_cast<int64_t>(e));
        }
        have_shape = true;
      } else if (field == "data_offsets") {
        const auto o = unsigned_integers(v, doc, what + ": data_offsets");
        if (o.size() != 2) bad(doc, what + ": data_offsets needs two numbers");
        t.begin = o[0], t.end = o[1], have_offsets = true;
      } else {
        bad(doc, what + ": unknown field '" + field + "'");
      }
    }
    if (!have_dtype || !have_shape || !have_offsets)
      bad(doc, what + ": needs dtype, shape and data_offsets");
    h.tensors.push_back(std::move(t));
  }
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
  static const std::string doc = "safetensors index";
  SafetensorsIndex index;
  const json::Value parsed = json::parse(json, doc);
  const json::Value& root = object(parsed, doc, "the index");
  bool have_map = false, have_metadata = false;
  for (const auto& [key, value] : root.fields) {
    const bool is_map = key == "weight_map";
    if (!is_map && key != "metadata") bad(doc, "unknown key '" + key + "'");
    bool& seen = is_map ? have_map : have_metadata;
    if (seen) bad(doc, "duplicate key '" + key + "'");
    seen = true;
    for (const auto& [k, v] : object(value, doc, "'" + key + "'").fields) {
      const std::string what = "'" + key + "': '" + k + "'";
      if (is_map) {
        if (!index.weight_map.emplace(k, string(v, doc, what)).second)
          bad(doc, "'" + k + "' listed twice");
      } else {  // metadata values: strings or integers (total_size)
        index.metadata[k] = v.kind == json::Value::Kind::String
                                ? v.text
                                : std::to_string(unsigned_integer(v, doc, what));
      }
    }
  }
  if (!have_map) bad(doc, "no weight_map");
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
