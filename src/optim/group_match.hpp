// Which hyperparameter group a parameter belongs to. Groups are addressed by glob patterns over
// parameter names (fnmatch(3) with no flags: '\' quotes the next character, '*' and '?' also
// match '/' and '.'); group 0 holds the defaults and takes every parameter that no later group's
// pattern matches. The optimizer, checkpoints and the bindings (fsdp_param_group_of) all ask here.
#pragma once

#include <fnmatch.h>

#include <cstddef>

namespace fsdp {

inline bool group_pattern_matches(const char* pattern, const char* name) {
  return fnmatch(pattern, name, 0) == 0;
}

// The first group g in [1, ngroups) whose pattern_of(g) matches `name`, else 0.
template <class PatternOf>
int group_of(std::size_t ngroups, PatternOf pattern_of, const char* name) {
  for (std::size_t g = 1; g < ngroups; ++g)
    if (group_pattern_matches(pattern_of(g), name)) return static_cast<int>(g);
  return 0;
}

}  // namespace fsdp
