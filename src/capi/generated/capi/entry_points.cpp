// Generated from include/fsdp.h by bindings/generate.py (capi_entries.py): do not edit.
#include <cstdint>
#include <optional>

#include "base/agreement.hpp"
#include "capi/arguments.hpp"
#include "capi/calls.hpp"
#include "capi/entry_bodies.hpp"
#include "capi/guard.hpp"
#include "capi/handles.hpp"

using namespace fsdp;
using namespace fsdp::capi;

extern "C" fsdp_status_t fsdp_get_version(int* major, int* minor, int* patch) {
  return guard("fsdp_get_version", [&] { body::fsdp_get_version(major, minor, patch); });
}

extern "C" fsdp_status_t fsdp_check_version(int major, int minor, int patch) {
  return guard("fsdp_check_version", [&] { body::fsdp_check_version(major, minor, patch); });
}

extern "C" fsdp_status_t fsdp_convert(void* dst, fsdp_dtype_t dst_dtype, const void* src,
                                      fsdp_dtype_t src_dtype, size_t n) {
  return guard("fsdp_convert", [&] { body::fsdp_convert(dst, dst_dtype, src, src_dtype, n); });
}

extern "C" fsdp_status_t fsdp_config_defaults(fsdp_config_t* cfg, size_t size) {
  return guard("fsdp_config_defaults", [&] {
    require_output(cfg, "cfg");
    body::fsdp_config_defaults(cfg, size);
  });
}

extern "C" fsdp_status_t fsdp_init(MPI_Comm comm, const fsdp_config_t* cfg, fsdp_context_t* ctx) {
  return guard("fsdp_init", [&] {
    std::optional<fsdp::Error> local = fsdp::attempt([&] { require_output(ctx, "ctx"); });
    body::fsdp_init(std::move(local), comm, cfg, ctx);
  });
}

extern "C" fsdp_status_t fsdp_init_fcomm(int fcomm, const fsdp_config_t* cfg, fsdp_context_t* ctx) {
  return guard("fsdp_init_fcomm", [&] {
    std::optional<fsdp::Error> local = fsdp::attempt([&] { require_output(ctx, "ctx"); });
    body::fsdp_init_fcomm(std::move(local), fcomm, cfg, ctx);
  });
}

extern "C" fsdp_status_t fsdp_mpi_init(int thread_multiple, int* provided_multiple,
                                       int* world_fcomm) {
  return guard("fsdp_mpi_init", [&] {
    require_output(world_fcomm, "world_fcomm");
    body::fsdp_mpi_init(thread_multiple, provided_multiple, world_fcomm);
  });
}

extern "C" fsdp_status_t fsdp_mpi_finalize(void) {
  return guard("fsdp_mpi_finalize", [&] { body::fsdp_mpi_finalize(); });
}

extern "C" fsdp_status_t fsdp_finalize(fsdp_context_t* ctx) {
  return guard("fsdp_finalize", [&] {
    if (!ctx) fail(Errc::InvalidArgument, "ctx: NULL pointer to a context handle");
    body::fsdp_finalize(ctx);
  });
}

extern "C" fsdp_status_t fsdp_group_info(fsdp_context_t ctx, fsdp_group_t group, int* rank,
                                         int* size) {
  return guard("fsdp_group_info", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    body::fsdp_group_info(self, group, rank, size);
  });
}

extern "C" fsdp_status_t fsdp_context_config(fsdp_context_t ctx, int* sharding_factor,
                                             fsdp_sharding_strategy_t* strategy,
                                             fsdp_grad_reduction_t* grad_reduction) {
  return guard("fsdp_context_config", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    body::fsdp_context_config(self, sharding_factor, strategy, grad_reduction);
  });
}

extern "C" fsdp_status_t fsdp_context_placement(fsdp_context_t ctx,
                                                fsdp_memory_space_t* memory_space, int* device,
                                                int* cpu_offload, fsdp_transport_t* transport) {
  return guard("fsdp_context_placement", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    body::fsdp_context_placement(self, memory_space, device, cpu_offload, transport);
  });
}

extern "C" fsdp_status_t fsdp_cuda_device_count(int* count) {
  return guard("fsdp_cuda_device_count", [&] {
    require_output(count, "count");
    body::fsdp_cuda_device_count(count);
  });
}

extern "C" fsdp_status_t fsdp_set_stream(fsdp_context_t ctx, void* stream) {
  return guard("fsdp_set_stream", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    body::fsdp_set_stream(self, stream);
  });
}

extern "C" fsdp_status_t fsdp_abort(fsdp_context_t ctx) {
  return guard("fsdp_abort", [&] {
    fsdp::Context& self = context_for_abort(ctx, "ctx");
    body::fsdp_abort(self);
  });
}

extern "C" fsdp_status_t fsdp_memory_stats(fsdp_context_t ctx, fsdp_memory_stats_t* stats) {
  return guard("fsdp_memory_stats", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    body::fsdp_memory_stats(self, stats);
  });
}

