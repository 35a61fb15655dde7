// JSON string literals, for the texts checkpoints and safetensors headers carry.
#pragma once

#include <cstdio>
#include <string>

namespace fsdp::ckpt {

// `s` as a JSON string literal: quotes, backslashes and control characters escaped.
inline std::string json_quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\', out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace fsdp::ckpt
