// What each C entry point tells the call log and debug mode's cross-rank check (CallInfo).
#pragma once

#include <cstring>
#include <initializer_list>
#include <string>

#include "base/fingerprint.hpp"
#include "core/context.hpp"
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
  if (u.used_by_any_ranks()) {  // one-sided: nothing to compare across ranks
    c.collective = false;
    return c;
  }
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
  CallInfo c = unit_call(call, u, u.full_grad_bytes(), u.precision().reduce);
  c.collective = !u.used_by_any_ranks();  // kept for the step boundary: local
  return c;
}

// The same, with debug mode's refusal: why this rank cannot make the call (its units' state),
// sent with the call so that the other ranks fail too instead of waiting in the collective.
inline CallInfo checked_unshard_call(const char* call, const Unit& u, bool async) {
  CallInfo c = unshard_call(call, u);
  if (u.context().debug_collectives() && c.collective) c.refusal = u.unshard_refusal(async);
  return c;
}
inline CallInfo checked_reduce_call(const char* call, const Unit& u) {
  CallInfo c = reduce_call(call, u);
  if (u.context().debug_collectives() && c.collective) c.refusal = u.reduce_refusal();
  return c;
}

// fsdp_gather_params: the unit's whole padded master values.
inline CallInfo gather_call(const char* call, const Unit& u) {
  const FlatLayout& l = u.layout();
  return unit_call(call, u, l.padded_numel() * l.element_size(), l.dtype());
}

// A collective of the whole context; `args` fingerprints its arguments (0: none compared).
inline CallInfo context_call(const char* call, uint64_t args = 0) {
  CallInfo c;
  c.call = call;
  c.fingerprint = args;
  return c;
}

// A call of the update phase fsdp_step_boundary opens (core/step_boundary.hpp): `phase` says
// whether it continues it (an optimizer step) or restarts it (a norm, the grad scaler).
inline CallInfo update_call(const char* call, CallInfo::Phase phase, uint64_t args = 0) {
  CallInfo c = context_call(call, args);
  c.phase = phase;
  return c;
}

// The fingerprint of a call's scalar arguments, for context_call.
inline uint64_t arguments_fingerprint(std::initializer_list<uint64_t> args) {
  Fingerprint f;
  for (const uint64_t a : args) f.add(a);
  return f.value();
}

// A wait: logged for the watchdog, not compared across ranks.
inline CallInfo wait_call(const char* call) {
  CallInfo c;
  c.call = call;
  c.collective = false;
  return c;
}

}  // namespace fsdp::capi