extern "C" fsdp_status_t fsdp_trim_pool(fsdp_context_t ctx) {
  return guard("fsdp_trim_pool", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    body::fsdp_trim_pool(self);
  });
}

extern "C" fsdp_status_t fsdp_broadcast(fsdp_context_t ctx, fsdp_group_t group, int root,
                                        void* data, size_t bytes) {
  return guard("fsdp_broadcast", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    const CallScope scope = self.begin_call(context_call(
        "fsdp_broadcast",
        arguments_fingerprint({static_cast<uint64_t>(enum_int(group)),
                               static_cast<uint64_t>(static_cast<int64_t>(root)), bytes})));
    body::fsdp_broadcast(self, group, root, data, bytes);
  });
}

extern "C" fsdp_status_t fsdp_allreduce(fsdp_context_t ctx, fsdp_group_t group, fsdp_reduce_op_t op,
                                        double* data, size_t count) {
  return guard("fsdp_allreduce", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    const CallScope scope = self.begin_call(context_call(
        "fsdp_allreduce", arguments_fingerprint({static_cast<uint64_t>(enum_int(group)),
                                                 static_cast<uint64_t>(enum_int(op)), count})));
    body::fsdp_allreduce(self, group, op, data, count);
  });
}

extern "C" fsdp_status_t fsdp_reset_peak_memory(fsdp_context_t ctx) {
  return guard("fsdp_reset_peak_memory", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    body::fsdp_reset_peak_memory(self);
  });
}

extern "C" fsdp_status_t fsdp_set_grad_sync(fsdp_context_t ctx, int enabled) {
  return guard("fsdp_set_grad_sync", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    body::fsdp_set_grad_sync(self, enabled);
  });
}

extern "C" fsdp_status_t fsdp_step_boundary(fsdp_context_t ctx) {
  return guard("fsdp_step_boundary", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    const CallScope scope = self.begin_call(context_call("fsdp_step_boundary"));
    body::fsdp_step_boundary(self);
  });
}

extern "C" fsdp_status_t fsdp_unit_set_grad_sync(fsdp_unit_t unit, int enabled) {
  return guard("fsdp_unit_set_grad_sync", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    body::fsdp_unit_set_grad_sync(self, enabled);
  });
}

extern "C" fsdp_status_t fsdp_unit_grad_sync(fsdp_unit_t unit, int* enabled) {
  return guard("fsdp_unit_grad_sync", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    require_output(enabled, "enabled");
    body::fsdp_unit_grad_sync(self, enabled);
  });
}

extern "C" fsdp_status_t fsdp_unit_set_grad_divide_factor(fsdp_unit_t unit, double factor) {
  return guard("fsdp_unit_set_grad_divide_factor", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    body::fsdp_unit_set_grad_divide_factor(self, factor);
  });
}

extern "C" fsdp_status_t fsdp_unit_create(fsdp_context_t ctx, int nparams,
                                          const fsdp_param_desc_t* descs,
                                          const void* const* initial_values, fsdp_unit_t* unit) {
  return guard("fsdp_unit_create", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    std::optional<fsdp::Error> local = fsdp::attempt([&] { require_output(unit, "unit"); });
    const CallScope scope = self.begin_call(context_call("fsdp_unit_create"));
    body::fsdp_unit_create(std::move(local), self, nparams, descs, initial_values, unit);
  });
}

extern "C" fsdp_status_t fsdp_unit_create_ex(fsdp_context_t ctx, int nparams,
                                             const fsdp_param_desc_t* descs,
                                             const void* const* initial_values,
                                             const fsdp_unit_options_t* options,
                                             fsdp_unit_t* unit) {
  return guard("fsdp_unit_create_ex", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    std::optional<fsdp::Error> local = fsdp::attempt([&] { require_output(unit, "unit"); });
    const CallScope scope = self.begin_call(context_call("fsdp_unit_create"));
    body::fsdp_unit_create_ex(std::move(local), self, nparams, descs, initial_values, options,
                              unit);
  });
}

extern "C" fsdp_status_t fsdp_unit_tie(fsdp_unit_t user, const char* alias, fsdp_unit_t owner,
                                       int owner_index, int* alias_index) {
  return guard("fsdp_unit_tie", [&] {
    fsdp::Unit& self = unit_from(user, "user");
    const CallScope scope = self.context().begin_call(context_call("fsdp_unit_tie", self.id()));
    body::fsdp_unit_tie(self, alias, owner, owner_index, alias_index);
  });
}

extern "C" fsdp_status_t fsdp_unit_destroy(fsdp_unit_t* unit) {
  return guard("fsdp_unit_destroy", [&] {
    if (!unit) fail(Errc::InvalidArgument, "unit: NULL pointer to a unit handle");
    body::fsdp_unit_destroy(unit);
  });
}

extern "C" fsdp_status_t fsdp_unshard(fsdp_unit_t unit) {
  return guard("fsdp_unshard", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    const CallScope scope =
        self.context().begin_call(checked_unshard_call("fsdp_unshard", self, /*async=*/false));
    body::fsdp_unshard(self);
  });
}

