! The Fortran module against references computed here, independently of the library: a unit's
! unsharded values and their layout (row-major C shape, reversed Fortran shape), reduced
! gradients (the mean of every rank's known gradient), an SGD step (p - lr * g), a checkpoint
! round trip with metadata, contexts from `mpi` and `mpi_f08` communicators, and bad input
! (wrong rank, wrong kind, non-contiguous values, mismatched metadata) refused with a message
! naming the argument and nothing changed. Mirrors test_unit_values, test_optimizers and
! test_checkpoint_reshard of the C suite.
! Usage: test_fortran <scratch dir>
program test_fortran
  use, intrinsic :: iso_c_binding
  use mpi, only: MPI_COMM_WORLD, MPI_Init, MPI_Finalize, MPI_Comm_rank, MPI_Comm_size
  use fsdp
#ifdef FSDP_HAVE_MPI_F08
  use mpi_f08, only: MPI_Comm, MPI_COMM_WORLD_F08 => MPI_COMM_WORLD
#endif
  implicit none
  integer :: ierr, rank, nranks, failed = 0, passed = 0
  character(len=512) :: dir

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  call get_command_argument(1, dir)
  if (len_trim(dir) == 0) dir = '.'

  call struct_sizes()
  call values_gradients_and_sgd()
  call checkpoint_round_trip()
  call bad_input()
#ifdef FSDP_HAVE_MPI_F08
  call mpi_f08_context()
#endif

  if (rank == 0) print '(a,i0,a,i0,a,i0,a)', 'test_fortran on ', nranks, ' rank(s): ', passed, &
    ' checks ok, ', failed, ' checks failed'
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

  ! A call the rest of the test builds on: its failure ends the test (pointers would dangle).
  subroutine must(status, what)
    integer(c_int), intent(in) :: status
    character(len=*), intent(in) :: what
    call ok(status, what)
    if (status /= FSDP_SUCCESS) then
      print '(a,i0,a)', '[rank ', rank, '] stopping: the rest depends on it'
      error stop 1
    end if
  end subroutine

  subroutine ok(status, what)
    integer(c_int), intent(in) :: status
    character(len=*), intent(in) :: what
    if (status /= FSDP_SUCCESS) then
      call check(.false., what//': '//fsdp_last_error())
    else
      passed = passed + 1
    end if
  end subroutine

  ! The `size` each struct type starts with is its c_sizeof: the library reads that many bytes.
  subroutine struct_sizes()
    type(fsdp_config_t) :: cfg
    type(fsdp_memory_stats_t) :: stats
    type(fsdp_hyperparams_t) :: hp
    type(fsdp_checkpoint_report_t) :: report
    call check(cfg%size == c_sizeof(cfg), 'fsdp_config_t size')
    call check(stats%size == c_sizeof(stats), 'fsdp_memory_stats_t size')
    call check(hp%size == c_sizeof(hp), 'fsdp_hyperparams_t size')
    call check(report%size == c_sizeof(report), 'fsdp_checkpoint_report_t size')
  end subroutine

  ! Parameters: w of Fortran shape (3, 4) (C shape [4, 3]), b(5), a float64 scalar s in a second
  ! unit. Values known to every rank.
  subroutine model(w, b, s)
    real(c_float), intent(out) :: w(3, 4), b(5)
    real(c_double), intent(out) :: s
    integer :: i, j
    do j = 1, 4
      do i = 1, 3
        w(i, j) = real(i, c_float) + 10 * real(j, c_float)
      end do
    end do
    do i = 1, 5
      b(i) = -0.5_c_float * i
    end do
    s = 3.25_c_double
  end subroutine

  ! The gradient rank r writes: (r + 1) times a fixed pattern; the mean over ranks is
  ! (nranks + 1) / 2 times the pattern.
  pure real(c_float) function grad_pattern(k)
    integer, intent(in) :: k  ! flat C-order element index, from 0
    grad_pattern = 0.25_c_float * real(mod(k * 7, 5) - 2, c_float)
  end function

  subroutine values_gradients_and_sgd()
    type(fsdp_context_t) :: ctx
    type(fsdp_unit_t) :: unit, scalar_unit
    type(fsdp_optimizer_t) :: opt
    type(fsdp_config_t) :: cfg
    type(fsdp_hyperparams_t) :: hp
    real(c_float), target :: w(3, 4), b(5)
    real(c_double), target :: s
    real(c_float), pointer :: pw(:, :), pb(:), gw(:, :), gb(:), flat(:), shard(:), gshard(:)
    real(c_double), pointer :: ps
    type(c_ptr) :: raw
    integer(c_int64_t), allocatable :: cshape(:)
    character(len=:), allocatable :: name
    integer(c_size_t) :: n, shard_offset, param_offset, length
    real(c_float) :: expect_w(3, 4), expect_b(5), mean
    integer :: i, j, k
    logical :: same

    call model(w, b, s)
    call must(fsdp_init(MPI_COMM_WORLD, ctx, cfg), 'fsdp_init (mpi integer communicator)')
    call must(fsdp_unit_create(ctx, [fsdp_param('fc.weight', w), fsdp_param('fc.bias', b)], unit, &
                             name='fc'), 'fsdp_unit_create')
    call must(fsdp_unit_create(ctx, [fsdp_param('scale', s)], scalar_unit), 'scalar unit')

    ! Shapes: C order from fsdp_param_info, reversed Fortran shape from fsdp_param_data.
    call must(fsdp_param_info(unit, 0, name=name, shape=cshape), 'fsdp_param_info')
    call check(name == 'fc.weight', 'name of parameter 0')
    call check(size(cshape) == 2, 'C rank of fc.weight')
    if (size(cshape) == 2) call check(all(cshape == [4, 3]), 'C shape of fc.weight is [4, 3]')

    call must(fsdp_unshard(unit), 'fsdp_unshard')
    call must(fsdp_param_data(unit, 0, pw), 'fsdp_param_data rank 2')
    call must(fsdp_param_data(unit, 1, pb), 'fsdp_param_data rank 1')
    call check(all(shape(pw) == [3, 4]), 'Fortran shape of fc.weight is (3, 4)')
    call check(all(pw == w) .and. all(pb == b), 'unsharded values equal the initial ones')
    ! Row-major: C element [r][c] (flat r * 3 + c) is Fortran w(c + 1, r + 1).
    call must(fsdp_param_data(unit, 0, raw), 'fsdp_param_data c_ptr')
    call c_f_pointer(raw, flat, [12])
    same = .true.
    do k = 0, 11
      same = same .and. flat(k + 1) == w(mod(k, 3) + 1, k / 3 + 1)
    end do
    call check(same, 'C element [r][c] is Fortran (c+1, r+1)')

    call must(fsdp_unshard(scalar_unit), 'unshard scalar unit')
    call must(fsdp_param_data(scalar_unit, 0, ps), 'fsdp_param_data rank 0 float64')
    call check(ps == s, 'scalar float64 value')

    ! Gradients: every rank writes its own; the shard receives the mean.
    call must(fsdp_grad_data(unit, 0, gw), 'fsdp_grad_data rank 2')
    call must(fsdp_grad_data(unit, 1, gb), 'fsdp_grad_data rank 1')
    do j = 1, 4
      do i = 1, 3
        gw(i, j) = real(rank + 1, c_float) * grad_pattern((j - 1) * 3 + (i - 1))
      end do
    end do
    do i = 1, 5
      gb(i) = real(rank + 1, c_float) * grad_pattern(100 + i - 1)
    end do
    call ok(fsdp_reduce_grads(unit), 'fsdp_reduce_grads')
    call ok(fsdp_reshard(unit), 'fsdp_reshard')
    call ok(fsdp_reshard(scalar_unit), 'fsdp_reshard scalar')
    mean = real(nranks + 1, c_float) / 2
    call must(fsdp_shard_grad(unit, gshard), 'fsdp_shard_grad')
    call must(fsdp_shard_data(unit, shard), 'fsdp_shard_data')
    same = .true.
    do i = 0, 1  ! each parameter's part in this rank's shard
      call ok(fsdp_param_shard_range(unit, i, shard_offset, param_offset, length), &
              'fsdp_param_shard_range')
      do n = 0, length - 1
        k = int(param_offset + n) + merge(0, 100, i == 0)
        same = same .and. abs(gshard(shard_offset + n + 1) - mean * grad_pattern(k)) <= &
               1e-6 * max(1.0, abs(mean * grad_pattern(k)))
      end do
    end do
    call check(same, 'gradient shard is the mean of every rank''s gradient')

    ! SGD: p <- p - lr * g, element by element.
    hp = fsdp_sgd_defaults()
    hp%lr = 0.125d0
    call must(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, [unit], opt, hp), 'optimizer_create')
    call ok(fsdp_optimizer_step(opt), 'fsdp_optimizer_step')
    do j = 1, 4
      do i = 1, 3
        expect_w(i, j) = w(i, j) - 0.125_c_float * mean * grad_pattern((j - 1) * 3 + (i - 1))
      end do
    end do
    do i = 1, 5
      expect_b(i) = b(i) - 0.125_c_float * mean * grad_pattern(100 + i - 1)
    end do
    call must(fsdp_unshard(unit), 'unshard after the step')
    call must(fsdp_param_data(unit, 0, pw), 'param_data after the step')
    call must(fsdp_param_data(unit, 1, pb), 'param_data after the step')
    call check(maxval(abs(pw - expect_w)) <= 1e-5 .and. maxval(abs(pb - expect_b)) <= 1e-5, &
               'SGD step equals p - lr * g')
    call ok(fsdp_reshard(unit), 'reshard')
    call ok(fsdp_optimizer_destroy(opt), 'fsdp_optimizer_destroy')
    call ok(fsdp_unit_destroy(scalar_unit), 'destroy scalar unit')
    call ok(fsdp_unit_destroy(unit), 'fsdp_unit_destroy')
    call ok(fsdp_finalize(ctx), 'fsdp_finalize')
  end subroutine

  ! Saved, overwritten with zeros, loaded: the saved values are back, with the metadata.
  subroutine checkpoint_round_trip()
    type(fsdp_context_t) :: ctx
    type(fsdp_unit_t) :: unit
    type(fsdp_load_report_t) :: report
    type(fsdp_request_t) :: req
    real(c_float), target :: w(3, 4), b(5)
    real(c_double) :: s
    real(c_float), pointer :: shard(:), pw(:, :), pb(:)
    character(len=:), allocatable :: path, value
    call model(w, b, s)
    path = trim(dir)//'/fortran.h5'
    call must(fsdp_init(MPI_COMM_WORLD, ctx), 'fsdp_init')
    call must(fsdp_unit_create(ctx, [fsdp_param('fc.weight', w), fsdp_param('fc.bias', b)], unit), &
            'fsdp_unit_create')
    call ok(fsdp_checkpoint_save(ctx, path, metadata_keys=['step', 'seed'], &
                                 metadata_values=['7   ', '1234']), 'fsdp_checkpoint_save')
    call must(fsdp_shard_data(unit, shard), 'fsdp_shard_data')
    shard = 0
    call ok(fsdp_checkpoint_load(ctx, path, report=report), 'fsdp_checkpoint_load')
    call check(report%loaded == 2 .and. report%missing == 0, 'load report counts')
    call must(fsdp_unshard(unit), 'unshard')
    call must(fsdp_param_data(unit, 0, pw), 'param_data')
    call must(fsdp_param_data(unit, 1, pb), 'param_data')
    call check(all(pw == w) .and. all(pb == b), 'loaded values equal the saved ones')
    call ok(fsdp_reshard(unit), 'reshard')
    call ok(fsdp_checkpoint_metadata(path, 'seed', value), 'fsdp_checkpoint_metadata')
    call check(value == '1234', 'metadata seed = 1234')
    call ok(fsdp_checkpoint_metadata(path, 'step', value), 'fsdp_checkpoint_metadata')
    call check(value == '7', 'metadata step = 7 (trailing blanks dropped)')
    call check(fsdp_checkpoint_metadata(path, 'epoch', value) == FSDP_ERR_OUT_OF_RANGE, &
               'absent metadata key: FSDP_ERR_OUT_OF_RANGE')
    ! In the background: the file holds the state at the call, whatever happens after it.
    call must(fsdp_checkpoint_save_async(ctx, path, req, metadata_keys=['step'], &
                                         metadata_values=['8']), 'fsdp_checkpoint_save_async')
    shard = -1
    call ok(fsdp_wait(req), 'fsdp_wait on the save')
    call ok(fsdp_checkpoint_load(ctx, path), 'load of the background save')
    call ok(fsdp_unshard(unit), 'unshard')
    call ok(fsdp_param_data(unit, 0, pw), 'param_data')
    call check(all(pw == w), 'background save holds the values at the call')
    call ok(fsdp_reshard(unit), 'reshard')
    call ok(fsdp_checkpoint_metadata(path, 'step', value), 'metadata of the background save')
    call check(value == '8', 'background save metadata step = 8')
    call must(fsdp_checkpoint_save(ctx, path, metadata_keys=['step'], metadata_values=['7']), &
              'save again (bad_input expects step = 7)')
    call ok(fsdp_unit_destroy(unit), 'destroy')
    call ok(fsdp_finalize(ctx), 'finalize')
  end subroutine

  ! Refused with FSDP_ERR_INVALID_ARGUMENT and a message naming the argument; nothing changed.
  subroutine bad_input()
    type(fsdp_context_t) :: ctx
    type(fsdp_unit_t) :: unit
    real(c_float), target :: w(3, 4), b(5), big(6, 4)
    real(c_double) :: s
    real(c_float), pointer :: p1(:), p3(:, :, :)
    real(c_double), pointer :: d2(:, :), dshard(:)
    integer(c_int) :: st
    character(len=:), allocatable :: path, value
    call model(w, b, s)
    big = 1
    path = trim(dir)//'/fortran.h5'
    call must(fsdp_init(MPI_COMM_WORLD, ctx), 'fsdp_init')

    st = fsdp_unit_create(ctx, [fsdp_param('strided', big(1:6:2, :))], unit)
    call check(st == FSDP_ERR_INVALID_ARGUMENT .and. &
               index(fsdp_last_error(), 'params(1) "strided": values: not contiguous') > 0, &
               'non-contiguous values refused: '//fsdp_last_error())
    call check(.not. c_associated(unit%ptr), 'no unit after a refused creation')

    call must(fsdp_unit_create(ctx, [fsdp_param('fc.weight', w), fsdp_param('fc.bias', b)], unit), &
            'fsdp_unit_create')
    call must(fsdp_unshard(unit), 'unshard')
    nullify (p1, p3, d2, dshard)
    st = fsdp_param_data(unit, 0, p1)
    call check(st == FSDP_ERR_INVALID_ARGUMENT .and. index(fsdp_last_error(), &
               'fsdp_param_data: a: a rank-1 pointer, but parameter 0 "fc.weight" has 2') > 0 &
               .and. index(fsdp_last_error(), 'Fortran shape (3, 4)') > 0, &
               'wrong rank refused: '//fsdp_last_error())
    call check(.not. associated(p1), 'pointer untouched after a wrong rank')
    st = fsdp_param_data(unit, 0, d2)
    call check(st == FSDP_ERR_INVALID_ARGUMENT .and. &
               index(fsdp_last_error(), 'is unsharded as float32') > 0, &
               'wrong kind refused: '//fsdp_last_error())
    call check(.not. associated(d2), 'pointer untouched after a wrong kind')
    st = fsdp_grad_data(unit, 1, p3)
    call check(st == FSDP_ERR_INVALID_ARGUMENT .and. &
               index(fsdp_last_error(), 'fsdp_grad_data: a: a rank-3 pointer') > 0, &
               'wrong gradient rank refused: '//fsdp_last_error())
    st = fsdp_param_data(unit, 5, p1)
    call check(st == FSDP_ERR_OUT_OF_RANGE .and. &
               index(fsdp_last_error(), 'fsdp_param_data') > 0, &
               'index out of range: the call''s own message: '//fsdp_last_error())
    call ok(fsdp_reshard(unit), 'reshard')
    st = fsdp_shard_data(unit, dshard)
    call check(st == FSDP_ERR_INVALID_ARGUMENT .and. &
               index(fsdp_last_error(), 'the unit stores float32') > 0, &
               'shard of the wrong kind refused: '//fsdp_last_error())

    ! A collective call with a bad local argument fails on every rank, and the file is intact.
    st = fsdp_checkpoint_save(ctx, path, metadata_keys=['step', 'seed'], metadata_values=['9'])
    call check(st == FSDP_ERR_INVALID_ARGUMENT .and. &
               index(fsdp_last_error(), 'metadata_values: 1 values for 2 metadata_keys') > 0, &
               'mismatched metadata refused: '//fsdp_last_error())
    call ok(fsdp_checkpoint_metadata(path, 'step', value), 'metadata after a refused save')
    call check(value == '7', 'the earlier checkpoint is untouched')
    call ok(fsdp_unit_destroy(unit), 'destroy')
    call ok(fsdp_finalize(ctx), 'finalize')
  end subroutine

#ifdef FSDP_HAVE_MPI_F08
  subroutine mpi_f08_context()
    type(fsdp_context_t) :: ctx
    type(fsdp_config_t) :: cfg
    integer(c_int) :: r, n, factor, strategy, reduction
    cfg%strategy = FSDP_NO_SHARD
    call must(fsdp_init(MPI_COMM_WORLD_F08, ctx, cfg), 'fsdp_init (mpi_f08 communicator)')
    call ok(fsdp_group_info(ctx, FSDP_GROUP_WORLD, r, n), 'fsdp_group_info')
    call check(r == rank .and. n == nranks, 'mpi_f08 context spans MPI_COMM_WORLD')
    call ok(fsdp_context_config(ctx, factor, strategy, reduction), 'fsdp_context_config')
    call check(strategy == FSDP_NO_SHARD .and. factor == 1, 'config passed through')
    call ok(fsdp_finalize(ctx), 'finalize')
  end subroutine
#endif
end program test_fortran
