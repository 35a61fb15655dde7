// FNV-1a 64-bit hash over typed fields: cheap to exchange across ranks to prove they agree.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace fsdp {

class Fingerprint {
 public:
  void add(uint64_t v) {
    for (int i = 0; i < 8; ++i) byte(static_cast<unsigned char>(v >> (8 * i)));
  }
  // Length first, so ("ab","c") and ("a","bc") differ.
  void add(const std::string& s) {
    add(static_cast<uint64_t>(s.size()));
    for (unsigned char c : s) byte(c);
  }
  // Bit for bit: values that compare equal but differ in bits (0.0, -0.0) count as different.
  void add_double(double d) {
    uint64_t u;
    std::memcpy(&u, &d, sizeof u);
    add(u);
  }
  uint64_t value() const { return h_; }

 private:
  void byte(unsigned char c) {
    h_ ^= c;
    h_ *= 0x100000001b3ull;
  }
  uint64_t h_ = 0xcbf29ce484222325ull;
};

}  // namespace fsdp
