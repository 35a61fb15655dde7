! libfsdp for Fortran: `use fsdp`. Every C function of include/fsdp.h under its C name, as a
! function returning its status (FSDP_SUCCESS = 0), so the C documentation applies as it is.
! Where Fortran needs it the arguments are Fortran's own: communicators from `mpi` (integer) or
! `mpi_f08` (type(MPI_Comm)), strings without a NUL, arrays instead of pointer + count, and the
! parameters, gradients and shards as Fortran array pointers of their shape and kind.
!
! Row-major and column-major: a parameter described to the library with shape [m, n] (C order,
! the order of fsdp_param_info and of checkpoints) is, in Fortran, an array of shape (n, m): the
! same bytes, the indices reversed. fsdp_param(name, w) of a Fortran array w(n, m) describes the
! parameter [m, n]; fsdp_param_data gives it back as a pointer of shape (n, m).
!
! Indices of parameters count from 0, as in C: index i is the i-th fsdp_param given at creation,
! counting from 0.
!
! Bad input gets the library's treatment: a specific status, fsdp_last_error() naming the call
! and the argument, and nothing changed (a pointer argument keeps its association).
module fsdp
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: error_unit
  use fsdp_c
#ifdef FSDP_HAVE_MPI_F08
  use mpi_f08, only: MPI_Comm
#endif
  implicit none
  private

  ! ---- Re-exported from fsdp_c (generated with it): the constants, handles, structs, the
  ! functions of the initializer macros (fsdp_sgd_defaults...) and every call used as it is.
#include "fsdp_public.inc"
  public :: FSDP_MAX_NAME_LEN
  !> The longest parameter name fsdp_param takes (the C library has no limit).
  integer, parameter :: FSDP_MAX_NAME_LEN = 1024

  ! ---- Fortran forms
  public :: fsdp_status_string, fsdp_last_error, fsdp_record_error, fsdp_check
  public :: fsdp_init, fsdp_param_t, fsdp_param, fsdp_unit_create, fsdp_unit_tie, fsdp_param_info
  public :: fsdp_param_data, fsdp_grad_data, fsdp_shard_data, fsdp_shard_grad
  public :: fsdp_param_desc_shape, fsdp_param_desc_name
  public :: fsdp_optimizer_create, fsdp_optimizer_add_group, fsdp_optimizer_state
  public :: fsdp_load_report_t, fsdp_checkpoint_save, fsdp_checkpoint_save_async, &
            fsdp_checkpoint_load, fsdp_checkpoint_metadata, fsdp_checkpoint_describe
  public :: fsdp_safetensors_export, fsdp_safetensors_import
  public :: fsdp_checkpoint_verify, fsdp_checkpoint_diff

  ! One parameter of a unit to create: fsdp_param(name, values [, requires_grad]) takes a
  ! real(c_float) or real(c_double) array of rank 0 to 4 (any expression, any section);
  ! fsdp_param(name, shape, dtype [, requires_grad] [, values]) describes one by its C-order
  ! shape (zeros, or the values at a c_ptr). Either way fsdp_param copies the values at once, so
  ! the descriptor never points at the caller's memory, which may be a temporary that dies when
  ! fsdp_param returns (`fsdp_param('w', 0.5 * w)`). The copy is held by this module (see
  ! `held` below) until the fsdp_unit_create that is given the descriptor, which frees it.
  ! No allocatable components: gfortran (12) does not free those of the temporaries in an array
  ! constructor such as [fsdp_param(...), fsdp_param(...)], so every unit creation would leak.
  type :: fsdp_param_t
    private
    character(len=FSDP_MAX_NAME_LEN) :: name = ''
    integer :: name_len = 0
    integer :: ndim = 0
    integer(c_int64_t) :: shape(FSDP_MAX_NDIM) = 0  ! C order: a Fortran array's shape reversed
    integer(c_int) :: dtype = FSDP_FLOAT32
    integer(c_int) :: requires_grad = 1
    integer :: held = 0                  ! the slot of `held` with the copy of the values; 0: none
    integer(c_int64_t) :: serial = 0     ! the copy's serial number, checked before it is read
    character(len=80) :: error = ''      ! set by a constructor that was given bad input
    integer(c_int) :: error_status = FSDP_ERR_INVALID_ARGUMENT
  end type

  ! The copies of the values fsdp_param was given, one per slot. A descriptor names its copy by
  ! slot and serial number, never by address: a descriptor given to a second fsdp_unit_create,
  ! after the first one freed its copy, is refused instead of read. Module state: fsdp_param and
  ! fsdp_unit_create are not thread-safe (call them from one thread at a time).
  type :: held_values
    integer(c_int64_t) :: serial = 0  ! 0: a free slot
    real(c_float), allocatable :: f32(:)
    real(c_double), allocatable :: f64(:)
  end type
  type(held_values), allocatable, target :: held(:)
  integer(c_int64_t) :: last_serial = 0

  ! What fsdp_checkpoint_load did: fsdp_checkpoint_report_t with the details as a string.
  type :: fsdp_load_report_t
    integer :: loaded = 0, missing = 0, unexpected = 0, mismatched = 0
    character(len=:), allocatable :: details
  end type

  interface fsdp_init
    module procedure init_integer_comm
#ifdef FSDP_HAVE_MPI_F08
    module procedure init_mpi_f08_comm
#endif
  end interface

  ! Export and import take a communicator of `mpi` (integer) or `mpi_f08` (type(MPI_Comm)).
  interface fsdp_safetensors_export
    module procedure safetensors_export_integer_comm
#ifdef FSDP_HAVE_MPI_F08
    module procedure safetensors_export_mpi_f08_comm
#endif
  end interface
  interface fsdp_safetensors_import
    module procedure safetensors_import_integer_comm
#ifdef FSDP_HAVE_MPI_F08
    module procedure safetensors_import_mpi_f08_comm
#endif
  end interface

  ! Verify and diff take a communicator of `mpi` (integer) or `mpi_f08` (type(MPI_Comm)).
  interface fsdp_checkpoint_verify
    module procedure checkpoint_verify_integer_comm
#ifdef FSDP_HAVE_MPI_F08
    module procedure checkpoint_verify_mpi_f08_comm
#endif
  end interface
  interface fsdp_checkpoint_diff
    module procedure checkpoint_diff_integer_comm
