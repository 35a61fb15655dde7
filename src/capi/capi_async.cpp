// C entry points for asynchronous operations, requests and prefetch.
#include <string>

#include "capi/arguments.hpp"
#include "capi/calls.hpp"
#include "capi/entry_bodies.hpp"
#include "capi/guard.hpp"
#include "capi/handles.hpp"

using fsdp::Errc;
using fsdp::fail;
using fsdp::Unit;
using fsdp::capi::unit_from;

namespace {

void hand_out(Unit& u, std::shared_ptr<fsdp::CommWorker::Task> task, fsdp_request_t* req) {
  if (!req) return;
  fsdp::Request& r = u.context().scheduler().add_request(u, std::move(task));
  fsdp::capi::register_request(&r);
  *req = fsdp::capi::to_handle(&r);
}

}  // namespace

namespace fsdp::capi::body {

void fsdp_unshard_async(fsdp::Unit& u, fsdp_request_t* req) {
  hand_out(u, u.context().scheduler().caller_unshard(u, /*async=*/true), req);
}

void fsdp_reduce_grads_async(fsdp::Unit& u, fsdp_request_t* req) {
  hand_out(u, u.reduce_grads_async(), req);
}

void fsdp_wait(fsdp_request_t* req) {
  fsdp::Request& r = fsdp::capi::request_from(*req, "*req");
  fsdp::capi::retire(&r, fsdp::capi::Retired::Destroyed);
  *req = nullptr;  // a request is gone once waited on, even when its operation failed
  const fsdp::CallScope call = r.context->begin_call(fsdp::capi::wait_call("fsdp_wait"));
  r.context->scheduler().wait(r);
}

void fsdp_unit_wait(fsdp::Unit& u) {
  u.complete_pending();
}

void fsdp_context_async(fsdp::Context& c, int* progress_thread) {
  *progress_thread = c.worker().threaded() ? 1 : 0;
}

void fsdp_set_prefetch(fsdp::Context& c, int forward, int backward) {
  if ((forward != 0 && forward != 1) || (backward != 0 && backward != 1))
    fail(Errc::InvalidArgument, "forward = " + std::to_string(forward) + ", backward = " +
                                    std::to_string(backward) + ": each must be 0 or 1");
  c.scheduler().set_prefetch(forward != 0, backward != 0);
}

void fsdp_begin_forward(fsdp::Context& c) {
  c.scheduler().begin_phase(fsdp::Phase::Forward);
}

void fsdp_begin_backward(fsdp::Context& c) {
  c.scheduler().begin_phase(fsdp::Phase::Backward);
}

}  // namespace fsdp::capi::body