extern "C" fsdp_status_t fsdp_reshard(fsdp_unit_t unit) {
  return guard("fsdp_reshard", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    body::fsdp_reshard(self);
  });
}

extern "C" fsdp_status_t fsdp_param_data(fsdp_unit_t unit, int index, void** data) {
  return guard("fsdp_param_data", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    require_output(data, "data");
    body::fsdp_param_data(self, index, data);
  });
}

extern "C" fsdp_status_t fsdp_grad_data(fsdp_unit_t unit, int index, void** data) {
  return guard("fsdp_grad_data", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    require_output(data, "data");
    body::fsdp_grad_data(self, index, data);
  });
}

extern "C" fsdp_status_t fsdp_reduce_grads(fsdp_unit_t unit) {
  return guard("fsdp_reduce_grads", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    const CallScope scope =
        self.context().begin_call(checked_reduce_call("fsdp_reduce_grads", self));
    body::fsdp_reduce_grads(self);
  });
}

extern "C" fsdp_status_t fsdp_zero_grads(fsdp_unit_t unit) {
  return guard("fsdp_zero_grads", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    body::fsdp_zero_grads(self);
  });
}

extern "C" fsdp_status_t fsdp_grad_set_none(fsdp_unit_t unit, int index, int none) {
  return guard("fsdp_grad_set_none", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    body::fsdp_grad_set_none(self, index, none);
  });
}

extern "C" fsdp_status_t fsdp_grad_none(fsdp_unit_t unit, int* none, int count) {
  return guard("fsdp_grad_none", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    require_output(none, "none");
    body::fsdp_grad_none(self, none, count);
  });
}

extern "C" fsdp_status_t fsdp_shard_data(fsdp_unit_t unit, void** data, size_t* numel) {
  return guard("fsdp_shard_data", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    body::fsdp_shard_data(self, data, numel);
  });
}

extern "C" fsdp_status_t fsdp_shard_grad(fsdp_unit_t unit, void** data, size_t* numel) {
  return guard("fsdp_shard_grad", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    body::fsdp_shard_grad(self, data, numel);
  });
}

extern "C" fsdp_status_t fsdp_param_shard_range(fsdp_unit_t unit, int index, size_t* shard_offset,
                                                size_t* param_offset, size_t* length) {
  return guard("fsdp_param_shard_range", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    body::fsdp_param_shard_range(self, index, shard_offset, param_offset, length);
  });
}

extern "C" fsdp_status_t fsdp_unit_numel(fsdp_unit_t unit, size_t* numel, size_t* padded_numel,
                                         size_t* shard_numel) {
  return guard("fsdp_unit_numel", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    body::fsdp_unit_numel(self, numel, padded_numel, shard_numel);
  });
}

extern "C" fsdp_status_t fsdp_unit_info(fsdp_unit_t unit, int* nparams, fsdp_dtype_t* dtype) {
  return guard("fsdp_unit_info", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    body::fsdp_unit_info(self, nparams, dtype);
  });
}

extern "C" fsdp_status_t fsdp_unit_precision(fsdp_unit_t unit, fsdp_dtype_t* storage,
                                             fsdp_dtype_t* param_dtype,
                                             fsdp_dtype_t* reduce_dtype) {
  return guard("fsdp_unit_precision", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    body::fsdp_unit_precision(self, storage, param_dtype, reduce_dtype);
  });
}

extern "C" fsdp_status_t fsdp_storage_dtype(fsdp_dtype_t dtype, fsdp_dtype_t* storage) {
  return guard("fsdp_storage_dtype", [&] {
    require_output(storage, "storage");
    body::fsdp_storage_dtype(dtype, storage);
  });
}

extern "C" fsdp_status_t fsdp_precision_resolve(fsdp_context_t ctx, fsdp_dtype_t storage,
                                                fsdp_dtype_t param_dtype, fsdp_dtype_t reduce_dtype,
                                                fsdp_dtype_t* param_out, fsdp_dtype_t* reduce_out) {
  return guard("fsdp_precision_resolve", [&] {
    fsdp::Context* self = ctx ? &context_from(ctx, "ctx") : nullptr;
    body::fsdp_precision_resolve(self, storage, param_dtype, reduce_dtype, param_out, reduce_out);
  });
}

extern "C" fsdp_status_t fsdp_unit_zero_copy(fsdp_unit_t unit, int* zero_copy) {
  return guard("fsdp_unit_zero_copy", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    require_output(zero_copy, "zero_copy");
    body::fsdp_unit_zero_copy(self, zero_copy);
  });
}

extern "C" fsdp_status_t fsdp_gather_params(fsdp_unit_t unit, void* const* values) {
  return guard("fsdp_gather_params", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    const CallScope scope = self.context().begin_call(gather_call("fsdp_gather_params", self));
    body::fsdp_gather_params(self, values);
  });
}

