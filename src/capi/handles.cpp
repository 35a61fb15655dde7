#include "capi/handles.hpp"

#include <mutex>
#include <string>
#include <unordered_map>

namespace fsdp::capi {
namespace {

enum class Kind { Context, Unit, Optimizer, GradScaler, Request, Plan };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Context: return "context";
    case Kind::Unit: return "unit";
    case Kind::Optimizer: return "optimizer";
    case Kind::GradScaler: return "grad scaler";
    case Kind::Request: return "request";
    case Kind::Plan: return "plan";
  }
  return "handle";
}

// Retired addresses are remembered so a stale handle gets the precise status; an address is
// forgotten when the allocator reuses it for a new live object.
struct Registry {
  std::mutex mutex;
  std::unordered_map<const void*, Kind> live;
  std::unordered_map<const void*, Retired> retired;
};

Registry& registry() {
  static Registry r;
  return r;
}

void add(const void* h, Kind k) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.live[h] = k;
  r.retired.erase(h);
}

const void* lookup(const void* h, Kind want, const char* arg) {
  const char* kind = kind_name(want);
  if (!h) fail(Errc::InvalidHandle, std::string(arg) + ": NULL " + kind + " handle");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.find(h);
  if (it != r.live.end()) {
    if (it->second != want)
      fail(Errc::InvalidHandle, std::string(arg) + ": a " + kind_name(it->second) +
                                    " handle where a " + kind + " handle is expected");
    return h;
  }
  auto old = r.retired.find(h);
  if (old == r.retired.end())
    fail(Errc::InvalidHandle,
         std::string(arg) + ": not a libfsdp " + kind + " handle (foreign or corrupted pointer)");
  if (old->second == Retired::Finalized)
    fail(Errc::Finalized, std::string(arg) + ": the " + kind + "'s context was finalized");
  fail(Errc::DestroyedHandle,
       std::string(arg) + ": the " + kind +
           (want == Kind::Request ? " was already waited on" : " was destroyed"));
}

Context& live(Context& c, const char* arg) {
  if (c.aborted())
    fail(Errc::Aborted, std::string(arg) + ": its context was aborted (" + c.abort_reason() +
                            "); only fsdp_finalize is taken");
  return c;
}

}  // namespace

void register_context(Context* c) {
  add(c, Kind::Context);
}
void register_unit(Unit* u) {
  add(u, Kind::Unit);
}
void register_optimizer(Optimizer* o) {
  add(o, Kind::Optimizer);
}
void register_grad_scaler(GradScaler* s) {
  add(s, Kind::GradScaler);
}
void register_request(Request* r) {
  add(r, Kind::Request);
}
void register_plan(plan::PlanModel* p) {
  add(p, Kind::Plan);
}

void retire(const void* h, Retired why) noexcept {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.live.erase(h);
  try {
    r.retired[h] = why;
  } catch (...) {  // out of memory: the handle then reads as foreign, still rejected
  }
}

Context& context_for_abort(fsdp_context_t h, const char* arg) {
  return *static_cast<Context*>(const_cast<void*>(lookup(h, Kind::Context, arg)));
}

Context& context_from(fsdp_context_t h, const char* arg) {
  return live(context_for_abort(h, arg), arg);
}

Unit& unit_from(fsdp_unit_t h, const char* arg) {
  Unit& u = *static_cast<Unit*>(const_cast<void*>(lookup(h, Kind::Unit, arg)));
  live(u.context(), arg);
  return u;
}

std::size_t param_index(const Unit& u, int index) {
  const std::size_t n = u.layout().num_params();
  if (index < 0 || static_cast<std::size_t>(index) >= n)
    fail(Errc::OutOfRange, u.label() + ": index = " + std::to_string(index) + ": the unit has " +
                               std::to_string(n) + " parameters (0.." + std::to_string(n - 1) +
                               ")");
  return static_cast<std::size_t>(index);
}

std::size_t trainable_index(const Unit& u, int index) {
  const std::size_t i = param_index(u, index);
  if (!u.layout().param(i).requires_grad)
    fail(Errc::InvalidArgument, u.label() + ": index = " + std::to_string(index) + " ('" +
                                    u.layout().param(i).name +
                                    "'): the parameter has requires_grad = 0");
  return i;
}

Optimizer& optimizer_from(fsdp_optimizer_t h, const char* arg) {
  Optimizer& o = *static_cast<Optimizer*>(const_cast<void*>(lookup(h, Kind::Optimizer, arg)));
  live(o.context(), arg);
  return o;
}

Request& request_from(fsdp_request_t h, const char* arg) {
  Request& r = *static_cast<Request*>(const_cast<void*>(lookup(h, Kind::Request, arg)));
  live(*r.context, arg);
  return r;
}

plan::PlanModel& plan_from(fsdp_plan_t h, const char* arg) {
  return *static_cast<plan::PlanModel*>(const_cast<void*>(lookup(h, Kind::Plan, arg)));
}

GradScaler& grad_scaler_from(fsdp_grad_scaler_t h, const char* arg) {
  GradScaler& s = *static_cast<GradScaler*>(const_cast<void*>(lookup(h, Kind::GradScaler, arg)));
  live(s.context(), arg);
  return s;
}

}  // namespace fsdp::capi
