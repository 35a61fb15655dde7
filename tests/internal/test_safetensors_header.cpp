// The safetensors header and index parsers (checkpoint/safetensors_format.hpp) over the library's
// one JSON reader: a header written by safetensors_header_json reads back as written (offsets
// beyond 2^53, which a double would round, exactly; metadata; escaped names), and each malformed
// header or index is refused with fsdp::Error(Format) naming what is wrong.
#include <cstdint>
#include <cstdio>
#include <string>

#include "base/error.hpp"
#include "check.hpp"
#include "checkpoint/safetensors_format.hpp"

using fsdp::ckpt::parse_safetensors;
using fsdp::ckpt::parse_safetensors_index;

namespace {

// Whether `parse` throws a Format error whose message contains `words`.
template <class Parse>
void refused(Parse parse, const std::string& words, const std::string& what) {
  try {
    parse();
  } catch (const fsdp::Error& e) {
    const std::string m = e.what();
    check(e.code() == fsdp::Errc::Format && m.find(words) != std::string::npos,
          what + ": got '" + m + "', wanted a Format error with '" + words + "'");
    return;
  }
  check(false, what + ": accepted");
}

void header(const std::string& json, uint64_t buffer, const std::string& words,
            const std::string& what) {
  refused([&] { parse_safetensors(json, 8 + json.size() + buffer); }, words, what);
}

}  // namespace

int main() {
  // Two tensors written out of data order, a name with a quote, metadata; read back.
  std::vector<fsdp::ckpt::TensorEntry> t(2);
  t[0] = {"b.\"w\"", "F32", {2, 3}, 0, 24};
  t[1] = {"a", "BF16", {5}, 24, 34};
  const std::string json = fsdp::ckpt::safetensors_header_json(t, {{"format", "pt"}});
  check(json.size() % 8 == 0, "the header is padded to 8 bytes");
  const auto h = parse_safetensors(json, 8 + json.size() + 34);
  check(h.tensors.size() == 2 && h.tensors[0].name == "b.\"w\"" && h.tensors[1].name == "a" &&
            h.tensors[0].shape == std::vector<int64_t>{2, 3} && h.tensors[1].dtype == "BF16" &&
            h.tensors[1].begin == 24 && h.tensors[1].end == 34,
        "a written header reads back");
  check(h.metadata.size() == 1 && h.metadata.at("format") == "pt", "metadata reads back");
  check(h.data_start == 8 + json.size(), "the data start after the header");

  // An extent and offsets past 2^53 (2^53 + 1 is not a double) are read exactly: the message
  // reports the byte count the header claims, to the byte.
  const uint64_t big = (uint64_t{1} << 53) + 1;
  const std::string wide = "{\"x\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string(big) +
                           "],\"data_offsets\":[0," + std::to_string(big) + "]}}";
  header(wide, 1, "cover " + std::to_string(big) + " bytes", "an offset beyond 2^53, exactly");
  const std::string far = "{\"x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" +
                          std::to_string(big) + "," + std::to_string(big + 1) + "]}}";
  header(far, 1, "hole or overlap", "a tensor after a hole");

  // Malformed headers.
  const std::string x = "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}";
  header("{" + x + "," + x + "}", 4, "duplicate key 'x'", "a name twice");
  header("[1]", 0, "not an object", "an array");
  header("{" + x + "} x", 4, "not valid JSON", "text after the object");
  header("{\"x\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "needs dtype, shape and data_offsets",
         "no data_offsets");
  header("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"y\":1}}", 4,
         "unknown field 'y'", "an unknown field");
  header("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4,
         "data_offsets needs two numbers", "three offsets");
  header("{\"x\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4,
         "'x': shape: expected an integer", "a fractional extent");
  header("{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
         "'x': shape: expected an integer", "a negative extent");
  header("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,18446744073709551616]}}", 4,
         "expected an integer from 0 to 2^64 - 1", "an offset of 2^64");
  header("{\"x\":{\"dtype\":\"F32\",\"shape\":[9223372036854775808],\"data_offsets\":[0,4]}}", 4,
         "an extent beyond 2^63", "an extent of 2^63");
  header("{\"x\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'x': dtype is a number",
         "a dtype that is not a string");
  header("{\"x\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype Q7",
         "an unknown dtype");
  header("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
         "do not match its shape", "offsets against the shape");
  header("{" + x + "}", 8, "truncated or padded", "a padded file");
  header("{\"__metadata__\":{\"k\":1}}", 0, "'__metadata__': 'k' is a number", "metadata");
  header("{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]", 4, "not valid JSON",
         "a cut header");

  // The index of a sharded model.
  const auto index = parse_safetensors_index(
      "{\"metadata\": {\"total_size\": 9007199254740993}, \"weight_map\": {\"a\": \"m-1.st\"}}");
  check(index.weight_map.size() == 1 && index.weight_map.at("a") == "m-1.st" &&
            index.metadata.at("total_size") == "9007199254740993",
        "an index reads back, its total_size exactly");
  const auto idx = [](const std::string& s) { return [s] { parse_safetensors_index(s); }; };
  refused(idx("{\"metadata\": {}}"), "no weight_map", "an index without weight_map");
  refused(idx("{\"weight_map\": {\"a\": \"f\", \"a\": \"g\"}}"), "'a' listed twice",
          "a tensor in two files");
  refused(idx("{\"weight_map\": {}, \"x\": 1}"), "unknown key 'x'", "an unknown key");
  refused(idx("{\"weight_map\": {\"a\": 3}}"), "'weight_map': 'a' is a number", "a file number");
  std::printf("test_safetensors_header: %s\n", failures ? "FAILED" : "PASS");
  return failures ? 1 : 0;
}
