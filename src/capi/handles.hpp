// The registry of live handles. A handle is checked here before it is dereferenced, so a NULL,
// foreign, destroyed or finalized handle is reported instead of crashing.
#pragma once

#include "core/context.hpp"
#include "core/unit.hpp"
#include "fsdp.h"
#include "optim/grad_scaler.hpp"
#include "optim/optimizer.hpp"
#include "plan/plan_model.hpp"

namespace fsdp::capi {

enum class Retired { Destroyed, Finalized };

void register_context(Context* c);
void register_unit(Unit* u);
void register_optimizer(Optimizer* o);
void register_grad_scaler(GradScaler* s);
void register_request(Request* r);
void register_plan(plan::PlanModel* p);
void retire(const void* handle, Retired why) noexcept;

// Throw InvalidHandle / DestroyedHandle / Finalized naming `arg`, and Aborted for an object of an
// aborted context (fsdp_abort).
Context& context_from(fsdp_context_t h, const char* arg);
// The same, but an aborted context is returned (fsdp_finalize, fsdp_abort).
Context& context_for_abort(fsdp_context_t h, const char* arg);
Unit& unit_from(fsdp_unit_t h, const char* arg);
// `index` as one of u's own parameters (not a tie's alias); throws OutOfRange naming it.
std::size_t param_index(const Unit& u, int index);
// The same, for a parameter that has a gradient: InvalidArgument naming it when it is frozen.
std::size_t trainable_index(const Unit& u, int index);
Optimizer& optimizer_from(fsdp_optimizer_t h, const char* arg);
GradScaler& grad_scaler_from(fsdp_grad_scaler_t h, const char* arg);
Request& request_from(fsdp_request_t h, const char* arg);
// A plan has no context: only the handle itself is checked.
plan::PlanModel& plan_from(fsdp_plan_t h, const char* arg);

inline fsdp_context_t to_handle(Context* c) {
  return reinterpret_cast<fsdp_context_t>(c);
}
inline fsdp_unit_t to_handle(Unit* u) {
  return reinterpret_cast<fsdp_unit_t>(u);
}
inline fsdp_optimizer_t to_handle(Optimizer* o) {
  return reinterpret_cast<fsdp_optimizer_t>(o);
}
inline fsdp_grad_scaler_t to_handle(GradScaler* s) {
  return reinterpret_cast<fsdp_grad_scaler_t>(s);
}
inline fsdp_request_t to_handle(Request* r) {
  return reinterpret_cast<fsdp_request_t>(r);
}
inline fsdp_plan_t to_handle(plan::PlanModel* p) {
  return reinterpret_cast<fsdp_plan_t>(p);
}

}  // namespace fsdp::capi
