// What each C entry point tells the call log and debug mode's cross-rank check (CallInfo).
#pragma once

#include <cstring>
#include <string>

#include "base/fingerprint.hpp"
#include "core/unit.hpp"
#include "diag/call_log.hpp"

namespace fsdp::capi {

// A collective on one unit, moving `bytes` of `dtype`.
inline CallInfo unit_call(const char* call, const Unit& u, std::size_t bytes, DType dtype) {
  CallInfo c;
  c.call = call;
  c.unit_id = u.id();
  c.unit = u.label();
  c.bytes = bytes;
  c.dtype = static_cast<int>(dtype);
  return c;
}

// Debug mode also compares whether the unshard claims a prefetch: ranks that released
// prefetches at different points (a local call made on some ranks only) would otherwise start
// the all-gather on some ranks and not on others.
inline CallInfo unshard_call(const char* call, const Unit& u) {
  CallInfo c = unit_call(call, u, u.unsharded_bytes(), u.precision().param);
  c.fingerprint = u.prefetched() ? 1 : 0;
  if (u.prefetched()) c.unit += " (prefetched: claimed)";
  // hpZ: the all-gather stays inside the node only if every rank kept its secondary partition.
  if (!u.prefetched() && u.has_secondary()) {
    c.fingerprint = 2;
    c.unit += " (hpZ: from the node's secondary partitions)";
  }
  return c;
}

inline CallInfo reduce_call(const char* call, const Unit& u) {
  return unit_call(call, u, u.full_grad_bytes(), u.precision().reduce);
}

// A collective of the whole context; `args` fingerprints its arguments (0: none compared).
inline CallInfo context_call(const char* call, uint64_t args = 0) {
  CallInfo c;
  c.call = call;
  c.fingerprint = args;
  return c;
}

// A wait: logged for the watchdog, not compared across ranks.
inline CallInfo wait_call(const char* call) {
  CallInfo c;
  c.call = call;
  c.collective = false;
  return c;
}

}  // namespace fsdp::capi