#ifdef FSDP_HAVE_MPI_F08
    module procedure checkpoint_diff_mpi_f08_comm
#endif
  end interface

  ! An optimizer's state buffer as a rank-1 pointer of the unit's kind, or as a type(c_ptr).
  interface fsdp_optimizer_state
    module procedure optimizer_state_f32, optimizer_state_f64, optimizer_state_ptr
  end interface

#include "fsdp_typed_interfaces.inc"

  interface
    pure function c_strlen(s) result(n) bind(C, name='strlen')
      import :: c_ptr, c_size_t
      type(c_ptr), value, intent(in) :: s
      integer(c_size_t) :: n
    end function
  end interface

contains

  ! ---- Strings and errors

  ! A NUL-terminated C string as a Fortran string ("" for a NULL pointer).
  function from_c(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    if (.not. c_associated(p)) then
      s = ''
      return
    end if
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate (character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function

  pure function to_c(s) result(c)
    character(len=*), intent(in) :: s
    character(kind=c_char, len=len(s) + 1) :: c
    c = s//c_null_char
  end function

  function fsdp_status_string(status) result(s)
    integer(c_int), intent(in) :: status
    character(len=:), allocatable :: s
    s = from_c(c_fsdp_status_string(status))
  end function

  function fsdp_last_error() result(s)
    character(len=:), allocatable :: s
    s = from_c(c_fsdp_last_error())
  end function

  function fsdp_record_error(status, call, message) result(st)
    integer(c_int), intent(in) :: status
    character(len=*), intent(in) :: call, message
    integer(c_int) :: st
    st = c_fsdp_record_error(status, to_c(call), to_c(message))
  end function

  ! For programs that treat every error as fatal (as MPI_ERRORS_ARE_FATAL does): prints the
  ! message and stops the program, which makes mpiexec end the other ranks.
  subroutine fsdp_check(status)
    integer(c_int), intent(in) :: status
    character(len=:), allocatable :: message
    if (status == FSDP_SUCCESS) return
    message = fsdp_last_error()
    if (len(message) == 0) message = fsdp_status_string(status)
    write (error_unit, '(a)') 'libfsdp: '//message
    error stop 1
  end subroutine

  function itoa(i) result(s)
    integer(c_int64_t), intent(in) :: i
    character(len=:), allocatable :: s
    character(len=24) :: buf
    write (buf, '(i0)') i
    s = trim(buf)
  end function

  function shape_text(shp, n, reversed) result(s)
    integer(c_int64_t), intent(in) :: shp(:)
    integer, intent(in) :: n
    logical, intent(in) :: reversed
    character(len=:), allocatable :: s
    integer :: i
    s = merge('(', '[', reversed)
    do i = 1, n
      if (i > 1) s = s//', '
      if (reversed) then
        s = s//itoa(shp(n + 1 - i))
      else
        s = s//itoa(shp(i))
      end if
    end do
    s = s//merge(')', ']', reversed)
  end function

  function dtype_text(dtype) result(s)
    integer(c_int), intent(in) :: dtype
    character(len=:), allocatable :: s
    select case (dtype)
    case (FSDP_FLOAT32); s = 'float32, real(c_float) in Fortran'
    case (FSDP_FLOAT64); s = 'float64, real(c_double) in Fortran'
    case (FSDP_BFLOAT16); s = 'bfloat16, which no Fortran real kind holds: take a type(c_ptr)'
    case (FSDP_FLOAT16); s = 'float16, which no Fortran real kind holds: take a type(c_ptr)'
    case default; s = 'unknown'
    end select
  end function

  ! ---- Contexts

  function init_integer_comm(comm, ctx, config) result(st)
    integer, intent(in) :: comm  ! a communicator of the `mpi` module (MPI_COMM_WORLD...)
    type(fsdp_context_t), intent(out) :: ctx
    type(fsdp_config_t), intent(in), optional :: config
    integer(c_int) :: st
    type(fsdp_config_t) :: cfg
    if (present(config)) cfg = config
    ! The struct is this module's: its size, magic and version are not the caller's to set.
    cfg%size = c_sizeof(cfg)
    cfg%magic = FSDP_CONFIG_MAGIC
    cfg%version = FSDP_VERSION
    st = fsdp_check_version(FSDP_VERSION_MAJOR, FSDP_VERSION_MINOR, FSDP_VERSION_PATCH)
    if (st /= FSDP_SUCCESS) then
      st = as_call(st, 'fsdp_check_version', 'fsdp_init')
      return
    end if
    st = c_fsdp_init_fcomm(int(comm, c_int), cfg, ctx)
    st = as_call(st, 'fsdp_init_fcomm', 'fsdp_init')
  end function

#ifdef FSDP_HAVE_MPI_F08
  function init_mpi_f08_comm(comm, ctx, config) result(st)
    type(MPI_Comm), intent(in) :: comm
    type(fsdp_context_t), intent(out) :: ctx
    type(fsdp_config_t), intent(in), optional :: config
    integer(c_int) :: st
    st = init_integer_comm(comm%MPI_VAL, ctx, config)
  end function
#endif

  ! ---- Units

  function described(name, shape, dtype, requires_grad) result(p)
    character(len=*), intent(in) :: name
    integer(c_int64_t), intent(in) :: shape(:)  ! Fortran order
    integer(c_int), intent(in) :: dtype
    logical, intent(in), optional :: requires_grad
    type(fsdp_param_t) :: p
    if (len(name) > FSDP_MAX_NAME_LEN) then
      p%error = 'name: longer than FSDP_MAX_NAME_LEN (1024) characters'
    else
      p%name = name
      p%name_len = len(name)
    end if
    p%ndim = size(shape)
    if (size(shape) > FSDP_MAX_NDIM) then
      p%error = 'shape: more than FSDP_MAX_NDIM dimensions'
    else
      p%shape(1:size(shape)) = shape(size(shape):1:-1)
    end if
    p%dtype = dtype
    p%requires_grad = 1
    if (present(requires_grad)) p%requires_grad = merge(1, 0, requires_grad)
  end function

  ! `values`, when given, points at the parameter's prod(shape) values in C order, of `dtype`:
  ! they are copied here (fsdp_convert), so the memory need not outlive this call.
  function param_shaped(name, shape, dtype, requires_grad, values) result(p)
    character(len=*), intent(in) :: name
    integer(c_int64_t), intent(in) :: shape(:)  ! C order, as fsdp_param_info reports it
    integer(c_int), intent(in) :: dtype
    logical, intent(in), optional :: requires_grad
    type(c_ptr), intent(in), optional :: values
    type(fsdp_param_t) :: p
    type(c_ptr) :: copy
    integer(c_int) :: st
    p = described(name, shape(size(shape):1:-1), dtype, requires_grad)
    if (.not. present(values)) return
    ! Nothing to copy for zeros (NULL), or for a descriptor fsdp_unit_create will refuse anyway:
    ! bad input here, an extent below 1, more elements than 64 bits count, or a dtype that is
    ! not float32 or float64 (the library words those).
    if (.not. c_associated(values) .or. len_trim(p%error) > 0 .or. any(shape < 1) .or. &
        (dtype /= FSDP_FLOAT32 .and. dtype /= FSDP_FLOAT64)) return
    if (product(real(shape, c_double)) > real(huge(0_c_int64_t), c_double) / 8) return
    copy = hold(p, product(shape))
    if (.not. c_associated(copy)) return
    st = fsdp_convert(copy, dtype, values, dtype, int(product(shape), c_size_t))
    if (st /= FSDP_SUCCESS) then
      call release(p)
      p%error = 'values: '//fsdp_last_error()
      p%error_status = st
    end if
  end function

  ! Room for the `n` values of descriptor `p`, in its dtype (float32 or float64), held until the
  ! fsdp_unit_create it is given: their address, or c_null_ptr with p%error set when there is no
  ! memory for them.
  function hold(p, n) result(copy)
    type(fsdp_param_t), intent(inout) :: p
    integer(c_int64_t), intent(in) :: n
    type(c_ptr) :: copy
    type(held_values), allocatable :: grown(:)
    integer :: k, i, stat
    copy = c_null_ptr
    if (.not. allocated(held)) allocate (held(16))
    k = findloc(held%serial, 0_c_int64_t, dim=1)
    if (k == 0) then  ! every slot taken: twice as many, the copies moved, not copied
      allocate (grown(2 * size(held)))
      do i = 1, size(held)
        grown(i)%serial = held(i)%serial
        if (allocated(held(i)%f32)) call move_alloc(held(i)%f32, grown(i)%f32)
        if (allocated(held(i)%f64)) call move_alloc(held(i)%f64, grown(i)%f64)
      end do
      k = size(held) + 1
      call move_alloc(grown, held)
    end if
    if (p%dtype == FSDP_FLOAT64) then
      allocate (held(k)%f64(max(n, 1_c_int64_t)), stat=stat)
      if (stat == 0) copy = c_loc(held(k)%f64)
    else
      allocate (held(k)%f32(max(n, 1_c_int64_t)), stat=stat)
      if (stat == 0) copy = c_loc(held(k)%f32)
    end if
    if (stat /= 0) then
      p%error = 'values: no memory for their copy ('//itoa(n)//' elements)'
      p%error_status = FSDP_ERR_OUT_OF_MEMORY
      return
    end if
    last_serial = last_serial + 1
    held(k)%serial = last_serial
    p%held = k
    p%serial = last_serial
  end function

  ! Whether p's copy is still held (p has values and no fsdp_unit_create freed them yet).
  logical function holds(p)
    type(fsdp_param_t), intent(in) :: p
    holds = .false.
    if (p%held < 1 .or. .not. allocated(held)) return
    if (p%held > size(held)) return
    holds = held(p%held)%serial == p%serial
  end function

  ! The address of p's copy (c_null_ptr: none, zeros). Only for a descriptor that holds().
  function held_address(p) result(copy)
    type(fsdp_param_t), intent(in) :: p
    type(c_ptr) :: copy
    copy = c_null_ptr
    if (.not. holds(p)) return
    if (allocated(held(p%held)%f64)) then
      copy = c_loc(held(p%held)%f64)
    else if (allocated(held(p%held)%f32)) then
      copy = c_loc(held(p%held)%f32)
    end if
  end function

  ! Frees p's copy, if still held (a descriptor given twice in one call is freed once).
  subroutine release(p)
    type(fsdp_param_t), intent(in) :: p
    if (.not. holds(p)) return
    if (allocated(held(p%held)%f32)) deallocate (held(p%held)%f32)
    if (allocated(held(p%held)%f64)) deallocate (held(p%held)%f64)
    held(p%held)%serial = 0
  end subroutine

  ! A failed C call's message under the name of the Fortran call that made it: the C library
  ! names the entry point it was reached through (fsdp_unit_create_ex, fsdp_init_fcomm), which is
  ! not the call the program wrote. Returns `st`.
  function as_call(st, c_name, call) result(status)
    integer(c_int), intent(in) :: st
    character(len=*), intent(in) :: c_name, call
    integer(c_int) :: status
    character(len=:), allocatable :: message
    integer :: at
    status = st
    if (st == FSDP_SUCCESS) return
    message = fsdp_last_error()
    if (len(message) == 0) return
    do  ! every "<c_name>:" (a message may quote another rank's)
      at = index(message, c_name//':')
      if (at == 0) exit
      message = message(1:at - 1)//call//message(at + len(c_name):)
    end do
    if (index(message, call//': ') == 1) message = message(len(call) + 3:)
    status = fsdp_record_error(st, call, message)
  end function

  ! fsdp_unit_create_ex with the options as optional arguments. Collective over the world
  ! group. `init` (deferred initialization): a bind(C) function of interface fsdp_init_fn that
  ! writes each parameter's full values, given with `init_data` (passed to it as user_data);
  ! the parameters then carry no values (fsdp_param(name, shape, dtype)). `layout`: what each
  ! rank's shard holds (fsdp_unit_layout_t). `used_by`: which ranks use the unit in a step
  ! (fsdp_unit_use_t). Frees the copies of the values that fsdp_param made for `params`, whatever
  ! the outcome: a descriptor with values serves one unit creation (call fsdp_param again for the
  ! next). A local problem with `params` (a refused descriptor, one given before) still makes the
  ! collective call, refused on every rank, so that no rank is left waiting.
  function fsdp_unit_create(ctx, params, unit, name, param_dtype, reduce_dtype, &
                            sync_from_rank0, init, init_data, layout, used_by) result(st)
    type(fsdp_context_t), intent(in) :: ctx
    type(fsdp_param_t), intent(in), target :: params(:)
    type(fsdp_unit_t), intent(out) :: unit
    character(len=*), intent(in), optional :: name
    integer(c_int), intent(in), optional :: param_dtype, reduce_dtype
    logical, intent(in), optional :: sync_from_rank0
    procedure(fsdp_init_fn), optional :: init
    type(c_ptr), intent(in), optional :: init_data
    integer(c_int), intent(in), optional :: layout  ! FSDP_LAYOUT_FLAT or FSDP_LAYOUT_DIM0
    integer(c_int), intent(in), optional :: used_by  ! FSDP_USED_BY_ALL_RANKS or _ANY_RANKS
    integer(c_int) :: st
    type(fsdp_param_desc_t), allocatable :: descs(:)
    type(c_ptr), allocatable :: values(:)
    type c_name
      character(kind=c_char, len=:), allocatable :: s
    end type
    type(c_name), allocatable, target :: names(:)
    character(kind=c_char, len=:), allocatable, target :: unit_name
    type(fsdp_unit_options_t) :: options
    character(len=:), allocatable :: problem
    integer(c_int) :: problem_status
    integer :: i
    problem = ''
    problem_status = FSDP_ERR_INVALID_ARGUMENT
    allocate (descs(size(params)), values(size(params)), names(size(params)))
    do i = 1, size(params)
      if (len_trim(params(i)%error) > 0) then
        problem = trim(params(i)%error)
        problem_status = params(i)%error_status
      else if (params(i)%held /= 0 .and. .not. holds(params(i))) then
        problem = 'values: their copy was freed by the fsdp_unit_create this descriptor was '// &
                  'given before (a descriptor with values serves one unit creation: call '// &
                  'fsdp_param again)'
      end if
      if (len(problem) > 0) then
        problem = 'params('//itoa(int(i, c_int64_t))//') "'// &
                  params(i)%name(1:params(i)%name_len)//'": '//problem
        exit
      end if
      names(i)%s = to_c(params(i)%name(1:params(i)%name_len))
      descs(i)%name = c_loc(names(i)%s)
      descs(i)%ndim = params(i)%ndim
      descs(i)%shape = c_null_ptr
      if (params(i)%ndim > 0) descs(i)%shape = c_loc(params(i)%shape)
      descs(i)%dtype = params(i)%dtype
      descs(i)%requires_grad = params(i)%requires_grad
      values(i) = held_address(params(i))
    end do
    options%size = c_sizeof(options)
    if (present(name)) then
      unit_name = to_c(name)
      options%name = c_loc(unit_name)
    end if
    if (present(param_dtype)) options%param_dtype = param_dtype
    if (present(reduce_dtype)) options%reduce_dtype = reduce_dtype
    if (present(sync_from_rank0)) options%sync_from_rank0 = merge(1, 0, sync_from_rank0)
    if (present(init)) options%init = c_funloc(init)
    if (present(init_data)) options%init_user_data = init_data
    if (present(layout)) options%layout = int(layout, c_int64_t)
    if (present(used_by)) options%used_by = int(used_by, c_int64_t)
    if (len(problem) > 0) then  ! no parameters: refused on this rank, and so on every rank
      st = fsdp_unit_create_ex(ctx, 0_c_int, descs, values, options, unit)
      st = fsdp_record_error(problem_status, 'fsdp_unit_create', problem)
    else if (present(init) .and. .not. any([(holds(params(i)), i = 1, size(params))])) then
      ! initial_values NULL beside a callback; values given as well reach C, which refuses them
      st = fsdp_unit_create_ex(ctx, int(size(params), c_int), descs, options=options, unit=unit)
      st = as_call(st, 'fsdp_unit_create_ex', 'fsdp_unit_create')
    else
      st = fsdp_unit_create_ex(ctx, int(size(params), c_int), descs, values, options, unit)
      st = as_call(st, 'fsdp_unit_create_ex', 'fsdp_unit_create')
    end if
    do i = 1, size(params)
      call release(params(i))
    end do
  end function

  ! `alias_index` optional, as in C.
  function fsdp_unit_tie(user, alias, owner, owner_index, alias_index) result(st)
    type(fsdp_unit_t), intent(in) :: user, owner
    character(len=*), intent(in) :: alias
    integer, intent(in) :: owner_index
    integer, intent(out), optional :: alias_index
    integer(c_int) :: st, index
    st = c_fsdp_unit_tie(user, to_c(alias), owner, int(owner_index, c_int), index)
    if (st == FSDP_SUCCESS .and. present(alias_index)) alias_index = index
  end function

  ! For an fsdp_init_fn callback: the parameter's shape in Fortran order (the C shape reversed),
  ! the shape of the Fortran array to view its `data` as (c_f_pointer(data, a, shape)).
  function fsdp_param_desc_shape(desc) result(shp)
    type(fsdp_param_desc_t), intent(in) :: desc
    integer(c_int64_t), allocatable :: shp(:)
    integer(c_int64_t), pointer :: c_shape(:)
    allocate (shp(desc%ndim))
    if (desc%ndim == 0) return
    call c_f_pointer(desc%shape, c_shape, [desc%ndim])
    shp = c_shape(desc%ndim:1:-1)
  end function

  ! For an fsdp_init_fn callback: the parameter's name.
  function fsdp_param_desc_name(desc) result(name)
    type(fsdp_param_desc_t), intent(in) :: desc
    character(len=:), allocatable :: name
    name = from_c(desc%name)
  end function

  ! Parameter `index` as described: name, shape in C order (the Fortran array's is reversed),
  ! dtype, requires_grad. Every output is optional.
  function fsdp_param_info(unit, index, name, shape, dtype, requires_grad) result(st)
    type(fsdp_unit_t), intent(in) :: unit
    integer, intent(in) :: index
    character(len=:), allocatable, intent(out), optional :: name
    integer(c_int64_t), allocatable, intent(out), optional :: shape(:)
    integer(c_int), intent(out), optional :: dtype
    logical, intent(out), optional :: requires_grad
    integer(c_int) :: st, ndim, dt, rg
    type(c_ptr) :: p
    integer(c_int64_t) :: shp(FSDP_MAX_NDIM)
    st = c_fsdp_param_info(unit, int(index, c_int), p, ndim, shp, dt, rg)
    if (st /= FSDP_SUCCESS) return
    if (present(name)) name = from_c(p)
    if (present(shape)) shape = shp(1:ndim)
    if (present(dtype)) dtype = dt
    if (present(requires_grad)) requires_grad = rg /= 0
  end function

  ! The checks behind fsdp_param_data and fsdp_grad_data with a typed pointer: the pointer's
  ! rank is the parameter's and its kind the unsharded dtype (param_dtype), checked before the
  ! library is asked for the buffer. `shp` receives the Fortran shape.
  function full_view(unit, index, rank, dtype, grad, p, shp) result(st)
    type(fsdp_unit_t), intent(in) :: unit
    integer, intent(in) :: index, rank
    integer(c_int), intent(in) :: dtype
    logical, intent(in) :: grad
    type(c_ptr), intent(out) :: p
    integer(c_int64_t), intent(out) :: shp(FSDP_MAX_NDIM)
    integer(c_int) :: st, ndim, dt, rg, storage, param_dtype, reduce_dtype
    type(c_ptr) :: name
    character(len=:), allocatable :: call, what
    call = merge('fsdp_grad_data ', 'fsdp_param_data', grad)
    call = trim(call)
    st = c_fsdp_param_info(unit, int(index, c_int), name, ndim, shp, dt, rg)
    if (st == FSDP_SUCCESS) st = fsdp_unit_precision(unit, storage, param_dtype, reduce_dtype)
    if (st /= FSDP_SUCCESS) then  ! a bad unit or index: the call itself words the error
      st = raw_full(unit, index, grad, p)
      return
    end if
    what = 'parameter '//itoa(int(index, c_int64_t))//' "'//from_c(name)//'"'
    if (ndim /= rank) then
      st = fsdp_record_error(FSDP_ERR_INVALID_ARGUMENT, call, 'a: a rank-'// &
                             itoa(int(rank, c_int64_t))//' pointer, but '//what//' has '// &
                             itoa(int(ndim, c_int64_t))//' dimension(s): C shape '// &
                             shape_text(shp, ndim, .false.)//', Fortran shape '// &
                             shape_text(shp, ndim, .true.))
      return
    end if
    if (param_dtype /= dtype) then
      st = fsdp_record_error(FSDP_ERR_INVALID_ARGUMENT, call, 'a: a pointer to '// &
                             dtype_text(dtype)//', but '//what//' is unsharded as '// &
                             dtype_text(param_dtype))
      return
    end if
    st = raw_full(unit, index, grad, p)
    shp(1:ndim) = shp(ndim:1:-1)
  end function

  function raw_full(unit, index, grad, p) result(st)
    type(fsdp_unit_t), intent(in) :: unit
    integer, intent(in) :: index
    logical, intent(in) :: grad
    type(c_ptr), intent(out) :: p
    integer(c_int) :: st
    if (grad) then
      st = c_fsdp_grad_data(unit, int(index, c_int), p)
    else
      st = c_fsdp_param_data(unit, int(index, c_int), p)
    end if
  end function

  function param_data_ptr(unit, index, data) result(st)
    type(fsdp_unit_t), intent(in) :: unit
    integer, intent(in) :: index
    type(c_ptr), intent(out) :: data
    integer(c_int) :: st
    st = raw_full(unit, index, .false., data)
  end function

  function grad_data_ptr(unit, index, data) result(st)
    type(fsdp_unit_t), intent(in) :: unit
    integer, intent(in) :: index
    type(c_ptr), intent(out) :: data
    integer(c_int) :: st
    st = raw_full(unit, index, .true., data)
  end function

  ! The shard (or gradient shard) as a rank-1 pointer of the unit's storage dtype.
  function shard_view(unit, dtype, grad, p, n) result(st)
    type(fsdp_unit_t), intent(in) :: unit
    integer(c_int), intent(in) :: dtype
    logical, intent(in) :: grad
    type(c_ptr), intent(out) :: p
    integer(c_size_t), intent(out) :: n
    integer(c_int) :: st, nparams, storage
    st = fsdp_unit_info(unit, nparams, storage)
    if (st == FSDP_SUCCESS .and. storage /= dtype) then
      st = fsdp_record_error(FSDP_ERR_INVALID_ARGUMENT, &
                             trim(merge('fsdp_shard_grad', 'fsdp_shard_data', grad)), &
                             'a: a pointer to '//dtype_text(dtype)//', but the unit stores '// &
                             dtype_text(storage))
      return
    end if
    if (grad) then
      st = c_fsdp_shard_grad(unit, p, n)
    else
      st = c_fsdp_shard_data(unit, p, n)
    end if
  end function

  function shard_data_ptr(unit, data, numel) result(st)  ! either output optional, as in C
    type(fsdp_unit_t), intent(in) :: unit
    type(c_ptr), intent(out), optional :: data
    integer(c_size_t), intent(out), optional :: numel
    integer(c_int) :: st
    st = c_fsdp_shard_data(unit, data, numel)
  end function

  function shard_grad_ptr(unit, data, numel) result(st)  ! either output optional, as in C
    type(fsdp_unit_t), intent(in) :: unit
    type(c_ptr), intent(out), optional :: data
    integer(c_size_t), intent(out), optional :: numel
    integer(c_int) :: st
    st = c_fsdp_shard_grad(unit, data, numel)
  end function

  ! ---- Optimizers

  ! An optimizer over `units`; `defaults` absent: the kind's defaults. Collective.
  function fsdp_optimizer_create(ctx, kind, units, opt, defaults) result(st)
    type(fsdp_context_t), intent(in) :: ctx
    integer(c_int), intent(in) :: kind
    type(fsdp_unit_t), intent(in) :: units(:)
    type(fsdp_optimizer_t), intent(out) :: opt
    type(fsdp_hyperparams_t), intent(in), optional :: defaults
    integer(c_int) :: st
    type(fsdp_unit_t), allocatable :: list(:)
    list = units  ! contiguous
    st = c_fsdp_optimizer_create(ctx, kind, defaults, int(size(list), c_int), list, opt)
  end function

  ! State buffer `name` ("exp_avg", "exp_avg_sq", "momentum") of `unit` as a rank-1 pointer of
  ! the unit's storage kind (checked), laid out like its gradient shard. Local.
  function optimizer_state_f32(opt, unit, name, a) result(st)
    type(fsdp_optimizer_t), intent(in) :: opt
    type(fsdp_unit_t), intent(in) :: unit
    character(len=*), intent(in) :: name
    real(c_float), pointer :: a(:)
    integer(c_int) :: st
    type(c_ptr) :: p
    integer(c_size_t) :: n
    st = optimizer_state_view(opt, unit, name, FSDP_FLOAT32, p, n)
    if (st == FSDP_SUCCESS) call c_f_pointer(p, a, [n])
  end function

  function optimizer_state_f64(opt, unit, name, a) result(st)
    type(fsdp_optimizer_t), intent(in) :: opt
    type(fsdp_unit_t), intent(in) :: unit
    character(len=*), intent(in) :: name
    real(c_double), pointer :: a(:)
    integer(c_int) :: st
    type(c_ptr) :: p
    integer(c_size_t) :: n
    st = optimizer_state_view(opt, unit, name, FSDP_FLOAT64, p, n)
    if (st == FSDP_SUCCESS) call c_f_pointer(p, a, [n])
  end function

  function optimizer_state_ptr(opt, unit, name, data, numel) result(st)  ! outputs optional
    type(fsdp_optimizer_t), intent(in) :: opt
    type(fsdp_unit_t), intent(in) :: unit
    character(len=*), intent(in) :: name
    type(c_ptr), intent(out), optional :: data
    integer(c_size_t), intent(out), optional :: numel
    integer(c_int) :: st
    st = c_fsdp_optimizer_state(opt, unit, to_c(name), data, numel)
  end function

  function optimizer_state_view(opt, unit, name, dtype, p, n) result(st)
    type(fsdp_optimizer_t), intent(in) :: opt
    type(fsdp_unit_t), intent(in) :: unit
    character(len=*), intent(in) :: name
    integer(c_int), intent(in) :: dtype
    type(c_ptr), intent(out) :: p
    integer(c_size_t), intent(out) :: n
    integer(c_int) :: st, nparams, storage
    st = fsdp_unit_info(unit, nparams, storage)
    if (st == FSDP_SUCCESS .and. storage /= dtype) then
      st = fsdp_record_error(FSDP_ERR_INVALID_ARGUMENT, 'fsdp_optimizer_state', 'a: a pointer '// &
                             'to '//dtype_text(dtype)//', but the unit stores '// &
                             dtype_text(storage))
      return
    end if
    st = c_fsdp_optimizer_state(opt, unit, to_c(name), p, n)
  end function

  function fsdp_optimizer_add_group(opt, pattern, hp, group, nmatched) result(st)
    type(fsdp_optimizer_t), intent(in) :: opt
    character(len=*), intent(in) :: pattern
    type(fsdp_hyperparams_t), intent(in) :: hp
    integer, intent(out), optional :: group, nmatched
    integer(c_int) :: st, g, n
    st = c_fsdp_optimizer_add_group(opt, to_c(pattern), hp, g, n)
    if (st /= FSDP_SUCCESS) return
    if (present(group)) group = g
    if (present(nmatched)) nmatched = n
  end function

  ! ---- Checkpoints

  ! Builds fsdp_checkpoint_options_t; the arrays it points into are the caller's (target).
  ! A problem with the arguments comes back as text (empty: none). The caller still makes the
  ! collective call, with nmetadata = -1 (refused by the library on this rank and reported to
  ! every rank, so none is left waiting), then records the problem as the error.
  function checkpoint_options(optimizers, grad_scaler, keys, values, flags, keys_c, &
                              values_c, key_ptrs, value_ptrs, options) result(problem)
    type(fsdp_optimizer_t), intent(in), optional, target, contiguous :: optimizers(:)
    type(fsdp_grad_scaler_t), intent(in), optional :: grad_scaler
    character(len=*), intent(in), optional :: keys(:), values(:)
    integer(c_int), intent(in), optional :: flags
    character(kind=c_char, len=:), allocatable, target, intent(inout) :: keys_c(:), values_c(:)
    type(c_ptr), allocatable, target, intent(inout) :: key_ptrs(:), value_ptrs(:)
    type(fsdp_checkpoint_options_t), intent(out) :: options
    character(len=:), allocatable :: problem
    integer :: i, n
    problem = ''
    options%size = c_sizeof(options)
    if (present(optimizers)) then
      options%noptimizers = size(optimizers)
      if (size(optimizers) > 0) options%optimizers = c_loc(optimizers)
    end if
    if (present(grad_scaler)) options%grad_scaler = grad_scaler%ptr
    if (present(flags)) options%load_flags = flags
    if (present(keys) .neqv. present(values)) then
      problem = 'metadata_keys and metadata_values: give both or neither'
      options%nmetadata = -1
      return
    end if
    if (.not. present(keys)) return
    if (size(keys) /= size(values)) then
      problem = 'metadata_values: '//itoa(int(size(values), c_int64_t))//' values for '// &
                itoa(int(size(keys), c_int64_t))//' metadata_keys'
      options%nmetadata = -1
      return
    end if
    n = size(keys)
    allocate (character(kind=c_char, len=len(keys) + 1) :: keys_c(n))
    allocate (character(kind=c_char, len=len(values) + 1) :: values_c(n))
    allocate (key_ptrs(n), value_ptrs(n))
    do i = 1, n
      keys_c(i) = trim(keys(i))//c_null_char
      values_c(i) = trim(values(i))//c_null_char
      key_ptrs(i) = c_loc(keys_c(i))
      value_ptrs(i) = c_loc(values_c(i))
    end do
    options%nmetadata = n
    if (n > 0) then
      options%metadata_keys = c_loc(key_ptrs)
      options%metadata_values = c_loc(value_ptrs)
    end if
  end function

  ! Saves the model, the optimizers' state and the scaler to `path`; metadata as key/value
  ! strings (trailing blanks are dropped). Collective over the world group.
  function fsdp_checkpoint_save(ctx, path, optimizers, grad_scaler, metadata_keys, &
                                metadata_values) result(st)
    type(fsdp_context_t), intent(in) :: ctx
    character(len=*), intent(in) :: path
    type(fsdp_optimizer_t), intent(in), optional, target, contiguous :: optimizers(:)
    type(fsdp_grad_scaler_t), intent(in), optional :: grad_scaler
    character(len=*), intent(in), optional :: metadata_keys(:), metadata_values(:)
    integer(c_int) :: st
    st = save(ctx, path, optimizers, grad_scaler, metadata_keys, metadata_values)
  end function

  ! fsdp_checkpoint_save in the background; complete it with fsdp_wait(req) or poll fsdp_test.
  function fsdp_checkpoint_save_async(ctx, path, req, optimizers, grad_scaler, metadata_keys, &
                                      metadata_values) result(st)
    type(fsdp_context_t), intent(in) :: ctx
    character(len=*), intent(in) :: path
    type(fsdp_request_t), intent(out) :: req
    type(fsdp_optimizer_t), intent(in), optional, target, contiguous :: optimizers(:)
    type(fsdp_grad_scaler_t), intent(in), optional :: grad_scaler
    character(len=*), intent(in), optional :: metadata_keys(:), metadata_values(:)
    integer(c_int) :: st
    st = save(ctx, path, optimizers, grad_scaler, metadata_keys, metadata_values, req)
  end function

  function save(ctx, path, optimizers, grad_scaler, keys, values, req) result(st)
    type(fsdp_context_t), intent(in) :: ctx
    character(len=*), intent(in) :: path
    type(fsdp_optimizer_t), intent(in), optional, target, contiguous :: optimizers(:)
    type(fsdp_grad_scaler_t), intent(in), optional :: grad_scaler
    character(len=*), intent(in), optional :: keys(:), values(:)
    type(fsdp_request_t), intent(out), optional :: req  ! present: in the background
    integer(c_int) :: st
    character(kind=c_char, len=:), allocatable, target :: keys_c(:), values_c(:)
    type(c_ptr), allocatable, target :: key_ptrs(:), value_ptrs(:)
    type(fsdp_checkpoint_options_t) :: options
    character(len=:), allocatable :: problem
    problem = checkpoint_options(optimizers, grad_scaler, keys, values, keys_c=keys_c, &
                                 values_c=values_c, key_ptrs=key_ptrs, value_ptrs=value_ptrs, &
                                 options=options)
    if (present(req)) then
      st = c_fsdp_checkpoint_save_async(ctx, to_c(path), options, req)
    else
      st = c_fsdp_checkpoint_save(ctx, to_c(path), options)
    end if
    if (len(problem) > 0) st = fsdp_record_error(FSDP_ERR_INVALID_ARGUMENT, &
                                                 trim(merge('fsdp_checkpoint_save_async', &
                                                            'fsdp_checkpoint_save      ', &
                                                            present(req))), problem)
  end function

  ! Loads `path` (any rank count, strategy or grouping wrote it); flags: FSDP_LOAD_*, summed.
  ! Collective over the world group.
  function fsdp_checkpoint_load(ctx, path, optimizers, grad_scaler, flags, report) result(st)
    type(fsdp_context_t), intent(in) :: ctx
    character(len=*), intent(in) :: path
    type(fsdp_optimizer_t), intent(in), optional, target, contiguous :: optimizers(:)
    type(fsdp_grad_scaler_t), intent(in), optional :: grad_scaler
    integer(c_int), intent(in), optional :: flags
    type(fsdp_load_report_t), intent(out), optional :: report
    integer(c_int) :: st
    character(kind=c_char, len=:), allocatable, target :: keys_c(:), values_c(:)
    type(c_ptr), allocatable, target :: key_ptrs(:), value_ptrs(:)
    type(fsdp_checkpoint_options_t) :: options
    type(fsdp_checkpoint_report_t) :: r
    character(len=:), allocatable :: problem
    problem = checkpoint_options(optimizers, grad_scaler, flags=flags, keys_c=keys_c, &
                                 values_c=values_c, key_ptrs=key_ptrs, value_ptrs=value_ptrs, &
                                 options=options)
    r%size = c_sizeof(r)
    st = c_fsdp_checkpoint_load(ctx, to_c(path), options, r)
    if (present(report)) then
      report%loaded = r%loaded
      report%missing = r%missing
      report%unexpected = r%unexpected
      report%mismatched = r%mismatched
      report%details = from_c(r%details)
    end if
  end function

  ! Metadata `key` of the checkpoint at `path`, without a context. Local.
  function fsdp_checkpoint_metadata(path, key, value) result(st)
    character(len=*), intent(in) :: path, key
    character(len=:), allocatable, intent(out) :: value
    integer(c_int) :: st
    integer(c_size_t) :: length
    character(kind=c_char), allocatable, target :: buf(:)
    integer :: i
    st = c_fsdp_checkpoint_metadata(to_c(path), to_c(key), c_null_ptr, 0_c_size_t, length)
    if (st /= FSDP_SUCCESS) return
    allocate (buf(length + 1))
    st = c_fsdp_checkpoint_metadata(to_c(path), to_c(key), c_loc(buf), length + 1, length)
    if (st /= FSDP_SUCCESS) return
    allocate (character(len=length) :: value)
    do i = 1, int(length)
      value(i:i) = buf(i)
    end do
  end function

  ! What the checkpoint at `path` holds, as fsdp_checkpoint_describe's JSON text, without a
  ! context. Local.
  function fsdp_checkpoint_describe(path, json) result(st)
    character(len=*), intent(in) :: path
    character(len=:), allocatable, intent(out) :: json
    integer(c_int) :: st
    integer(c_size_t) :: length
    character(kind=c_char), allocatable, target :: buf(:)
    integer :: i
    st = c_fsdp_checkpoint_describe(to_c(path), c_null_ptr, 0_c_size_t, length)
    if (st /= FSDP_SUCCESS) return
    allocate (buf(length + 1))
    st = c_fsdp_checkpoint_describe(to_c(path), c_loc(buf), length + 1, length)
    if (st /= FSDP_SUCCESS) return
    allocate (character(len=length) :: json)
    do i = 1, int(length)
      json(i:i) = buf(i)
    end do
  end function

  ! fsdp_safetensors_options_t from the optional arguments (absent: the C defaults).
  function safetensors_options(dtype, max_shard_bytes) result(o)
    integer(c_int), intent(in), optional :: dtype
    integer(c_int64_t), intent(in), optional :: max_shard_bytes
    type(fsdp_safetensors_options_t) :: o
    o = fsdp_safetensors_options_init()
    if (present(dtype)) o%dtype = dtype
    if (present(max_shard_bytes)) o%max_shard_bytes = max_shard_bytes
  end function

  ! The parameters of checkpoint `checkpoint` as safetensors at `out` (a file; a directory of
  ! shards of at most max_shard_bytes when that is given and > 0), in `dtype` (absent: each
  ! parameter's own). Collective over `comm`; no context needed.
  function safetensors_export_integer_comm(comm, checkpoint, out, dtype, max_shard_bytes) &
      result(st)
    integer, intent(in) :: comm
    character(len=*), intent(in) :: checkpoint, out
    integer(c_int), intent(in), optional :: dtype
    integer(c_int64_t), intent(in), optional :: max_shard_bytes
    integer(c_int) :: st
    st = c_fsdp_safetensors_export_fcomm(int(comm, c_int), to_c(checkpoint), to_c(out), &
                                         safetensors_options(dtype, max_shard_bytes))
    st = as_call(st, 'fsdp_safetensors_export_fcomm', 'fsdp_safetensors_export')
  end function

  ! Safetensors weights at `in` (a file, an index, or a directory holding either) as a new
  ! checkpoint at `checkpoint`, stored in `dtype` (absent: float64 stays, the rest float32).
  ! Collective over `comm`; no context needed.
  function safetensors_import_integer_comm(comm, in, checkpoint, dtype) result(st)
    integer, intent(in) :: comm
    character(len=*), intent(in) :: in, checkpoint
    integer(c_int), intent(in), optional :: dtype
    integer(c_int) :: st
    st = c_fsdp_safetensors_import_fcomm(int(comm, c_int), to_c(in), to_c(checkpoint), &
                                         safetensors_options(dtype))
    st = as_call(st, 'fsdp_safetensors_import_fcomm', 'fsdp_safetensors_import')
  end function

  ! fsdp_checkpoint_check_options_t from the optional arguments (absent: the initializer's).
  function check_options(model_only, report, user) result(o)
    logical, intent(in), optional :: model_only
    type(c_funptr), intent(in), optional :: report
    type(c_ptr), intent(in), optional :: user
    type(fsdp_checkpoint_check_options_t) :: o
    o = fsdp_checkpoint_check_options_init()
    if (present(model_only)) o%model_only = merge(1_c_int, 0_c_int, model_only)
    if (present(report)) o%report = report
    if (present(user)) o%user = user
  end function

  ! Recomputes every dataset's CRC-32C of checkpoint `path`: failed = .true. when a checksum or
  ! the index is wrong. `report` (a bind(C) subroutine of interface fsdp_report_line_fn, passed
  ! with c_funloc) receives the report's lines on rank 0. Collective over `comm`.
  function checkpoint_verify_integer_comm(comm, path, failed, report, user) result(st)
    integer, intent(in) :: comm
    character(len=*), intent(in) :: path
    logical, intent(out) :: failed
    type(c_funptr), intent(in), optional :: report
    type(c_ptr), intent(in), optional :: user
    integer(c_int) :: st, f
    type(fsdp_checkpoint_check_options_t), target :: o
    o = check_options(report=report, user=user)
    f = 0
    st = c_fsdp_checkpoint_verify_fcomm(int(comm, c_int), to_c(path), o, f)
    st = as_call(st, 'fsdp_checkpoint_verify_fcomm', 'fsdp_checkpoint_verify')
    failed = f /= 0
  end function

  ! Compares checkpoints `a` and `b` (values, and unless model_only, optimizers, hyperparameters,
  ! scaler and metadata): differ = .true. when anything compared differs. Collective over `comm`.
  function checkpoint_diff_integer_comm(comm, a, b, differ, model_only, report, user) result(st)
    integer, intent(in) :: comm
    character(len=*), intent(in) :: a, b
    logical, intent(out) :: differ
    logical, intent(in), optional :: model_only
    type(c_funptr), intent(in), optional :: report
    type(c_ptr), intent(in), optional :: user
    integer(c_int) :: st, d
    type(fsdp_checkpoint_check_options_t), target :: o
    o = check_options(model_only, report, user)
    d = 0
    st = c_fsdp_checkpoint_diff_fcomm(int(comm, c_int), to_c(a), to_c(b), o, d)
    st = as_call(st, 'fsdp_checkpoint_diff_fcomm', 'fsdp_checkpoint_diff')
    differ = d /= 0
  end function

#ifdef FSDP_HAVE_MPI_F08
  function checkpoint_verify_mpi_f08_comm(comm, path, failed, report, user) result(st)
    type(MPI_Comm), intent(in) :: comm
    character(len=*), intent(in) :: path
    logical, intent(out) :: failed
    type(c_funptr), intent(in), optional :: report
    type(c_ptr), intent(in), optional :: user
    integer(c_int) :: st
    st = checkpoint_verify_integer_comm(comm%MPI_VAL, path, failed, report, user)
  end function

  function checkpoint_diff_mpi_f08_comm(comm, a, b, differ, model_only, report, user) result(st)
    type(MPI_Comm), intent(in) :: comm
    character(len=*), intent(in) :: a, b
    logical, intent(out) :: differ
    logical, intent(in), optional :: model_only
    type(c_funptr), intent(in), optional :: report
    type(c_ptr), intent(in), optional :: user
    integer(c_int) :: st
    st = checkpoint_diff_integer_comm(comm%MPI_VAL, a, b, differ, model_only, report, user)
  end function

  function safetensors_export_mpi_f08_comm(comm, checkpoint, out, dtype, max_shard_bytes) &
      result(st)
    type(MPI_Comm), intent(in) :: comm
    character(len=*), intent(in) :: checkpoint, out
    integer(c_int), intent(in), optional :: dtype
    integer(c_int64_t), intent(in), optional :: max_shard_bytes
    integer(c_int) :: st
    st = safetensors_export_integer_comm(comm%MPI_VAL, checkpoint, out, dtype, max_shard_bytes)
  end function

  function safetensors_import_mpi_f08_comm(comm, in, checkpoint, dtype) result(st)
    type(MPI_Comm), intent(in) :: comm
    character(len=*), intent(in) :: in, checkpoint
    integer(c_int), intent(in), optional :: dtype
    integer(c_int) :: st
    st = safetensors_import_integer_comm(comm%MPI_VAL, in, checkpoint, dtype)
  end function
#endif

#include "fsdp_typed.inc"

end module fsdp
