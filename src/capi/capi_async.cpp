// C entry points for asynchronous operations, requests and prefetch.
#include <string>

#include "capi/arguments.hpp"
#include "capi/calls.hpp"
#include "capi/guard.hpp"
#include "capi/handles.hpp"

using fsdp::Errc;
using fsdp::fail;
using fsdp::Unit;
using fsdp::capi::guard;
using fsdp::capi::unit_from;

namespace {

void hand_out(Unit& u, std::shared_ptr<fsdp::CommWorker::Task> task, fsdp_request_t* req) {
  if (!req) return;
  fsdp::Request& r = u.context().scheduler().add_request(u, std::move(task));
  fsdp::capi::register_request(&r);
  *req = fsdp::capi::to_handle(&r);
}

}  // namespace

extern "C" {

fsdp_status_t fsdp_unshard_async(fsdp_unit_t unit, fsdp_request_t* req) {
  return guard(__func__, [&] {
    Unit& u = unit_from(unit, "unit");
    fsdp::CallInfo info = fsdp::capi::unshard_call("fsdp_unshard_async", u);
    if (u.context().debug_collectives()) info.refusal = u.unshard_refusal(/*async=*/true);
    const fsdp::CallScope call = u.context().begin_call(info);
    hand_out(u, u.context().scheduler().caller_unshard(u, /*async=*/true), req);
  });
}

fsdp_status_t fsdp_reduce_grads_async(fsdp_unit_t unit, fsdp_request_t* req) {
  return guard(__func__, [&] {
    Unit& u = unit_from(unit, "unit");
    fsdp::CallInfo info = fsdp::capi::reduce_call("fsdp_reduce_grads_async", u);
    if (u.context().debug_collectives()) info.refusal = u.reduce_refusal();
    const fsdp::CallScope call = u.context().begin_call(info);
    hand_out(u, u.reduce_grads_async(), req);
  });
}

fsdp_status_t fsdp_wait(fsdp_request_t* req) {
  return guard(__func__, [&] {
    if (!req) fail(Errc::InvalidArgument, "req: NULL pointer to a request handle");
    fsdp::Request& r = fsdp::capi::request_from(*req, "*req");
    fsdp::capi::retire(&r, fsdp::capi::Retired::Destroyed);
    *req = nullptr;  // a request is gone once waited on, even when its operation failed
    const fsdp::CallScope call = r.context->begin_call(fsdp::capi::wait_call("fsdp_wait"));
    r.context->scheduler().wait(r);
  });
}

fsdp_status_t fsdp_unit_wait(fsdp_unit_t unit) {
  return guard(__func__, [&] {
    Unit& u = unit_from(unit, "unit");
    const fsdp::CallScope call = u.context().begin_call(fsdp::capi::wait_call("fsdp_unit_wait"));
    u.complete_pending();
  });
}

fsdp_status_t fsdp_context_async(fsdp_context_t ctx, int* progress_thread) {
  return guard(__func__, [&] {
    fsdp::Context& c = fsdp::capi::context_from(ctx, "ctx");
    fsdp::capi::require_output(progress_thread, "progress_thread");
    *progress_thread = c.worker().threaded() ? 1 : 0;
  });
}

fsdp_status_t fsdp_set_prefetch(fsdp_context_t ctx, int forward, int backward) {
  return guard(__func__, [&] {
    fsdp::Context& c = fsdp::capi::context_from(ctx, "ctx");
    if ((forward != 0 && forward != 1) || (backward != 0 && backward != 1))
      fail(Errc::InvalidArgument, "forward = " + std::to_string(forward) + ", backward = " +
                                      std::to_string(backward) + ": each must be 0 or 1");
    c.scheduler().set_prefetch(forward != 0, backward != 0);
  });
}

fsdp_status_t fsdp_begin_forward(fsdp_context_t ctx) {
  return guard(__func__, [&] {
    fsdp::Context& c = fsdp::capi::context_from(ctx, "ctx");
    const fsdp::CallScope call = c.begin_call(fsdp::capi::context_call("fsdp_begin_forward"));
    c.scheduler().begin_phase(fsdp::Phase::Forward);
  });
}

fsdp_status_t fsdp_begin_backward(fsdp_context_t ctx) {
  return guard(__func__, [&] {
    fsdp::Context& c = fsdp::capi::context_from(ctx, "ctx");
    const fsdp::CallScope call = c.begin_call(fsdp::capi::context_call("fsdp_begin_backward"));
    c.scheduler().begin_phase(fsdp::Phase::Backward);
  });
}

}  // extern "C"
