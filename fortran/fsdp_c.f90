! The C ABI of libfsdp (include/fsdp.h) as seen from Fortran: the enums as integer(c_int)
! parameters (generated from the header), the handles and structs as bind(C) types of the same layout, and a bind(C)
! interface to every function. Functions whose C arguments Fortran passes as they are (handles,
! numbers, outputs by reference) keep their C names and are re-exported by module fsdp; the ones
! that take strings, communicators, descriptor arrays or typed buffers are named c_fsdp_* here and
! wrapped in module fsdp. Applications use module fsdp; this module is for those who want the
! raw calls. An output C accepts as NULL ("may be NULL" in fsdp.h) is an `optional` dummy here:
! left out, it reaches C as NULL (Fortran 2018, an absent optional argument of a bind(C)
! procedure), so `st = fsdp_group_info(ctx, FSDP_GROUP_WORLD, size=n)` asks for the size alone.
module fsdp_c
  use, intrinsic :: iso_c_binding
  implicit none

  ! ---- Versions, enums (integer(c_int) parameters), FSDP_MAX_NDIM, FSDP_CONFIG_MAGIC: generated
  ! from include/fsdp.h at build time by generate_constants.py.
  include 'fsdp_constants.inc'

  ! ---- Handles: one C pointer each, passed by value where C takes the handle and by
  ! reference where C takes a pointer to it (creation, destruction).
  type, bind(C) :: fsdp_context_t
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, bind(C) :: fsdp_unit_t
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, bind(C) :: fsdp_optimizer_t
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, bind(C) :: fsdp_grad_scaler_t
    type(c_ptr) :: ptr = c_null_ptr
  end type
  type, bind(C) :: fsdp_request_t
    type(c_ptr) :: ptr = c_null_ptr
  end type

  ! ---- Structs that grow at their end: `size` starts as the size of this definition (checked
  ! against c_sizeof by the Fortran tests), the other fields as the C initializers.
  type, bind(C) :: fsdp_config_t
    integer(c_size_t) :: size = 72
    integer(c_int32_t) :: magic = FSDP_CONFIG_MAGIC
    integer(c_int32_t) :: version = FSDP_VERSION
    integer(c_int) :: strategy = FSDP_FULL_SHARD
    integer(c_int) :: sharding_factor = 0
    integer(c_int) :: grad_reduction = FSDP_REDUCE_MEAN
    integer(c_int) :: param_dtype = FSDP_DTYPE_AUTO
    integer(c_int) :: reduce_dtype = FSDP_DTYPE_AUTO
    integer(c_int) :: max_unsharded = 0
    integer(c_int) :: memory_space = FSDP_MEMORY_HOST
    integer(c_int) :: device = -1
    integer(c_int) :: cpu_offload = 0
    integer(c_int) :: transport = FSDP_TRANSPORT_AUTO
    integer(c_int) :: debug_collectives = 0
    integer(c_int) :: on_timeout = FSDP_ON_TIMEOUT_ERROR
    real(c_double) :: timeout_s = 0
  end type

  type, bind(C) :: fsdp_param_desc_t
    type(c_ptr) :: name = c_null_ptr
    integer(c_int) :: ndim = 0
    type(c_ptr) :: shape = c_null_ptr
    integer(c_int) :: dtype = FSDP_FLOAT32
    integer(c_int) :: requires_grad = 1
  end type

  type, bind(C) :: fsdp_unit_options_t
    integer(c_size_t) :: size = 48
    type(c_ptr) :: name = c_null_ptr
    integer(c_int) :: param_dtype = FSDP_DTYPE_AUTO
    integer(c_int) :: reduce_dtype = FSDP_DTYPE_AUTO
    type(c_funptr) :: init = c_null_funptr
    type(c_ptr) :: init_user_data = c_null_ptr
    integer(c_int) :: sync_from_rank0 = 0
  end type

  type, bind(C) :: fsdp_memory_stats_t
    integer(c_size_t) :: size = 176
    integer(c_size_t) :: shard_bytes = 0, grad_shard_bytes = 0, unsharded_bytes = 0, &
                         pool_cached_bytes = 0, peak_bytes = 0, unsharded_model_bytes = 0, &
                         scratch_bytes = 0, full_grad_bytes = 0, optimizer_state_bytes = 0, &
                         peak_parameter_bytes = 0, peak_shard_bytes = 0, &
                         peak_grad_shard_bytes = 0, peak_unsharded_bytes = 0, &
                         peak_full_grad_bytes = 0, peak_optimizer_state_bytes = 0, &
                         allocation_calls = 0, peak_init_bytes = 0, &
                         prefetches_started = 0, prefetches_used = 0, prefetches_unused = 0, &
                         prefetches_skipped_limit = 0
  end type

  ! PyTorch's SGD defaults; fsdp_adamw_defaults() in module fsdp gives AdamW's.
  type, bind(C) :: fsdp_hyperparams_t
    integer(c_size_t) :: size = 72
    real(c_double) :: lr = 1d-3
    real(c_double) :: weight_decay = 0
    real(c_double) :: momentum = 0
    real(c_double) :: dampening = 0
    integer(c_int) :: nesterov = 0
    real(c_double) :: beta1 = 0.9d0
    real(c_double) :: beta2 = 0.999d0
    real(c_double) :: eps = 1d-8
  end type

  type, bind(C) :: fsdp_checkpoint_options_t
    integer(c_size_t) :: size = 64
    integer(c_int) :: noptimizers = 0
    type(c_ptr) :: optimizers = c_null_ptr
    type(c_ptr) :: grad_scaler = c_null_ptr
    integer(c_int) :: nmetadata = 0
    type(c_ptr) :: metadata_keys = c_null_ptr
    type(c_ptr) :: metadata_values = c_null_ptr
    integer(c_int) :: load_flags = FSDP_LOAD_STRICT
  end type

  type, bind(C) :: fsdp_checkpoint_report_t
    integer(c_size_t) :: size = 32
    integer(c_int) :: loaded = 0, missing = 0, unexpected = 0, mismatched = 0
    type(c_ptr) :: details = c_null_ptr
  end type

  interface
    ! ---- Errors and versions
    function c_fsdp_status_string(status) result(s) bind(C, name='fsdp_status_string')
      import :: c_int, c_ptr
      integer(c_int), value :: status
      type(c_ptr) :: s
    end function
    function c_fsdp_last_error() result(s) bind(C, name='fsdp_last_error')
      import :: c_ptr
      type(c_ptr) :: s
    end function
    function c_fsdp_record_error(status, call, message) result(st) &
        bind(C, name='fsdp_record_error')
      import :: c_int, c_char
      integer(c_int), value :: status
      character(kind=c_char), intent(in) :: call(*), message(*)
      integer(c_int) :: st
    end function
    function fsdp_get_version(major, minor, patch) result(st) bind(C, name='fsdp_get_version')
      import :: c_int
      integer(c_int), intent(out), optional :: major, minor, patch
      integer(c_int) :: st
    end function
    function fsdp_check_version(major, minor, patch) result(st) &
        bind(C, name='fsdp_check_version')
      import :: c_int
      integer(c_int), value :: major, minor, patch
      integer(c_int) :: st
    end function
    function fsdp_convert(dst, dst_dtype, src, src_dtype, n) result(st) &
        bind(C, name='fsdp_convert')
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: dst, src
      integer(c_int), value :: dst_dtype, src_dtype
      integer(c_size_t), value :: n
      integer(c_int) :: st
    end function
    function fsdp_config_defaults(cfg, size) result(st) bind(C, name='fsdp_config_defaults')
      import :: c_int, c_size_t, fsdp_config_t
      type(fsdp_config_t), intent(inout) :: cfg
      integer(c_size_t), value :: size
      integer(c_int) :: st
    end function

    ! ---- Contexts
    function c_fsdp_init_fcomm(fcomm, cfg, ctx) result(st) bind(C, name='fsdp_init_fcomm')
      import :: c_int, fsdp_config_t, fsdp_context_t
      integer(c_int), value :: fcomm
      type(fsdp_config_t), intent(in) :: cfg
      type(fsdp_context_t), intent(out) :: ctx
      integer(c_int) :: st
    end function
    function fsdp_finalize(ctx) result(st) bind(C, name='fsdp_finalize')
      import :: c_int, fsdp_context_t
      type(fsdp_context_t), intent(inout) :: ctx
      integer(c_int) :: st
    end function
    ! Since 0.9. values(i) for parameter i-1 (C_NULL_PTR: skipped): room for its numel elements
    ! of the unit's dtype (c_loc of an array of the parameter's Fortran shape).
    function fsdp_gather_params(unit, values) result(st) bind(C, name='fsdp_gather_params')
      import :: c_int, c_ptr, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      type(c_ptr), intent(in) :: values(*)
      integer(c_int) :: st
    end function
    ! Since 0.9: `bytes` bytes at `data` (c_loc of a variable) from `root` of `group` to its ranks.
    function fsdp_broadcast(ctx, group, root, data, bytes) result(st) &
        bind(C, name='fsdp_broadcast')
      import :: c_int, c_ptr, c_size_t, fsdp_context_t
      type(fsdp_context_t), value :: ctx
      integer(c_int), value :: group, root
      type(c_ptr), value :: data
      integer(c_size_t), value :: bytes
      integer(c_int) :: st
    end function
    ! Since 0.9: gradient sync for one unit; whether its reduce communicates now.
    function fsdp_unit_set_grad_sync(unit, enabled) result(st) &
        bind(C, name='fsdp_unit_set_grad_sync')
      import :: c_int, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      integer(c_int), value :: enabled
      integer(c_int) :: st
    end function
    function fsdp_unit_grad_sync(unit, enabled) result(st) bind(C, name='fsdp_unit_grad_sync')
      import :: c_int, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      integer(c_int), intent(out) :: enabled
      integer(c_int) :: st
    end function
    ! Since 0.9: `count` doubles at `data` (c_loc of an array) reduced in place over `group`.
    function fsdp_allreduce(ctx, group, op, data, count) result(st) &
        bind(C, name='fsdp_allreduce')
      import :: c_int, c_ptr, c_size_t, fsdp_context_t
      type(fsdp_context_t), value :: ctx
      integer(c_int), value :: group, op
      type(c_ptr), value :: data
      integer(c_size_t), value :: count
      integer(c_int) :: st
    end function
    function fsdp_group_info(ctx, group, rank, size) result(st) bind(C, name='fsdp_group_info')
      import :: c_int, fsdp_context_t
      type(fsdp_context_t), value :: ctx
      integer(c_int), value :: group
      integer(c_int), intent(out), optional :: rank, size
      integer(c_int) :: st
    end function
    function fsdp_context_config(ctx, sharding_factor, strategy, grad_reduction) result(st) &
        bind(C, name='fsdp_context_config')
      import :: c_int, fsdp_context_t
      type(fsdp_context_t), value :: ctx
      integer(c_int), intent(out), optional :: sharding_factor, strategy, grad_reduction
      integer(c_int) :: st
    end function
    function fsdp_memory_stats(ctx, stats) result(st) bind(C, name='fsdp_memory_stats')
      import :: c_int, fsdp_context_t, fsdp_memory_stats_t
      type(fsdp_context_t), value :: ctx
      type(fsdp_memory_stats_t), intent(inout) :: stats
      integer(c_int) :: st
    end function
    function fsdp_context_placement(ctx, memory_space, device, cpu_offload, transport) &
        result(st) bind(C, name='fsdp_context_placement')
      import :: c_int, fsdp_context_t
      type(fsdp_context_t), value :: ctx
      integer(c_int), intent(out), optional :: memory_space, device, cpu_offload, transport
      integer(c_int) :: st
    end function
    function fsdp_cuda_device_count(count) result(st) bind(C, name='fsdp_cuda_device_count')
      import :: c_int
      integer(c_int), intent(out) :: count
      integer(c_int) :: st
    end function
    ! stream: a cudaStream_t as a C pointer (c_null_ptr: the default stream).
    function fsdp_set_stream(ctx, stream) result(st) bind(C, name='fsdp_set_stream')
      import :: c_int, c_ptr, fsdp_context_t
      type(fsdp_context_t), value :: ctx
      type(c_ptr), value :: stream
      integer(c_int) :: st
    end function
    function fsdp_abort(ctx) result(st) bind(C, name='fsdp_abort')
      import :: c_int, fsdp_context_t
      type(fsdp_context_t), value :: ctx
      integer(c_int) :: st
    end function
    function fsdp_trim_pool(ctx) result(st) bind(C, name='fsdp_trim_pool')
      import :: c_int, fsdp_context_t
      type(fsdp_context_t), value :: ctx
      integer(c_int) :: st
    end function
    function fsdp_reset_peak_memory(ctx) result(st) bind(C, name='fsdp_reset_peak_memory')
      import :: c_int, fsdp_context_t
      type(fsdp_context_t), value :: ctx
      integer(c_int) :: st
    end function
    function fsdp_set_grad_sync(ctx, enabled) result(st) bind(C, name='fsdp_set_grad_sync')
      import :: c_int, fsdp_context_t
      type(fsdp_context_t), value :: ctx
      integer(c_int), value :: enabled
      integer(c_int) :: st
    end function

    ! ---- Units
    function c_fsdp_unit_create_ex(ctx, nparams, descs, initial_values, options, unit) &
        result(st) bind(C, name='fsdp_unit_create_ex')
      import :: c_int, c_ptr, fsdp_context_t, fsdp_param_desc_t, fsdp_unit_options_t, fsdp_unit_t
      type(fsdp_context_t), value :: ctx
      integer(c_int), value :: nparams
      type(fsdp_param_desc_t), intent(in) :: descs(*)
      type(c_ptr), intent(in) :: initial_values(*)
      type(fsdp_unit_options_t), intent(in) :: options
      type(fsdp_unit_t), intent(out) :: unit
      integer(c_int) :: st
    end function
    function c_fsdp_unit_tie(user, alias, owner, owner_index, alias_index) result(st) &
        bind(C, name='fsdp_unit_tie')
      import :: c_int, c_char, fsdp_unit_t
      type(fsdp_unit_t), value :: user, owner
      character(kind=c_char), intent(in) :: alias(*)
      integer(c_int), value :: owner_index
      integer(c_int), intent(out), optional :: alias_index
      integer(c_int) :: st
    end function
    function fsdp_unit_destroy(unit) result(st) bind(C, name='fsdp_unit_destroy')
      import :: c_int, fsdp_unit_t
      type(fsdp_unit_t), intent(inout) :: unit
      integer(c_int) :: st
    end function
    function fsdp_unshard(unit) result(st) bind(C, name='fsdp_unshard')
      import :: c_int, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      integer(c_int) :: st
    end function
    function fsdp_reshard(unit) result(st) bind(C, name='fsdp_reshard')
      import :: c_int, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      integer(c_int) :: st
    end function
    function c_fsdp_param_data(unit, index, data) result(st) bind(C, name='fsdp_param_data')
      import :: c_int, c_ptr, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      integer(c_int), value :: index
      type(c_ptr), intent(out) :: data
      integer(c_int) :: st
    end function
    function c_fsdp_grad_data(unit, index, data) result(st) bind(C, name='fsdp_grad_data')
      import :: c_int, c_ptr, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      integer(c_int), value :: index
      type(c_ptr), intent(out) :: data
      integer(c_int) :: st
    end function
    function fsdp_reduce_grads(unit) result(st) bind(C, name='fsdp_reduce_grads')
      import :: c_int, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      integer(c_int) :: st
    end function
    function fsdp_zero_grads(unit) result(st) bind(C, name='fsdp_zero_grads')
      import :: c_int, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      integer(c_int) :: st
    end function
    function c_fsdp_shard_data(unit, data, numel) result(st) bind(C, name='fsdp_shard_data')
      import :: c_int, c_ptr, c_size_t, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      type(c_ptr), intent(out), optional :: data
      integer(c_size_t), intent(out), optional :: numel
      integer(c_int) :: st
    end function
    function c_fsdp_shard_grad(unit, data, numel) result(st) bind(C, name='fsdp_shard_grad')
      import :: c_int, c_ptr, c_size_t, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      type(c_ptr), intent(out), optional :: data
      integer(c_size_t), intent(out), optional :: numel
      integer(c_int) :: st
    end function
    function fsdp_param_shard_range(unit, index, shard_offset, param_offset, length) &
        result(st) bind(C, name='fsdp_param_shard_range')
      import :: c_int, c_size_t, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      integer(c_int), value :: index
      integer(c_size_t), intent(out), optional :: shard_offset, param_offset, length
      integer(c_int) :: st
    end function
    function fsdp_unit_numel(unit, numel, padded_numel, shard_numel) result(st) &
        bind(C, name='fsdp_unit_numel')
      import :: c_int, c_size_t, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      integer(c_size_t), intent(out), optional :: numel, padded_numel, shard_numel
      integer(c_int) :: st
    end function
    function fsdp_unit_info(unit, nparams, dtype) result(st) bind(C, name='fsdp_unit_info')
      import :: c_int, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      integer(c_int), intent(out), optional :: nparams, dtype
      integer(c_int) :: st
    end function
    function fsdp_unit_precision(unit, storage, param_dtype, reduce_dtype) result(st) &
        bind(C, name='fsdp_unit_precision')
      import :: c_int, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      integer(c_int), intent(out), optional :: storage, param_dtype, reduce_dtype
      integer(c_int) :: st
    end function
    function fsdp_unit_zero_copy(unit, zero_copy) result(st) bind(C, name='fsdp_unit_zero_copy')
      import :: c_int, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      integer(c_int), intent(out) :: zero_copy
      integer(c_int) :: st
    end function
    function fsdp_param_numel(unit, index, numel) result(st) bind(C, name='fsdp_param_numel')
      import :: c_int, c_size_t, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      integer(c_int), value :: index
      integer(c_size_t), intent(out) :: numel
      integer(c_int) :: st
    end function
    function c_fsdp_param_info(unit, index, name, ndim, shape, dtype, requires_grad) &
        result(st) bind(C, name='fsdp_param_info')
      import :: c_int, c_ptr, c_int64_t, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      integer(c_int), value :: index
      type(c_ptr), intent(out), optional :: name
      integer(c_int), intent(out), optional :: ndim, dtype, requires_grad
      integer(c_int64_t), intent(out), optional :: shape(*)
      integer(c_int) :: st
    end function

    ! ---- Asynchronous operations and prefetch
    function fsdp_unshard_async(unit, req) result(st) bind(C, name='fsdp_unshard_async')
      import :: c_int, fsdp_unit_t, fsdp_request_t
      type(fsdp_unit_t), value :: unit
      type(fsdp_request_t), intent(out), optional :: req
      integer(c_int) :: st
    end function
    function fsdp_reduce_grads_async(unit, req) result(st) &
        bind(C, name='fsdp_reduce_grads_async')
      import :: c_int, fsdp_unit_t, fsdp_request_t
      type(fsdp_unit_t), value :: unit
      type(fsdp_request_t), intent(out), optional :: req
      integer(c_int) :: st
    end function
    function fsdp_wait(req) result(st) bind(C, name='fsdp_wait')
      import :: c_int, fsdp_request_t
      type(fsdp_request_t), intent(inout) :: req
      integer(c_int) :: st
    end function
    function fsdp_test(req, done) result(st) bind(C, name='fsdp_test')
      import :: c_int, fsdp_request_t
      type(fsdp_request_t), value :: req
      integer(c_int), intent(out) :: done
      integer(c_int) :: st
    end function
    function fsdp_unit_wait(unit) result(st) bind(C, name='fsdp_unit_wait')
      import :: c_int, fsdp_unit_t
      type(fsdp_unit_t), value :: unit
      integer(c_int) :: st
    end function
    function fsdp_context_async(ctx, progress_thread) result(st) &
        bind(C, name='fsdp_context_async')
      import :: c_int, fsdp_context_t
      type(fsdp_context_t), value :: ctx
      integer(c_int), intent(out) :: progress_thread
      integer(c_int) :: st
    end function
    function fsdp_set_prefetch(ctx, forward, backward) result(st) &
        bind(C, name='fsdp_set_prefetch')
      import :: c_int, fsdp_context_t
      type(fsdp_context_t), value :: ctx
      integer(c_int), value :: forward, backward
      integer(c_int) :: st
    end function
    function fsdp_begin_forward(ctx) result(st) bind(C, name='fsdp_begin_forward')
      import :: c_int, fsdp_context_t
      type(fsdp_context_t), value :: ctx
      integer(c_int) :: st
    end function
    function fsdp_begin_backward(ctx) result(st) bind(C, name='fsdp_begin_backward')
      import :: c_int, fsdp_context_t
      type(fsdp_context_t), value :: ctx
      integer(c_int) :: st
    end function

    ! ---- Optimizers, clipping, gradient scaler
    function c_fsdp_optimizer_create(ctx, kind, defaults, nunits, units, opt) result(st) &
        bind(C, name='fsdp_optimizer_create')
      import :: c_int, c_ptr, fsdp_context_t, fsdp_unit_t, fsdp_optimizer_t
      type(fsdp_context_t), value :: ctx
      integer(c_int), value :: kind, nunits
      type(c_ptr), value :: defaults  ! a fsdp_hyperparams, or c_null_ptr for the kind's
      type(fsdp_unit_t), intent(in) :: units(*)
      type(fsdp_optimizer_t), intent(out) :: opt
      integer(c_int) :: st
    end function
    function fsdp_optimizer_destroy(opt) result(st) bind(C, name='fsdp_optimizer_destroy')
      import :: c_int, fsdp_optimizer_t
      type(fsdp_optimizer_t), intent(inout) :: opt
      integer(c_int) :: st
    end function
    function c_fsdp_optimizer_add_group(opt, pattern, hp, group, nmatched) result(st) &
        bind(C, name='fsdp_optimizer_add_group')
      import :: c_int, c_char, fsdp_optimizer_t, fsdp_hyperparams_t
      type(fsdp_optimizer_t), value :: opt
      character(kind=c_char), intent(in) :: pattern(*)
      type(fsdp_hyperparams_t), intent(in) :: hp
      integer(c_int), intent(out), optional :: group, nmatched
      integer(c_int) :: st
    end function
    function fsdp_optimizer_get_hyperparams(opt, group, hp) result(st) &
        bind(C, name='fsdp_optimizer_get_hyperparams')
      import :: c_int, fsdp_optimizer_t, fsdp_hyperparams_t
      type(fsdp_optimizer_t), value :: opt
      integer(c_int), value :: group
      type(fsdp_hyperparams_t), intent(inout) :: hp
      integer(c_int) :: st
    end function
    function fsdp_optimizer_set_hyperparams(opt, group, hp) result(st) &
        bind(C, name='fsdp_optimizer_set_hyperparams')
      import :: c_int, fsdp_optimizer_t, fsdp_hyperparams_t
      type(fsdp_optimizer_t), value :: opt
      integer(c_int), value :: group
      type(fsdp_hyperparams_t), intent(in) :: hp
      integer(c_int) :: st
    end function
    function fsdp_optimizer_set_lr(opt, group, lr) result(st) &
        bind(C, name='fsdp_optimizer_set_lr')
      import :: c_int, c_double, fsdp_optimizer_t
      type(fsdp_optimizer_t), value :: opt
      integer(c_int), value :: group
      real(c_double), value :: lr
      integer(c_int) :: st
    end function
    function fsdp_optimizer_step(opt) result(st) bind(C, name='fsdp_optimizer_step')
      import :: c_int, fsdp_optimizer_t
      type(fsdp_optimizer_t), value :: opt
      integer(c_int) :: st
    end function
    function fsdp_optimizer_zero_grad(opt) result(st) bind(C, name='fsdp_optimizer_zero_grad')
      import :: c_int, fsdp_optimizer_t
      type(fsdp_optimizer_t), value :: opt
      integer(c_int) :: st
    end function
    function fsdp_clip_grad_norm(ctx, max_norm, norm_type, total_norm) result(st) &
        bind(C, name='fsdp_clip_grad_norm')
      import :: c_int, c_double, fsdp_context_t
      type(fsdp_context_t), value :: ctx
      real(c_double), value :: max_norm, norm_type
      real(c_double), intent(out), optional :: total_norm
      integer(c_int) :: st
    end function
    function fsdp_grad_scaler_create(ctx, init_scale, growth_factor, backoff_factor, &
                                     growth_interval, scaler) result(st) &
        bind(C, name='fsdp_grad_scaler_create')
      import :: c_int, c_double, fsdp_context_t, fsdp_grad_scaler_t
      type(fsdp_context_t), value :: ctx
      real(c_double), value :: init_scale, growth_factor, backoff_factor
      integer(c_int), value :: growth_interval
      type(fsdp_grad_scaler_t), intent(out) :: scaler
      integer(c_int) :: st
    end function
    function fsdp_grad_scaler_destroy(scaler) result(st) bind(C, name='fsdp_grad_scaler_destroy')
      import :: c_int, fsdp_grad_scaler_t
      type(fsdp_grad_scaler_t), intent(inout) :: scaler
      integer(c_int) :: st
    end function
    function fsdp_grad_scaler_scale(scaler, scale) result(st) &
        bind(C, name='fsdp_grad_scaler_scale')
      import :: c_int, c_double, fsdp_grad_scaler_t
      type(fsdp_grad_scaler_t), value :: scaler
      real(c_double), intent(out) :: scale
      integer(c_int) :: st
    end function
    function fsdp_grad_scaler_unscale(scaler, opt) result(st) &
        bind(C, name='fsdp_grad_scaler_unscale')
      import :: c_int, fsdp_grad_scaler_t, fsdp_optimizer_t
      type(fsdp_grad_scaler_t), value :: scaler
      type(fsdp_optimizer_t), value :: opt
      integer(c_int) :: st
    end function
    function fsdp_grad_scaler_step(scaler, opt, skipped) result(st) &
        bind(C, name='fsdp_grad_scaler_step')
      import :: c_int, fsdp_grad_scaler_t, fsdp_optimizer_t
      type(fsdp_grad_scaler_t), value :: scaler
      type(fsdp_optimizer_t), value :: opt
      integer(c_int), intent(out), optional :: skipped
      integer(c_int) :: st
    end function
    function fsdp_grad_scaler_update(scaler) result(st) bind(C, name='fsdp_grad_scaler_update')
      import :: c_int, fsdp_grad_scaler_t
      type(fsdp_grad_scaler_t), value :: scaler
      integer(c_int) :: st
    end function

    ! ---- Checkpoints
    function c_fsdp_checkpoint_save(ctx, path, options) result(st) &
        bind(C, name='fsdp_checkpoint_save')
      import :: c_int, c_char, fsdp_context_t, fsdp_checkpoint_options_t
      type(fsdp_context_t), value :: ctx
      character(kind=c_char), intent(in) :: path(*)
      type(fsdp_checkpoint_options_t), intent(in) :: options
      integer(c_int) :: st
    end function
    function c_fsdp_checkpoint_save_async(ctx, path, options, req) result(st) &
        bind(C, name='fsdp_checkpoint_save_async')
      import :: c_int, c_char, fsdp_context_t, fsdp_checkpoint_options_t, fsdp_request_t
      type(fsdp_context_t), value :: ctx
      character(kind=c_char), intent(in) :: path(*)
      type(fsdp_checkpoint_options_t), intent(in) :: options
      type(fsdp_request_t), intent(out) :: req
      integer(c_int) :: st
    end function
    function c_fsdp_checkpoint_load(ctx, path, options, report) result(st) &
        bind(C, name='fsdp_checkpoint_load')
      import :: c_int, c_char, fsdp_context_t, fsdp_checkpoint_options_t, fsdp_checkpoint_report_t
      type(fsdp_context_t), value :: ctx
      character(kind=c_char), intent(in) :: path(*)
      type(fsdp_checkpoint_options_t), intent(in) :: options
      type(fsdp_checkpoint_report_t), intent(inout), optional :: report
      integer(c_int) :: st
    end function
    function c_fsdp_checkpoint_metadata(path, key, value, capacity, length) result(st) &
        bind(C, name='fsdp_checkpoint_metadata')
      import :: c_int, c_char, c_size_t, c_ptr
      character(kind=c_char), intent(in) :: path(*), key(*)
      type(c_ptr), value :: value  ! c_null_ptr: only the length
      integer(c_size_t), value :: capacity
      integer(c_size_t), intent(out), optional :: length
      integer(c_int) :: st
    end function
  end interface
end module fsdp_c