extern "C" fsdp_status_t fsdp_param_numel(fsdp_unit_t unit, int index, size_t* numel) {
  return guard("fsdp_param_numel", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    require_output(numel, "numel");
    body::fsdp_param_numel(self, index, numel);
  });
}

extern "C" fsdp_status_t fsdp_param_info(fsdp_unit_t unit, int index, const char** name, int* ndim,
                                         int64_t* shape, fsdp_dtype_t* dtype, int* requires_grad) {
  return guard("fsdp_param_info", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    body::fsdp_param_info(self, index, name, ndim, shape, dtype, requires_grad);
  });
}

extern "C" fsdp_status_t fsdp_dlpack(fsdp_unit_t unit, fsdp_buffer_t which, int index,
                                     DLManagedTensorVersioned** out) {
  return guard("fsdp_dlpack", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    require_output(out, "out");
    body::fsdp_dlpack(self, which, index, out);
  });
}

extern "C" fsdp_status_t fsdp_dlpack_unversioned(DLManagedTensorVersioned* tensor,
                                                 DLManagedTensor** out) {
  return guard("fsdp_dlpack_unversioned", [&] {
    require_output(out, "out");
    body::fsdp_dlpack_unversioned(tensor, out);
  });
}

extern "C" fsdp_status_t fsdp_unshard_async(fsdp_unit_t unit, fsdp_request_t* req) {
  return guard("fsdp_unshard_async", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    const CallScope scope =
        self.context().begin_call(checked_unshard_call("fsdp_unshard_async", self, /*async=*/true));
    body::fsdp_unshard_async(self, req);
  });
}

extern "C" fsdp_status_t fsdp_reduce_grads_async(fsdp_unit_t unit, fsdp_request_t* req) {
  return guard("fsdp_reduce_grads_async", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    const CallScope scope =
        self.context().begin_call(checked_reduce_call("fsdp_reduce_grads_async", self));
    body::fsdp_reduce_grads_async(self, req);
  });
}

extern "C" fsdp_status_t fsdp_wait(fsdp_request_t* req) {
  return guard("fsdp_wait", [&] {
    if (!req) fail(Errc::InvalidArgument, "req: NULL pointer to a request handle");
    body::fsdp_wait(req);
  });
}

extern "C" fsdp_status_t fsdp_unit_wait(fsdp_unit_t unit) {
  return guard("fsdp_unit_wait", [&] {
    fsdp::Unit& self = unit_from(unit, "unit");
    const CallScope scope = self.context().begin_call(wait_call("fsdp_unit_wait"));
    body::fsdp_unit_wait(self);
  });
}

extern "C" fsdp_status_t fsdp_context_async(fsdp_context_t ctx, int* progress_thread) {
  return guard("fsdp_context_async", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    require_output(progress_thread, "progress_thread");
    body::fsdp_context_async(self, progress_thread);
  });
}

extern "C" fsdp_status_t fsdp_set_prefetch(fsdp_context_t ctx, int forward, int backward) {
  return guard("fsdp_set_prefetch", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    body::fsdp_set_prefetch(self, forward, backward);
  });
}

extern "C" fsdp_status_t fsdp_begin_forward(fsdp_context_t ctx) {
  return guard("fsdp_begin_forward", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    const CallScope scope = self.begin_call(context_call("fsdp_begin_forward"));
    body::fsdp_begin_forward(self);
  });
}

extern "C" fsdp_status_t fsdp_begin_backward(fsdp_context_t ctx) {
  return guard("fsdp_begin_backward", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    const CallScope scope = self.begin_call(context_call("fsdp_begin_backward"));
    body::fsdp_begin_backward(self);
  });
}

extern "C" fsdp_status_t fsdp_optimizer_create(fsdp_context_t ctx, fsdp_optimizer_kind_t kind,
                                               const fsdp_hyperparams_t* defaults, int nunits,
                                               const fsdp_unit_t* units, fsdp_optimizer_t* opt) {
  return guard("fsdp_optimizer_create", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    std::optional<fsdp::Error> local = fsdp::attempt([&] { require_output(opt, "opt"); });
    const CallScope scope = self.begin_call(context_call("fsdp_optimizer_create"));
    body::fsdp_optimizer_create(std::move(local), self, kind, defaults, nunits, units, opt);
  });
}

extern "C" fsdp_status_t fsdp_optimizer_destroy(fsdp_optimizer_t* opt) {
  return guard("fsdp_optimizer_destroy", [&] {
    if (!opt) fail(Errc::InvalidArgument, "opt: NULL pointer to an optimizer handle");
    body::fsdp_optimizer_destroy(opt);
  });
}

extern "C" fsdp_status_t fsdp_optimizer_add_group(fsdp_optimizer_t opt, const char* pattern,
                                                  const fsdp_hyperparams_t* hp, int* group,
                                                  int* nmatched) {
  return guard("fsdp_optimizer_add_group", [&] {
    fsdp::Optimizer& self = optimizer_from(opt, "opt");
    const CallScope scope =
        self.context().begin_call(context_call("fsdp_optimizer_add_group", self.id()));
    body::fsdp_optimizer_add_group(self, pattern, hp, group, nmatched);
  });
}

