// The internal tests' one check: a failed expectation is printed and counted; main turns the count
// (summed over the ranks where it runs on several) into the exit status.
#pragma once

#include <cstdio>
#include <string>

inline int failures = 0;

inline void check(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
}
