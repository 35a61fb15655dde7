#include "capi/handles.hpp"

#include <mutex>
#include <string>
#include <unordered_map>

namespace fsdp::capi {
namespace {

enum class Kind { Context, Unit, Optimizer, GradScaler, Request };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Context: return "context";
    case Kind::Unit: return "unit";
    case Kind::Optimizer: return "optimizer";
    case Kind::GradScaler: return "grad scaler";
    case Kind::Request: return "request";
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

void retire(const void* h, Retired why) noexcept {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.live.erase(h);
  try {
    r.retired[h] = why;
  } catch (...) {  // out of memory: the handle then reads as foreign, still rejected
  }
}

Context& context_from(fsdp_context_t h, const char* arg) {
  return *static_cast<Context*>(const_cast<void*>(lookup(h, Kind::Context, arg)));
}

Unit& unit_from(fsdp_unit_t h, const char* arg) {
  return *static_cast<Unit*>(const_cast<void*>(lookup(h, Kind::Unit, arg)));
}

Optimizer& optimizer_from(fsdp_optimizer_t h, const char* arg) {
  return *static_cast<Optimizer*>(const_cast<void*>(lookup(h, Kind::Optimizer, arg)));
}

Request& request_from(fsdp_request_t h, const char* arg) {
  return *static_cast<Request*>(const_cast<void*>(lookup(h, Kind::Request, arg)));
}

GradScaler& grad_scaler_from(fsdp_grad_scaler_t h, const char* arg) {
  return *static_cast<GradScaler*>(const_cast<void*>(lookup(h, Kind::GradScaler, arg)));
}

}  // namespace fsdp::capi
