! The 0.8/0.9 calls from Fortran against references computed here: a unit created by an init
! callback (bind(C), values a formula of the element's C-order index), gradients marked None
! (fsdp_grad_set_none / fsdp_grad_none), one AdamW step by the formula of torch.optim.AdamW with
! the None parameter skipped, the optimizer's state buffers (exp_avg, exp_avg_sq) and update
! counts (fsdp_optimizer_steps / _param_steps and their setters), a checkpoint described
! (fsdp_checkpoint_describe's JSON), and safetensors export (file sizes and header from the
! safetensors layout: 8-byte length, JSON, data) and import, loaded into a new context and
! compared bit for bit with the saved values. Also refused input named by the Fortran call.
! Usage: test_fortran_interchange <scratch dir>
module interchange_init
  use, intrinsic :: iso_c_binding
  use fsdp
  implicit none
contains
  ! Parameter i's element k (C order, from 0) is 100 i + k + 0.5; counts its calls in user_data.
  ! Checks the descriptor it is given: names and Fortran shapes as created.
  function init_values(user_data, index, desc, data) result(rc) bind(C)
    type(c_ptr), value :: user_data
    integer(c_int), value :: index
    type(fsdp_param_desc_t), intent(in) :: desc
    type(c_ptr), value :: data
    integer(c_int) :: rc
    integer(c_int), pointer :: calls
    real(c_double), pointer :: a(:)
    integer(c_int64_t), allocatable :: shp(:)
    integer :: k
    call c_f_pointer(user_data, calls)
    calls = calls + 1
    shp = fsdp_param_desc_shape(desc)
    rc = 1
    if (index == 0 .and. (fsdp_param_desc_name(desc) /= 'w' .or. any(shp /= [3, 2]))) return
    if (index == 1 .and. (fsdp_param_desc_name(desc) /= 'b' .or. any(shp /= [4]))) return
    call c_f_pointer(data, a, [product(shp)])
    do k = 1, size(a)
      a(k) = 100 * index + (k - 1) + 0.5d0
    end do
    rc = 0
  end function
end module

program test_fortran_interchange
  use, intrinsic :: iso_c_binding
  use mpi, only: MPI_COMM_WORLD, MPI_Init, MPI_Finalize, MPI_Comm_rank, MPI_Comm_size, MPI_Barrier
  use fsdp
  use interchange_init
#ifdef FSDP_HAVE_MPI_F08
  use mpi_f08, only: MPI_COMM_WORLD_F08 => MPI_COMM_WORLD
#endif
  implicit none
  integer :: ierr, rank, nranks, failed = 0, passed = 0
  character(len=512) :: arg
  character(len=:), allocatable :: dir
  real(c_double), parameter :: lr = 1d-3, wd = 1d-2, beta1 = 0.9d0, beta2 = 0.999d0, eps = 1d-8

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  call get_command_argument(1, arg)
  if (len_trim(arg) == 0) arg = '.'
  dir = trim(arg)//'/interchange_np'//itoa(nranks)
  call interchange()
  if (rank == 0) print '(a,i0,a,i0,a,i0,a)', 'test_fortran_interchange on ', nranks, &
    ' rank(s): ', passed, ' checks ok, ', failed, ' checks failed'
  deallocate(dir)
  call MPI_Finalize(ierr)
  if (failed > 0) error stop 1

contains

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (ok) then
      passed = passed + 1
    else
      failed = failed + 1
      print '(a,i0,2a)', '[rank ', rank, '] FAILED: ', what
    end if
  end subroutine

  subroutine must(status, what)
    integer(c_int), intent(in) :: status
    character(len=*), intent(in) :: what
    if (status /= FSDP_SUCCESS) then
      call check(.false., what//': '//fsdp_last_error())
      print '(a,i0,a)', '[rank ', rank, '] stopping: the rest depends on it'
      error stop 1
    end if
    passed = passed + 1
  end subroutine

  function itoa(i) result(s)
    integer, intent(in) :: i
    character(len=:), allocatable :: s
    character(len=16) :: buf
    write (buf, '(i0)') i
    s = trim(buf)
  end function

  ! The JSON text without blanks, so that a fragment is found whatever the spacing.
  function compact(s) result(t)
    character(len=*), intent(in) :: s
    character(len=:), allocatable :: t
    integer :: i
    t = ''
    do i = 1, len(s)
      if (s(i:i) /= ' ' .and. s(i:i) /= achar(10)) t = t//s(i:i)
    end do
  end function

  ! A safetensors file as the format defines it: an 8-byte little-endian header length N, N
  ! bytes of JSON, then the data: its header and the number of data bytes.
  subroutine read_safetensors(path, header, data_bytes)
    character(len=*), intent(in) :: path
    character(len=:), allocatable, intent(out) :: header
    integer(c_int64_t), intent(out) :: data_bytes
    integer(c_int8_t) :: length_bytes(8)
    integer(c_int64_t) :: n, file_bytes
    integer :: u, i
    open (newunit=u, file=path, access='stream', form='unformatted', status='old', action='read')
    read (u) length_bytes
    n = 0
    do i = 8, 1, -1
      n = n * 256 + iand(int(length_bytes(i), c_int64_t), 255_c_int64_t)
    end do
    allocate (character(len=n) :: header)
    read (u) header
    inquire (unit=u, size=file_bytes)
    close (u)
    data_bytes = file_bytes - 8 - n
  end subroutine

  subroutine interchange()
    type(fsdp_context_t) :: ctx, ctx2
    type(fsdp_unit_t) :: unit, unit2
    type(fsdp_optimizer_t) :: opt
    type(fsdp_optimizer_t) :: opts(1)
    integer(c_int), target :: calls
    real(c_double), pointer :: pw(:, :), pb(:), gw(:, :), gb(:), m(:), v(:)
    real(c_float), pointer :: wrong(:)
    real(c_double), target :: w1(3, 2), b1(4), w2(3, 2), b2(4), wref(3, 2)
    integer(c_int) :: none(2), st
    integer(c_int64_t) :: steps, data_bytes
    integer(c_size_t) :: so, po, length
    character(len=:), allocatable :: json, header, ckpt, st64, st32
    integer :: i, j

    ! ---- Deferred initialization through a bind(C) callback.
    forall (i=1:3, j=1:2) wref(i, j) = (j - 1) * 3 + (i - 1) + 0.5d0
    call must(fsdp_init(MPI_COMM_WORLD, ctx), 'fsdp_init')
    calls = 0
    call must(fsdp_unit_create(ctx, [fsdp_param('w', [2_c_int64_t, 3_c_int64_t], FSDP_FLOAT64), &
                                     fsdp_param('b', [4_c_int64_t], FSDP_FLOAT64)], unit, &
                               init=init_values, init_data=c_loc(calls)), &
              'fsdp_unit_create with init')
    call check(calls == 2, 'init called once per parameter, got '//itoa(calls))
    call must(fsdp_unshard(unit), 'fsdp_unshard')
    call must(fsdp_param_data(unit, 0, pw), 'fsdp_param_data w')
    call must(fsdp_param_data(unit, 1, pb), 'fsdp_param_data b')
    call check(all(pw == wref), 'w: the callback''s values in C order')
    call check(all(pb == [(100 + i + 0.5d0, i=0, 3)]), 'b: the callback''s values')
    call must(fsdp_reshard(unit), 'fsdp_reshard')

    ! ---- Gradients None from creation, given by a reduction, one marked None again.
    call must(fsdp_grad_none(unit, none, 2), 'fsdp_grad_none')
    call check(all(none == [1, 1]), 'every gradient None after creation')
    call must(fsdp_grad_data(unit, 0, gw), 'fsdp_grad_data w')
    call must(fsdp_grad_data(unit, 1, gb), 'fsdp_grad_data b')
    gw = 1
    gb = 2
    call must(fsdp_reduce_grads(unit), 'fsdp_reduce_grads')
    call must(fsdp_grad_none(unit, none, 2), 'fsdp_grad_none after reduce')
    call check(all(none == [0, 0]), 'gradients after the reduction')
    call must(fsdp_grad_set_none(unit, 1, 1), 'fsdp_grad_set_none(b)')
    call must(fsdp_grad_none(unit, none, 2), 'fsdp_grad_none after set_none')
    call check(all(none == [0, 1]), 'b alone None')

    ! ---- One AdamW step; b skipped as torch.optim skips a parameter whose grad is None.
    call must(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, [unit], opt), 'optimizer_create')
    call must(fsdp_optimizer_step(opt), 'fsdp_optimizer_step')
    call must(fsdp_gather_params(unit, [c_loc(w1), c_loc(b1)]), 'fsdp_gather_params')
    ! torch.optim.AdamW, step 1, gradient 1: decay, then m_hat / (sqrt(v_hat) + eps) with
    ! m_hat = 1, v_hat = 1.
    call check(all(abs(w1 - (wref * (1 - lr * wd) - lr / (1 + eps))) < 1d-12), &
               'w after one AdamW step')
    call check(all(b1 == [(100 + i + 0.5d0, i=0, 3)]), 'b (gradient None) unchanged')
    call must(fsdp_optimizer_steps(opt, unit, steps), 'fsdp_optimizer_steps')
    call check(steps == 1, 'the unit''s update count')
    call must(fsdp_optimizer_param_steps(opt, unit, 0, steps), 'param_steps w')
    call check(steps == 1, 'w updated once')
    call must(fsdp_optimizer_param_steps(opt, unit, 1, steps), 'param_steps b')
    call check(steps == 0, 'b never updated')

    ! ---- State buffers, laid out like the gradient shard: w's part m = (1 - beta1) g.
    call must(fsdp_optimizer_state(opt, unit, 'exp_avg', m), 'fsdp_optimizer_state exp_avg')
    call must(fsdp_optimizer_state(opt, unit, 'exp_avg_sq', v), 'optimizer_state exp_avg_sq')
    call must(fsdp_param_shard_range(unit, 0, so, po, length), 'shard range w')
    call check(all(abs(m(so + 1:so + length) - (1 - beta1)) < 1d-15), 'exp_avg of w')
    call check(all(abs(v(so + 1:so + length) - (1 - beta2)) < 1d-15), 'exp_avg_sq of w')
    call must(fsdp_param_shard_range(unit, 1, so, po, length), 'shard range b')
    call check(all(m(so + 1:so + length) == 0), 'exp_avg of b (never updated) zero')
    st = fsdp_optimizer_state(opt, unit, 'exp_avg', wrong)
    call check(st == FSDP_ERR_INVALID_ARGUMENT .and. &
               index(fsdp_last_error(), 'fsdp_optimizer_state') == 1, &
               'a float32 pointer to a float64 unit''s state refused: '//fsdp_last_error())
    st = fsdp_optimizer_state(opt, unit, 'momentum', m)
    call check(st == FSDP_ERR_INVALID_ARGUMENT .and. index(fsdp_last_error(), 'momentum') > 0, &
               'AdamW has no momentum buffer: '//fsdp_last_error())
    call must(fsdp_optimizer_set_steps(opt, unit, 5_c_int64_t), 'fsdp_optimizer_set_steps')
    call must(fsdp_optimizer_steps(opt, unit, steps), 'steps after set')
    call check(steps == 5, 'set_steps 5')
    call must(fsdp_optimizer_set_param_steps(opt, unit, 1, 3_c_int64_t), 'set_param_steps b')
    call must(fsdp_optimizer_param_steps(opt, unit, 1, steps), 'param_steps b after set')
    call check(steps == 3, 'set_param_steps 3')

    ! ---- A checkpoint, described without a context.
    ckpt = dir//'.h5'
    opts(1) = opt
    call must(fsdp_checkpoint_save(ctx, ckpt, opts, metadata_keys=['origin'], &
                                   metadata_values=['fortran']), 'fsdp_checkpoint_save')
    call must(fsdp_checkpoint_describe(ckpt, json), 'fsdp_checkpoint_describe')
    json = compact(json)
    call check(index(json, '"world_size":'//itoa(nranks)) > 0, 'describe: world_size')
    call check(index(json, '{"name":"b","dtype":"float64","shape":[4]}') > 0, 'describe: b')
    call check(index(json, '{"name":"w","dtype":"float64","shape":[2,3]}') > 0, 'describe: w')
    call check(index(json, '"origin":"fortran"') > 0, 'describe: metadata')
    st = fsdp_checkpoint_describe(dir//'.no-such.h5', json)
    call check(st == FSDP_ERR_IO, 'describe of a missing file: FSDP_ERR_IO')

    ! ---- Safetensors: float64 and float32 exports of the same 10 values, read as files.
    st64 = dir//'.safetensors'
    st32 = dir//'_f32.safetensors'
    call must(fsdp_safetensors_export(MPI_COMM_WORLD, ckpt, st64), 'fsdp_safetensors_export')
    call must(fsdp_safetensors_export(MPI_COMM_WORLD, ckpt, st32, dtype=FSDP_FLOAT32), &
              'fsdp_safetensors_export float32')
    call MPI_Barrier(MPI_COMM_WORLD, ierr)
    call read_safetensors(st64, header, data_bytes)
    header = compact(header)
    call check(data_bytes == 10 * 8, 'float64 export: 80 data bytes, got '//itoa(int(data_bytes)))
    call check(index(header, '"w":{"dtype":"F64","shape":[2,3]') > 0, 'float64 header: w')
    call check(index(header, '"b":{"dtype":"F64","shape":[4]') > 0, 'float64 header: b')
    call read_safetensors(st32, header, data_bytes)
    call check(data_bytes == 10 * 4, 'float32 export: 40 data bytes, got '//itoa(int(data_bytes)))
    call check(index(compact(header), '"dtype":"F32"') > 0, 'float32 header')
#ifdef FSDP_HAVE_MPI_F08
    call must(fsdp_safetensors_export(MPI_COMM_WORLD_F08, ckpt, st64), 'export, mpi_f08 comm')
#endif

    ! ---- Imported into a new checkpoint, loaded into a new context: the saved values exactly.
    call must(fsdp_safetensors_import(MPI_COMM_WORLD, st64, dir//'_imported.h5'), &
              'fsdp_safetensors_import')
    call must(fsdp_init(MPI_COMM_WORLD, ctx2), 'fsdp_init 2')
    call must(fsdp_unit_create(ctx2, [fsdp_param('w', [2_c_int64_t, 3_c_int64_t], FSDP_FLOAT64), &
                                      fsdp_param('b', [4_c_int64_t], FSDP_FLOAT64)], unit2), &
              'fsdp_unit_create 2')
    call must(fsdp_checkpoint_load(ctx2, dir//'_imported.h5', flags=FSDP_LOAD_MODEL_ONLY), &
              'fsdp_checkpoint_load of the import')
    call must(fsdp_gather_params(unit2, [c_loc(w2), c_loc(b2)]), 'fsdp_gather_params 2')
    call check(all(w2 == w1) .and. all(b2 == b1), 'exported and imported values bit for bit')

    ! ---- Refused input, named by the Fortran call.
    st = fsdp_safetensors_export(MPI_COMM_WORLD, '', st64)
    call check(st == FSDP_ERR_INVALID_ARGUMENT .and. &
               index(fsdp_last_error(), 'fsdp_safetensors_export: ') == 1 .and. &
               index(fsdp_last_error(), 'checkpoint') > 0, &
               'an empty checkpoint path refused: '//fsdp_last_error())
    st = fsdp_safetensors_import(MPI_COMM_WORLD, st64, dir//'_x.h5', dtype=FSDP_BFLOAT16)
    call check(st == FSDP_ERR_INVALID_ARGUMENT .and. &
               index(fsdp_last_error(), 'fsdp_safetensors_import: ') == 1, &
               'import into bfloat16 refused: '//fsdp_last_error())

    call must(fsdp_optimizer_destroy(opt), 'fsdp_optimizer_destroy')
    call must(fsdp_finalize(ctx2), 'fsdp_finalize 2')
    call must(fsdp_finalize(ctx), 'fsdp_finalize')
  end subroutine
end program
