// Generated from include/fsdp.h by bindings/generate.py (capi_entries.py): do not edit.
// The body of each C entry point: what the call does, after the generated entry
// point (capi/entry_points.cpp) has checked its arguments and recorded the call.
#pragma once

#include <optional>

#include "base/error.hpp"
#include "capi/handles.hpp"
#include "fsdp.h"

namespace fsdp::capi::body {

void fsdp_get_version(int* major, int* minor, int* patch);
void fsdp_check_version(int major, int minor, int patch);
void fsdp_convert(void* dst, const fsdp_dtype_t& dst_dtype, const void* src,
                  const fsdp_dtype_t& src_dtype, size_t n);
void fsdp_config_defaults(fsdp_config_t* cfg, size_t size);
void fsdp_init(std::optional<fsdp::Error> local, MPI_Comm comm, const fsdp_config_t* cfg,
               fsdp_context_t* ctx);
void fsdp_init_fcomm(std::optional<fsdp::Error> local, int fcomm, const fsdp_config_t* cfg,
                     fsdp_context_t* ctx);
void fsdp_mpi_init(int thread_multiple, int* provided_multiple, int* world_fcomm);
void fsdp_mpi_finalize();
void fsdp_finalize(fsdp_context_t* ctx);
void fsdp_group_info(fsdp::Context& ctx, const fsdp_group_t& group, int* rank, int* size);
void fsdp_context_config(fsdp::Context& ctx, int* sharding_factor,
                         fsdp_sharding_strategy_t* strategy, fsdp_grad_reduction_t* grad_reduction);
void fsdp_context_placement(fsdp::Context& ctx, fsdp_memory_space_t* memory_space, int* device,
                            int* cpu_offload, fsdp_transport_t* transport);
void fsdp_cuda_device_count(int* count);
void fsdp_set_stream(fsdp::Context& ctx, void* stream);
void fsdp_abort(fsdp::Context& ctx);
void fsdp_memory_stats(fsdp::Context& ctx, fsdp_memory_stats_t* stats);
void fsdp_trim_pool(fsdp::Context& ctx);
void fsdp_broadcast(fsdp::Context& ctx, const fsdp_group_t& group, int root, void* data,
                    size_t bytes);
void fsdp_allreduce(fsdp::Context& ctx, const fsdp_group_t& group, const fsdp_reduce_op_t& op,
                    double* data, size_t count);
void fsdp_reset_peak_memory(fsdp::Context& ctx);
void fsdp_set_grad_sync(fsdp::Context& ctx, int enabled);
void fsdp_step_boundary(fsdp::Context& ctx);
void fsdp_unit_set_grad_sync(fsdp::Unit& unit, int enabled);
void fsdp_unit_grad_sync(fsdp::Unit& unit, int* enabled);
void fsdp_unit_set_grad_divide_factor(fsdp::Unit& unit, double factor);
void fsdp_unit_create(std::optional<fsdp::Error> local, fsdp::Context& ctx, int nparams,
                      const fsdp_param_desc_t* descs, const void* const* initial_values,
                      fsdp_unit_t* unit);
void fsdp_unit_create_ex(std::optional<fsdp::Error> local, fsdp::Context& ctx, int nparams,
                         const fsdp_param_desc_t* descs, const void* const* initial_values,
                         const fsdp_unit_options_t* options, fsdp_unit_t* unit);
void fsdp_unit_tie(fsdp::Unit& user, const char* alias, fsdp_unit_t owner, int owner_index,
                   int* alias_index);
void fsdp_unit_destroy(fsdp_unit_t* unit);
void fsdp_unshard(fsdp::Unit& unit);
void fsdp_reshard(fsdp::Unit& unit);
void fsdp_param_data(fsdp::Unit& unit, int index, void** data);
void fsdp_grad_data(fsdp::Unit& unit, int index, void** data);
void fsdp_reduce_grads(fsdp::Unit& unit);
void fsdp_zero_grads(fsdp::Unit& unit);
void fsdp_grad_set_none(fsdp::Unit& unit, int index, int none);
void fsdp_grad_none(fsdp::Unit& unit, int* none, int count);
void fsdp_shard_data(fsdp::Unit& unit, void** data, size_t* numel);
void fsdp_shard_grad(fsdp::Unit& unit, void** data, size_t* numel);
void fsdp_param_shard_range(fsdp::Unit& unit, int index, size_t* shard_offset, size_t* param_offset,
                            size_t* length);
void fsdp_unit_numel(fsdp::Unit& unit, size_t* numel, size_t* padded_numel, size_t* shard_numel);
void fsdp_unit_info(fsdp::Unit& unit, int* nparams, fsdp_dtype_t* dtype);
void fsdp_unit_precision(fsdp::Unit& unit, fsdp_dtype_t* storage, fsdp_dtype_t* param_dtype,
                         fsdp_dtype_t* reduce_dtype);
void fsdp_storage_dtype(const fsdp_dtype_t& dtype, fsdp_dtype_t* storage);
void fsdp_precision_resolve(fsdp::Context* ctx, const fsdp_dtype_t& storage,
                            const fsdp_dtype_t& param_dtype, const fsdp_dtype_t& reduce_dtype,
                            fsdp_dtype_t* param_out, fsdp_dtype_t* reduce_out);
void fsdp_unit_zero_copy(fsdp::Unit& unit, int* zero_copy);
void fsdp_gather_params(fsdp::Unit& unit, void* const* values);
void fsdp_param_numel(fsdp::Unit& unit, int index, size_t* numel);
void fsdp_param_info(fsdp::Unit& unit, int index, const char** name, int* ndim, int64_t* shape,
                     fsdp_dtype_t* dtype, int* requires_grad);
void fsdp_dlpack(fsdp::Unit& unit, const fsdp_buffer_t& which, int index,
                 DLManagedTensorVersioned** out);
void fsdp_dlpack_unversioned(DLManagedTensorVersioned* tensor, DLManagedTensor** out);
void fsdp_unshard_async(fsdp::Unit& unit, fsdp_request_t* req);
void fsdp_reduce_grads_async(fsdp::Unit& unit, fsdp_request_t* req);
void fsdp_wait(fsdp_request_t* req);
void fsdp_unit_wait(fsdp::Unit& unit);
void fsdp_context_async(fsdp::Context& ctx, int* progress_thread);
void fsdp_set_prefetch(fsdp::Context& ctx, int forward, int backward);
void fsdp_begin_forward(fsdp::Context& ctx);
void fsdp_begin_backward(fsdp::Context& ctx);
void fsdp_optimizer_create(std::optional<fsdp::Error> local, fsdp::Context& ctx,
                           const fsdp_optimizer_kind_t& kind, const fsdp_hyperparams_t* defaults,
                           int nunits, const fsdp_unit_t* units, fsdp_optimizer_t* opt);
void fsdp_optimizer_destroy(fsdp_optimizer_t* opt);
void fsdp_optimizer_add_group(fsdp::Optimizer& opt, const char* pattern,
                              const fsdp_hyperparams_t* hp, int* group, int* nmatched);
void fsdp_optimizer_get_hyperparams(fsdp::Optimizer& opt, int group, fsdp_hyperparams_t* hp);
void fsdp_optimizer_set_hyperparams(fsdp::Optimizer& opt, int group, const fsdp_hyperparams_t* hp);
void fsdp_optimizer_set_lr(fsdp::Optimizer& opt, int group, double lr);
void fsdp_optimizer_step(fsdp::Optimizer& opt);
void fsdp_optimizer_zero_grad(fsdp::Optimizer& opt);
void fsdp_optimizer_state(fsdp::Optimizer& opt, fsdp_unit_t unit, const char* name, void** data,
                          size_t* numel);
void fsdp_optimizer_state_dlpack(fsdp::Optimizer& opt, fsdp_unit_t unit, const char* name,
                                 DLManagedTensorVersioned** out);
void fsdp_optimizer_steps(fsdp::Optimizer& opt, fsdp_unit_t unit, int64_t* steps);
void fsdp_optimizer_set_steps(fsdp::Optimizer& opt, fsdp_unit_t unit, int64_t steps);
void fsdp_optimizer_param_steps(fsdp::Optimizer& opt, fsdp_unit_t unit, int index, int64_t* steps);
void fsdp_optimizer_set_param_steps(fsdp::Optimizer& opt, fsdp_unit_t unit, int index,
                                    int64_t steps);
void fsdp_param_group_of(const char* const* patterns, int npatterns, const char* name, int* group);
void fsdp_optimizer_kind_info(const fsdp_optimizer_kind_t& kind, const char** name, int* nstates,
                              int* nhyperparams, int* step_count);
void fsdp_optimizer_state_name(const fsdp_optimizer_kind_t& kind, int index, const char** name,
                               const char** kept_when);
void fsdp_optimizer_hyperparam_name(const fsdp_optimizer_kind_t& kind, int index,
                                    const char** name);
void fsdp_optimizer_defaults(const fsdp_optimizer_kind_t& kind, fsdp_hyperparams_t* hp);
void fsdp_clip_grad_norm(fsdp::Context& ctx, double max_norm, double norm_type, double* total_norm);
void fsdp_grad_scaler_create(std::optional<fsdp::Error> local, fsdp::Context& ctx,
                             double init_scale, double growth_factor, double backoff_factor,
                             int growth_interval, fsdp_grad_scaler_t* scaler);
void fsdp_grad_scaler_destroy(fsdp_grad_scaler_t* scaler);
void fsdp_grad_scaler_scale(fsdp::GradScaler& scaler, double* scale);
void fsdp_grad_scaler_unscale(fsdp::GradScaler& scaler, fsdp_optimizer_t opt);
void fsdp_grad_scaler_step(fsdp::GradScaler& scaler, fsdp_optimizer_t opt, int* skipped);
void fsdp_grad_scaler_update(fsdp::GradScaler& scaler);
void fsdp_checkpoint_save(fsdp::Context& ctx, const char* path,
                          const fsdp_checkpoint_options_t* options);
void fsdp_checkpoint_save_async(std::optional<fsdp::Error> local, fsdp::Context& ctx,
                                const char* path, const fsdp_checkpoint_options_t* options,
                                fsdp_request_t* req);
void fsdp_test(fsdp::Request& req, int* done);
void fsdp_checkpoint_load(fsdp::Context& ctx, const char* path,
                          const fsdp_checkpoint_options_t* options,
                          fsdp_checkpoint_report_t* report);
void fsdp_checkpoint_metadata(const char* path, const char* key, char* value, size_t capacity,
                              size_t* length);
void fsdp_checkpoint_describe(const char* path, char* json, size_t capacity, size_t* length);
void fsdp_checkpoint_verify(std::optional<fsdp::Error> local, MPI_Comm comm, const char* path,
                            const fsdp_checkpoint_check_options_t* options, int* failed);
void fsdp_checkpoint_verify_fcomm(std::optional<fsdp::Error> local, int fcomm, const char* path,
                                  const fsdp_checkpoint_check_options_t* options, int* failed);
void fsdp_checkpoint_diff(std::optional<fsdp::Error> local, MPI_Comm comm, const char* a,
                          const char* b, const fsdp_checkpoint_check_options_t* options,
                          int* differ);
void fsdp_checkpoint_diff_fcomm(std::optional<fsdp::Error> local, int fcomm, const char* a,
                                const char* b, const fsdp_checkpoint_check_options_t* options,
                                int* differ);
void fsdp_safetensors_export(MPI_Comm comm, const char* checkpoint, const char* out,
                             const fsdp_safetensors_options_t* options);
void fsdp_safetensors_import(MPI_Comm comm, const char* in, const char* checkpoint,
                             const fsdp_safetensors_options_t* options);
void fsdp_safetensors_export_fcomm(int fcomm, const char* checkpoint, const char* out,
                                   const fsdp_safetensors_options_t* options);
void fsdp_safetensors_import_fcomm(int fcomm, const char* in, const char* checkpoint,
                                   const fsdp_safetensors_options_t* options);
void fsdp_plan_create(fsdp_plan_t* plan);
void fsdp_plan_destroy(fsdp_plan_t* plan);
void fsdp_plan_add_unit(fsdp::plan::PlanModel& plan, const char* name, int nparams,
                        const fsdp_param_desc_t* descs, int* unit_index);
void fsdp_plan_tie(fsdp::plan::PlanModel& plan, int user_unit, const char* alias, int owner_unit,
                   int owner_index, int* alias_index);
void fsdp_plan_read_model(fsdp::plan::PlanModel& plan, const char* path,
                          const fsdp_plan_model_format_t& format);
void fsdp_plan_memory(fsdp::plan::PlanModel& plan, const fsdp_plan_job_t* job, int rank,
                      fsdp_plan_memory_t* memory);
void fsdp_plan_traffic(fsdp::plan::PlanModel& plan, const fsdp_plan_job_t* job, int rank,
                       fsdp_plan_traffic_t* traffic);
void fsdp_plan_describe(fsdp::plan::PlanModel& plan, const fsdp_plan_job_t* job, int rank,
                        char* json, size_t capacity, size_t* length);
void fsdp_plan_machine_preset(const char* name, fsdp_plan_machine_t* machine);
void fsdp_plan_time(fsdp::plan::PlanModel& plan, const fsdp_plan_job_t* job,
                    const fsdp_plan_machine_t* machine, int rank, fsdp_plan_time_t* time);
void fsdp_plan_describe_on(fsdp::plan::PlanModel& plan, const fsdp_plan_job_t* job,
                           const fsdp_plan_machine_t* machine, int rank, char* json,
                           size_t capacity, size_t* length);
void fsdp_plan_sweep(fsdp::plan::PlanModel& plan, const fsdp_plan_job_t* job,
                     const fsdp_plan_machine_t* machine, size_t budget_bytes, char* json,
                     size_t capacity, size_t* length);

}  // namespace fsdp::capi::body