extern "C" fsdp_status_t fsdp_optimizer_get_hyperparams(fsdp_optimizer_t opt, int group,
                                                        fsdp_hyperparams_t* hp) {
  return guard("fsdp_optimizer_get_hyperparams", [&] {
    fsdp::Optimizer& self = optimizer_from(opt, "opt");
    require_output(hp, "hp");
    body::fsdp_optimizer_get_hyperparams(self, group, hp);
  });
}

extern "C" fsdp_status_t fsdp_optimizer_set_hyperparams(fsdp_optimizer_t opt, int group,
                                                        const fsdp_hyperparams_t* hp) {
  return guard("fsdp_optimizer_set_hyperparams", [&] {
    fsdp::Optimizer& self = optimizer_from(opt, "opt");
    body::fsdp_optimizer_set_hyperparams(self, group, hp);
  });
}

extern "C" fsdp_status_t fsdp_optimizer_set_lr(fsdp_optimizer_t opt, int group, double lr) {
  return guard("fsdp_optimizer_set_lr", [&] {
    fsdp::Optimizer& self = optimizer_from(opt, "opt");
    body::fsdp_optimizer_set_lr(self, group, lr);
  });
}

extern "C" fsdp_status_t fsdp_optimizer_step(fsdp_optimizer_t opt) {
  return guard("fsdp_optimizer_step", [&] {
    fsdp::Optimizer& self = optimizer_from(opt, "opt");
    const auto run = [&] { body::fsdp_optimizer_step(self); };
    if (!(self.context().options().hfsdp)) return run();
    const CallScope scope = self.context().begin_call(
        update_call("fsdp_optimizer_step", CallInfo::Phase::Continues, self.id()));
    run();
  });
}

extern "C" fsdp_status_t fsdp_optimizer_zero_grad(fsdp_optimizer_t opt) {
  return guard("fsdp_optimizer_zero_grad", [&] {
    fsdp::Optimizer& self = optimizer_from(opt, "opt");
    body::fsdp_optimizer_zero_grad(self);
  });
}

extern "C" fsdp_status_t fsdp_optimizer_state(fsdp_optimizer_t opt, fsdp_unit_t unit,
                                              const char* name, void** data, size_t* numel) {
  return guard("fsdp_optimizer_state", [&] {
    fsdp::Optimizer& self = optimizer_from(opt, "opt");
    body::fsdp_optimizer_state(self, unit, name, data, numel);
  });
}

extern "C" fsdp_status_t fsdp_optimizer_state_dlpack(fsdp_optimizer_t opt, fsdp_unit_t unit,
                                                     const char* name,
                                                     DLManagedTensorVersioned** out) {
  return guard("fsdp_optimizer_state_dlpack", [&] {
    fsdp::Optimizer& self = optimizer_from(opt, "opt");
    require_output(out, "out");
    body::fsdp_optimizer_state_dlpack(self, unit, name, out);
  });
}

extern "C" fsdp_status_t fsdp_optimizer_steps(fsdp_optimizer_t opt, fsdp_unit_t unit,
                                              int64_t* steps) {
  return guard("fsdp_optimizer_steps", [&] {
    fsdp::Optimizer& self = optimizer_from(opt, "opt");
    require_output(steps, "steps");
    body::fsdp_optimizer_steps(self, unit, steps);
  });
}

extern "C" fsdp_status_t fsdp_optimizer_set_steps(fsdp_optimizer_t opt, fsdp_unit_t unit,
                                                  int64_t steps) {
  return guard("fsdp_optimizer_set_steps", [&] {
    fsdp::Optimizer& self = optimizer_from(opt, "opt");
    body::fsdp_optimizer_set_steps(self, unit, steps);
  });
}

extern "C" fsdp_status_t fsdp_optimizer_param_steps(fsdp_optimizer_t opt, fsdp_unit_t unit,
                                                    int index, int64_t* steps) {
  return guard("fsdp_optimizer_param_steps", [&] {
    fsdp::Optimizer& self = optimizer_from(opt, "opt");
    require_output(steps, "steps");
    body::fsdp_optimizer_param_steps(self, unit, index, steps);
  });
}

extern "C" fsdp_status_t fsdp_optimizer_set_param_steps(fsdp_optimizer_t opt, fsdp_unit_t unit,
                                                        int index, int64_t steps) {
  return guard("fsdp_optimizer_set_param_steps", [&] {
    fsdp::Optimizer& self = optimizer_from(opt, "opt");
    body::fsdp_optimizer_set_param_steps(self, unit, index, steps);
  });
}

extern "C" fsdp_status_t fsdp_param_group_of(const char* const* patterns, int npatterns,
                                             const char* name, int* group) {
  return guard("fsdp_param_group_of", [&] {
    require_output(group, "group");
    body::fsdp_param_group_of(patterns, npatterns, name, group);
  });
}

