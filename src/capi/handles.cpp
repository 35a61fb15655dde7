#include "capi/handles.hpp"

#include <mutex>
#include <string>
#include <unordered_map>

namespace fsdp::capi {
namespace {

enum class Kind { Context, Unit };

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
  const char* kind = want == Kind::Context ? "context" : "unit";
  if (!h) fail(Errc::InvalidHandle, std::string(arg) + ": NULL " + kind + " handle");
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.live.find(h);
  if (it != r.live.end()) {
    if (it->second != want)
      fail(Errc::InvalidHandle, std::string(arg) + ": a " +
                                    (it->second == Kind::Context ? "context" : "unit") +
                                    " handle where a " + kind + " handle is expected");
    return h;
  }
  auto old = r.retired.find(h);
  if (old == r.retired.end())
    fail(Errc::InvalidHandle,
         std::string(arg) + ": not a libfsdp " + kind + " handle (foreign or corrupted pointer)");
  if (old->second == Retired::Finalized)
    fail(Errc::Finalized, std::string(arg) + ": the " + kind + "'s context was finalized");
  fail(Errc::DestroyedHandle, std::string(arg) + ": the " + kind + " was destroyed");
}

}  // namespace

void register_context(Context* c) {
  add(c, Kind::Context);
}
void register_unit(Unit* u) {
  add(u, Kind::Unit);
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

}  // namespace fsdp::capi
