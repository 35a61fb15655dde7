// Reads a fuzz input as a stream of choices: each call takes the next bytes, and an exhausted
// input yields zeros, so every input, however short, describes one complete structure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, std::size_t size) : p_(data), n_(size) {}
  uint8_t u8() { return n_ ? (--n_, *p_++) : 0; }
  uint64_t u64() {
    uint64_t v = 0;
    for (int b = 0; b < 8; ++b) v |= uint64_t(u8()) << (8 * b);
    return v;
  }
  int64_t i64() { return static_cast<int64_t>(u64()); }
  double f64() {
    const uint64_t bits = u64();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }
  std::size_t pick(std::size_t n) { return n ? u8() % n : 0; }
  bool coin() { return u8() & 1; }
  // A string of up to `max` bytes (its length comes first).
  std::string str(std::size_t max) {
    std::size_t len = pick(max + 1);
    std::string s;
    while (len-- && n_) s += static_cast<char>(u8());
    return s;
  }
  std::size_t left() const { return n_; }

 private:
  const uint8_t* p_;
  std::size_t n_;
};