extern "C" fsdp_status_t fsdp_optimizer_kind_info(fsdp_optimizer_kind_t kind, const char** name,
                                                  int* nstates, int* nhyperparams,
                                                  int* step_count) {
  return guard("fsdp_optimizer_kind_info", [&] {
    body::fsdp_optimizer_kind_info(kind, name, nstates, nhyperparams, step_count);
  });
}

extern "C" fsdp_status_t fsdp_optimizer_state_name(fsdp_optimizer_kind_t kind, int index,
                                                   const char** name, const char** kept_when) {
  return guard("fsdp_optimizer_state_name", [&] {
    require_output(name, "name");
    body::fsdp_optimizer_state_name(kind, index, name, kept_when);
  });
}

extern "C" fsdp_status_t fsdp_optimizer_hyperparam_name(fsdp_optimizer_kind_t kind, int index,
                                                        const char** name) {
  return guard("fsdp_optimizer_hyperparam_name", [&] {
    require_output(name, "name");
    body::fsdp_optimizer_hyperparam_name(kind, index, name);
  });
}

extern "C" fsdp_status_t fsdp_optimizer_defaults(fsdp_optimizer_kind_t kind,
                                                 fsdp_hyperparams_t* hp) {
  return guard("fsdp_optimizer_defaults", [&] { body::fsdp_optimizer_defaults(kind, hp); });
}

extern "C" fsdp_status_t fsdp_clip_grad_norm(fsdp_context_t ctx, double max_norm, double norm_type,
                                             double* total_norm) {
  return guard("fsdp_clip_grad_norm", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    const CallScope scope =
        self.begin_call(update_call("fsdp_clip_grad_norm", CallInfo::Phase::Restarts));
    body::fsdp_clip_grad_norm(self, max_norm, norm_type, total_norm);
  });
}

extern "C" fsdp_status_t fsdp_grad_scaler_create(fsdp_context_t ctx, double init_scale,
                                                 double growth_factor, double backoff_factor,
                                                 int growth_interval, fsdp_grad_scaler_t* scaler) {
  return guard("fsdp_grad_scaler_create", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    std::optional<fsdp::Error> local = fsdp::attempt([&] { require_output(scaler, "scaler"); });
    const CallScope scope = self.begin_call(context_call("fsdp_grad_scaler_create"));
    body::fsdp_grad_scaler_create(std::move(local), self, init_scale, growth_factor, backoff_factor,
                                  growth_interval, scaler);
  });
}

extern "C" fsdp_status_t fsdp_grad_scaler_destroy(fsdp_grad_scaler_t* scaler) {
  return guard("fsdp_grad_scaler_destroy", [&] {
    if (!scaler) fail(Errc::InvalidArgument, "scaler: NULL pointer to a grad scaler handle");
    body::fsdp_grad_scaler_destroy(scaler);
  });
}

extern "C" fsdp_status_t fsdp_grad_scaler_scale(fsdp_grad_scaler_t scaler, double* scale) {
  return guard("fsdp_grad_scaler_scale", [&] {
    fsdp::GradScaler& self = grad_scaler_from(scaler, "scaler");
    require_output(scale, "scale");
    body::fsdp_grad_scaler_scale(self, scale);
  });
}

extern "C" fsdp_status_t fsdp_grad_scaler_unscale(fsdp_grad_scaler_t scaler, fsdp_optimizer_t opt) {
  return guard("fsdp_grad_scaler_unscale", [&] {
    fsdp::GradScaler& self = grad_scaler_from(scaler, "scaler");
    const CallScope scope = self.context().begin_call(
        update_call("fsdp_grad_scaler_unscale", CallInfo::Phase::Restarts));
    body::fsdp_grad_scaler_unscale(self, opt);
  });
}

extern "C" fsdp_status_t fsdp_grad_scaler_step(fsdp_grad_scaler_t scaler, fsdp_optimizer_t opt,
                                               int* skipped) {
  return guard("fsdp_grad_scaler_step", [&] {
    fsdp::GradScaler& self = grad_scaler_from(scaler, "scaler");
    const CallScope scope =
        self.context().begin_call(update_call("fsdp_grad_scaler_step", CallInfo::Phase::Restarts));
    body::fsdp_grad_scaler_step(self, opt, skipped);
  });
}

extern "C" fsdp_status_t fsdp_grad_scaler_update(fsdp_grad_scaler_t scaler) {
  return guard("fsdp_grad_scaler_update", [&] {
    fsdp::GradScaler& self = grad_scaler_from(scaler, "scaler");
    body::fsdp_grad_scaler_update(self);
  });
}

extern "C" fsdp_status_t fsdp_checkpoint_save(fsdp_context_t ctx, const char* path,
                                              const fsdp_checkpoint_options_t* options) {
  return guard("fsdp_checkpoint_save", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    const CallScope scope = self.begin_call(context_call("fsdp_checkpoint_save"));
    body::fsdp_checkpoint_save(self, path, options);
  });
}

extern "C" fsdp_status_t fsdp_checkpoint_save_async(fsdp_context_t ctx, const char* path,
                                                    const fsdp_checkpoint_options_t* options,
                                                    fsdp_request_t* req) {
  return guard("fsdp_checkpoint_save_async", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    std::optional<fsdp::Error> local = fsdp::attempt([&] { require_output(req, "req"); });
    const CallScope scope = self.begin_call(context_call("fsdp_checkpoint_save_async"));
    body::fsdp_checkpoint_save_async(std::move(local), self, path, options, req);
  });
}

extern "C" fsdp_status_t fsdp_test(fsdp_request_t req, int* done) {
  return guard("fsdp_test", [&] {
    fsdp::Request& self = request_from(req, "req");
    require_output(done, "done");
    body::fsdp_test(self, done);
  });
}

extern "C" fsdp_status_t fsdp_checkpoint_load(fsdp_context_t ctx, const char* path,
                                              const fsdp_checkpoint_options_t* options,
                                              fsdp_checkpoint_report_t* report) {
  return guard("fsdp_checkpoint_load", [&] {
    fsdp::Context& self = context_from(ctx, "ctx");
    const CallScope scope = self.begin_call(context_call("fsdp_checkpoint_load"));
    body::fsdp_checkpoint_load(self, path, options, report);
  });
}

extern "C" fsdp_status_t fsdp_checkpoint_metadata(const char* path, const char* key, char* value,
                                                  size_t capacity, size_t* length) {
  return guard("fsdp_checkpoint_metadata",
               [&] { body::fsdp_checkpoint_metadata(path, key, value, capacity, length); });
}

extern "C" fsdp_status_t fsdp_checkpoint_describe(const char* path, char* json, size_t capacity,
                                                  size_t* length) {
  return guard("fsdp_checkpoint_describe",
               [&] { body::fsdp_checkpoint_describe(path, json, capacity, length); });
}

extern "C" fsdp_status_t fsdp_checkpoint_verify(MPI_Comm comm, const char* path,
                                                const fsdp_checkpoint_check_options_t* options,
                                                int* failed) {
  return guard("fsdp_checkpoint_verify", [&] {
    std::optional<fsdp::Error> local = fsdp::attempt([&] { require_output(failed, "failed"); });
    body::fsdp_checkpoint_verify(std::move(local), comm, path, options, failed);
  });
}

extern "C" fsdp_status_t fsdp_checkpoint_verify_fcomm(
    int fcomm, const char* path, const fsdp_checkpoint_check_options_t* options, int* failed) {
  return guard("fsdp_checkpoint_verify_fcomm", [&] {
    std::optional<fsdp::Error> local = fsdp::attempt([&] { require_output(failed, "failed"); });
    body::fsdp_checkpoint_verify_fcomm(std::move(local), fcomm, path, options, failed);
  });
}

extern "C" fsdp_status_t fsdp_checkpoint_diff(MPI_Comm comm, const char* a, const char* b,
                                              const fsdp_checkpoint_check_options_t* options,
                                              int* differ) {
  return guard("fsdp_checkpoint_diff", [&] {
    std::optional<fsdp::Error> local = fsdp::attempt([&] { require_output(differ, "differ"); });
    body::fsdp_checkpoint_diff(std::move(local), comm, a, b, options, differ);
  });
}

extern "C" fsdp_status_t fsdp_checkpoint_diff_fcomm(int fcomm, const char* a, const char* b,
                                                    const fsdp_checkpoint_check_options_t* options,
                                                    int* differ) {
  return guard("fsdp_checkpoint_diff_fcomm", [&] {
    std::optional<fsdp::Error> local = fsdp::attempt([&] { require_output(differ, "differ"); });
    body::fsdp_checkpoint_diff_fcomm(std::move(local), fcomm, a, b, options, differ);
  });
}

extern "C" fsdp_status_t fsdp_safetensors_export(MPI_Comm comm, const char* checkpoint,
                                                 const char* out,
                                                 const fsdp_safetensors_options_t* options) {
  return guard("fsdp_safetensors_export",
               [&] { body::fsdp_safetensors_export(comm, checkpoint, out, options); });
}

extern "C" fsdp_status_t fsdp_safetensors_import(MPI_Comm comm, const char* in,
                                                 const char* checkpoint,
                                                 const fsdp_safetensors_options_t* options) {
  return guard("fsdp_safetensors_import",
               [&] { body::fsdp_safetensors_import(comm, in, checkpoint, options); });
}

extern "C" fsdp_status_t fsdp_safetensors_export_fcomm(int fcomm, const char* checkpoint,
                                                       const char* out,
                                                       const fsdp_safetensors_options_t* options) {
  return guard("fsdp_safetensors_export_fcomm",
               [&] { body::fsdp_safetensors_export_fcomm(fcomm, checkpoint, out, options); });
}

extern "C" fsdp_status_t fsdp_safetensors_import_fcomm(int fcomm, const char* in,
                                                       const char* checkpoint,
                                                       const fsdp_safetensors_options_t* options) {
  return guard("fsdp_safetensors_import_fcomm",
               [&] { body::fsdp_safetensors_import_fcomm(fcomm, in, checkpoint, options); });
}

extern "C" fsdp_status_t fsdp_plan_create(fsdp_plan_t* plan) {
  return guard("fsdp_plan_create", [&] {
    require_output(plan, "plan");
    body::fsdp_plan_create(plan);
  });
}

extern "C" fsdp_status_t fsdp_plan_destroy(fsdp_plan_t* plan) {
  return guard("fsdp_plan_destroy", [&] {
    if (!plan) fail(Errc::InvalidArgument, "plan: NULL pointer to a plan handle");
    body::fsdp_plan_destroy(plan);
  });
}

extern "C" fsdp_status_t fsdp_plan_add_unit(fsdp_plan_t plan, const char* name, int nparams,
                                            const fsdp_param_desc_t* descs, int* unit_index) {
  return guard("fsdp_plan_add_unit", [&] {
    fsdp::plan::PlanModel& self = plan_from(plan, "plan");
    body::fsdp_plan_add_unit(self, name, nparams, descs, unit_index);
  });
}

extern "C" fsdp_status_t fsdp_plan_tie(fsdp_plan_t plan, int user_unit, const char* alias,
                                       int owner_unit, int owner_index, int* alias_index) {
  return guard("fsdp_plan_tie", [&] {
    fsdp::plan::PlanModel& self = plan_from(plan, "plan");
    body::fsdp_plan_tie(self, user_unit, alias, owner_unit, owner_index, alias_index);
  });
}

extern "C" fsdp_status_t fsdp_plan_read_model(fsdp_plan_t plan, const char* path,
                                              fsdp_plan_model_format_t format) {
  return guard("fsdp_plan_read_model", [&] {
    fsdp::plan::PlanModel& self = plan_from(plan, "plan");
    body::fsdp_plan_read_model(self, path, format);
  });
}

extern "C" fsdp_status_t fsdp_plan_memory(fsdp_plan_t plan, const fsdp_plan_job_t* job, int rank,
                                          fsdp_plan_memory_t* memory) {
  return guard("fsdp_plan_memory", [&] {
    fsdp::plan::PlanModel& self = plan_from(plan, "plan");
    require_output(memory, "memory");
    body::fsdp_plan_memory(self, job, rank, memory);
  });
}

extern "C" fsdp_status_t fsdp_plan_traffic(fsdp_plan_t plan, const fsdp_plan_job_t* job, int rank,
                                           fsdp_plan_traffic_t* traffic) {
  return guard("fsdp_plan_traffic", [&] {
    fsdp::plan::PlanModel& self = plan_from(plan, "plan");
    require_output(traffic, "traffic");
    body::fsdp_plan_traffic(self, job, rank, traffic);
  });
}

extern "C" fsdp_status_t fsdp_plan_describe(fsdp_plan_t plan, const fsdp_plan_job_t* job, int rank,
                                            char* json, size_t capacity, size_t* length) {
  return guard("fsdp_plan_describe", [&] {
    fsdp::plan::PlanModel& self = plan_from(plan, "plan");
    body::fsdp_plan_describe(self, job, rank, json, capacity, length);
  });
}

extern "C" fsdp_status_t fsdp_plan_machine_preset(const char* name, fsdp_plan_machine_t* machine) {
  return guard("fsdp_plan_machine_preset", [&] {
    require_output(machine, "machine");
    body::fsdp_plan_machine_preset(name, machine);
  });
}

extern "C" fsdp_status_t fsdp_plan_time(fsdp_plan_t plan, const fsdp_plan_job_t* job,
                                        const fsdp_plan_machine_t* machine, int rank,
                                        fsdp_plan_time_t* time) {
  return guard("fsdp_plan_time", [&] {
    fsdp::plan::PlanModel& self = plan_from(plan, "plan");
    require_output(time, "time");
    body::fsdp_plan_time(self, job, machine, rank, time);
  });
}

extern "C" fsdp_status_t fsdp_plan_describe_on(fsdp_plan_t plan, const fsdp_plan_job_t* job,
                                               const fsdp_plan_machine_t* machine, int rank,
                                               char* json, size_t capacity, size_t* length) {
  return guard("fsdp_plan_describe_on", [&] {
    fsdp::plan::PlanModel& self = plan_from(plan, "plan");
    body::fsdp_plan_describe_on(self, job, machine, rank, json, capacity, length);
  });
}

extern "C" fsdp_status_t fsdp_plan_sweep(fsdp_plan_t plan, const fsdp_plan_job_t* job,
                                         const fsdp_plan_machine_t* machine, size_t budget_bytes,
                                         char* json, size_t capacity, size_t* length) {
  return guard("fsdp_plan_sweep", [&] {
    fsdp::plan::PlanModel& self = plan_from(plan, "plan");
    body::fsdp_plan_sweep(self, job, machine, budget_bytes, json, capacity, length);
  });
}
