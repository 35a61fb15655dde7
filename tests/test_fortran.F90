! The Fortran module against references computed here, independently of the library: a unit's
! unsharded values and their layout (row-major C shape, reversed Fortran shape), reduced
! gradients (the mean of every rank's known gradient), an SGD step (p - lr * g), a checkpoint
! round trip with metadata, contexts from `mpi` and `mpi_f08` communicators, and bad input
! (wrong rank, wrong kind, non-contiguous values, mismatched metadata) refused with a message
! naming the argument and nothing changed. Mirrors test_unit_values, test_optimizers and
! test_checkpoint_reshard of the C suite. Also: values given as temporaries (expressions,
! function results, strided sections) are the unit's values exactly; outputs C lets be NULL are
! optional; an error names the call the program made (fsdp_unit_create, fsdp_init), not the C
! entry point behind it.
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
  call values_from_temporaries()
  call dim0_layout()
  call optional_outputs()
  call gather_and_broadcast()
  call errors_name_the_call()
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

  ! FSDP_LAYOUT_DIM0: each rank's shard holds C rows [r*c, (r+1)*c) of each parameter
  ! (c = ceil(d0 / F), fsdp.h), i.e. Fortran columns of w(3, 4); an unshard gives them whole.
  subroutine dim0_layout()
    type(fsdp_context_t) :: ctx
    type(fsdp_unit_t) :: unit
    type(fsdp_config_t) :: cfg
    real(c_float), target :: w(3, 4), b(5)
    real(c_double) :: s
    real(c_float), pointer :: pw(:, :), pb(:), shard(:)
    integer(c_size_t) :: shard_offset, param_offset, length, n
    integer :: c, held, k
    logical :: same
    call model(w, b, s)
    call must(fsdp_init(MPI_COMM_WORLD, ctx, cfg), 'fsdp_init')
    call must(fsdp_unit_create(ctx, [fsdp_param('fc.weight', w), fsdp_param('fc.bias', b)], unit, &
                               layout=FSDP_LAYOUT_DIM0), 'fsdp_unit_create layout=FSDP_LAYOUT_DIM0')
    call must(fsdp_shard_data(unit, shard), 'fsdp_shard_data')
    call ok(fsdp_param_shard_range(unit, 0, shard_offset, param_offset, length), &
            'fsdp_param_shard_range')
    c = (4 + nranks - 1) / nranks
    held = max(0, min(c, 4 - rank * c))
    call check(length == held * 3, 'dim0: rows held of fc.weight')
    if (held > 0) call check(param_offset == rank * c * 3, 'dim0: first row held')
    same = .true.
    do n = 0, length - 1
      k = int(param_offset + n)
      same = same .and. shard(shard_offset + n + 1) == w(mod(k, 3) + 1, k / 3 + 1)
    end do
    call check(same, 'dim0: the shard holds the rows of fc.weight')
    call must(fsdp_unshard(unit), 'fsdp_unshard dim0')
    call must(fsdp_param_data(unit, 0, pw), 'fsdp_param_data dim0')
    call must(fsdp_param_data(unit, 1, pb), 'fsdp_param_data dim0')
    call check(all(pw == w) .and. all(pb == b), 'dim0: unsharded values equal the initial ones')
    call ok(fsdp_reshard(unit), 'fsdp_reshard dim0')
    call ok(fsdp_unit_destroy(unit), 'fsdp_unit_destroy dim0')
    call ok(fsdp_finalize(ctx), 'fsdp_finalize dim0')
  end subroutine

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

  ! w(i, j) = i + 1000 j: every element distinct and exact in float32.
  subroutine ramp(w)
    real(c_float), intent(out) :: w(:, :)
    integer :: i, j
    do j = 1, size(w, 2)
      do i = 1, size(w, 1)
        w(i, j) = real(i + 1000 * j, c_float)
      end do
    end do
  end subroutine

  function affine(w) result(y)  ! a function result: a temporary of the caller's
    real(c_float), intent(in) :: w(:, :)
    real(c_float) :: y(size(w, 1), size(w, 2))
    y = 2 * w + 1
  end function

  function sequence(n) result(y)
    integer, intent(in) :: n
    real(c_double), allocatable :: y(:)
    integer :: i
    allocate (y(n))
    do i = 1, n
      y(i) = 0.25_c_double * i
    end do
  end function

  ! Values as a simulation code passes them: an expression, a function result, a strided
  ! section, a scalar expression. Each is a temporary that dies when fsdp_param returns (two of
  ! the same size, so the second reuses the first's memory); the unit holds exactly the values.
  ! A descriptor given a second time (its copy freed by the first creation) is refused.
  subroutine values_from_temporaries()
    type(fsdp_context_t) :: ctx
    type(fsdp_unit_t) :: unit, unit64, again
    type(fsdp_param_t) :: kept
    real(c_float), allocatable :: w(:, :)
    real(c_float), pointer :: p_half(:, :), p_affine(:, :), p_strided(:, :), p_shaped(:)
    real(c_double), pointer :: p_seq(:), p_s
    real(c_float), allocatable, target :: raw(:)
    real(c_float) :: expect(300, 40), expect_strided(100, 40)
    real(c_double) :: s
    integer(c_int) :: st
    integer :: i, j
    logical :: same
    allocate (w(300, 40), raw(6))
    call ramp(w)
    raw = [(real(i, c_float), i = 1, 6)]
    s = 1.5_c_double
    call must(fsdp_init(MPI_COMM_WORLD, ctx), 'fsdp_init')
    call must(fsdp_unit_create(ctx, [fsdp_param('half', 0.5 * w), fsdp_param('affine', affine(w)), &
                                     fsdp_param('strided', w(1:300:3, :)), &
                                     fsdp_param('shaped', [6_c_int64_t], FSDP_FLOAT32, &
                                                values=c_loc(raw))], unit), &
              'fsdp_unit_create from expressions')
    raw = -1  ! the c_ptr form copied too: later changes do not reach the unit
    call must(fsdp_unit_create(ctx, [fsdp_param('seq', sequence(5000)), fsdp_param('s', 2 * s)], &
                               unit64), 'fsdp_unit_create from float64 expressions')
    call must(fsdp_unshard(unit), 'unshard')
    call must(fsdp_param_data(unit, 0, p_half), 'param_data half')
    call must(fsdp_param_data(unit, 1, p_affine), 'param_data affine')
    call must(fsdp_param_data(unit, 2, p_strided), 'param_data strided')
    call must(fsdp_param_data(unit, 3, p_shaped), 'param_data shaped')
    do j = 1, 40
      do i = 1, 300
        expect(i, j) = real(i + 1000 * j, c_float) / 2
      end do
    end do
    call check(all(shape(p_half) == [300, 40]), 'shape of 0.5 * w')
    call check(all(p_half == expect), 'values of 0.5 * w exactly')
    do j = 1, 40
      do i = 1, 300
        expect(i, j) = real(2 * (i + 1000 * j) + 1, c_float)
      end do
    end do
    call check(all(p_affine == expect), 'values of a function result exactly')
    do j = 1, 40
      do i = 1, 100
        expect_strided(i, j) = real(3 * (i - 1) + 1 + 1000 * j, c_float)
      end do
    end do
    call check(all(shape(p_strided) == [100, 40]), 'shape of w(1:300:3, :)')
    call check(all(p_strided == expect_strided), 'values of a strided section exactly')
    call check(size(p_shaped) == 6, 'size of the c_ptr-described parameter')
    if (size(p_shaped) == 6) call check(all(p_shaped == [(real(i, c_float), i = 1, 6)]), &
                                        'c_ptr values as they were at fsdp_param')
    call must(fsdp_unshard(unit64), 'unshard float64')
    call must(fsdp_param_data(unit64, 0, p_seq), 'param_data seq')
    call must(fsdp_param_data(unit64, 1, p_s), 'param_data s')
    same = size(p_seq) == 5000
    do i = 1, min(5000, size(p_seq))
      same = same .and. p_seq(i) == 0.25_c_double * i
    end do
    call check(same, 'values of a float64 function result exactly')
    call check(p_s == 3.0_c_double, 'value of a scalar expression')
    call ok(fsdp_reshard(unit), 'reshard')
    call ok(fsdp_reshard(unit64), 'reshard')

    ! One descriptor, one unit: given again, it is refused on every rank, by name.
    kept = fsdp_param('kept', 0.5 * w)
    call must(fsdp_unit_create(ctx, [kept], again), 'unit from a kept descriptor')
    call ok(fsdp_unit_destroy(again), 'destroy')
    st = fsdp_unit_create(ctx, [kept], again)
    call check(st == FSDP_ERR_INVALID_ARGUMENT .and. index(fsdp_last_error(), &
               'fsdp_unit_create: params(1) "kept": values: their copy was freed') == 1, &
               'a descriptor given twice is refused: '//fsdp_last_error())
    call check(.not. c_associated(again%ptr), 'no unit from a descriptor given twice')
    call ok(fsdp_unit_destroy(unit64), 'destroy')
    call ok(fsdp_unit_destroy(unit), 'destroy')
    call ok(fsdp_finalize(ctx), 'finalize')
  end subroutine

  ! Outputs that C lets be NULL are optional arguments: each asked for alone.
  ! fsdp_gather_params: the unit's masters whole, into Fortran arrays of the parameters' shapes;
  ! fsdp_broadcast: rank 0's value on every rank; fsdp_allreduce: the sum and largest rank.
  subroutine gather_and_broadcast()
    type(fsdp_context_t) :: ctx
    type(fsdp_unit_t) :: unit
    real(c_float), target :: w(3, 4), b(5), gw(3, 4), gb(5)
    real(c_double) :: s
    integer(c_int), target :: token(2)
    real(c_double), target :: partial(2)
    call model(w, b, s)
    call must(fsdp_init(MPI_COMM_WORLD, ctx), 'fsdp_init')
    call must(fsdp_unit_create(ctx, [fsdp_param('w', w), fsdp_param('b', b)], unit), 'unit')
    gw = 0
    gb = 0
    call ok(fsdp_gather_params(unit, [c_loc(gw), c_loc(gb)]), 'fsdp_gather_params')
    call check(all(gw == w) .and. all(gb == b), 'gathered masters equal the values given')
    gb = 0
    call ok(fsdp_gather_params(unit, [c_loc(gw), c_null_ptr]), 'fsdp_gather_params, b skipped')
    call check(all(gb == 0), 'a null destination is skipped')
    token = [41 + rank, 7]
    call ok(fsdp_broadcast(ctx, FSDP_GROUP_WORLD, 0, c_loc(token), 8_c_size_t), 'fsdp_broadcast')
    call check(all(token == [41, 7]), 'broadcast: rank 0''s value everywhere')
    partial = [real(rank + 1, c_double), 0.5_c_double]
    call ok(fsdp_allreduce(ctx, FSDP_GROUP_WORLD, FSDP_OP_SUM, c_loc(partial), 2_c_size_t), &
            'fsdp_allreduce sum')
    call check(partial(1) == nranks * (nranks + 1) / 2.0_c_double .and. &
               partial(2) == 0.5_c_double * nranks, 'allreduce: the sum over the ranks')
    partial = [real(rank, c_double), -real(rank, c_double)]
    call ok(fsdp_allreduce(ctx, FSDP_GROUP_WORLD, FSDP_OP_MAX, c_loc(partial), 2_c_size_t), &
            'fsdp_allreduce max')
    call check(partial(1) == nranks - 1 .and. partial(2) == 0, 'allreduce: the largest value')
    call ok(fsdp_unit_destroy(unit), 'destroy')
    call ok(fsdp_finalize(ctx), 'finalize')
  end subroutine

  subroutine optional_outputs()
    type(fsdp_context_t) :: ctx
    type(fsdp_unit_t) :: unit, user, half
    type(fsdp_optimizer_t) :: opt
    type(fsdp_grad_scaler_t) :: scaler
    type(fsdp_config_t) :: cfg
    real(c_float), target :: w(3, 4), b(5)
    real(c_double) :: s
    real(c_float), pointer :: gw(:, :), gb(:)
    integer(c_int) :: major, n, strategy, transport, nparams, param_dtype
    integer(c_size_t) :: shard_numel, numel, length
    type(c_ptr) :: data
    call model(w, b, s)
    call must(fsdp_get_version(major=major), 'fsdp_get_version(major=)')
    call check(major == FSDP_VERSION_MAJOR, 'major version alone')
    cfg%strategy = FSDP_FULL_SHARD
    call must(fsdp_init(MPI_COMM_WORLD, ctx, cfg), 'fsdp_init')
    call ok(fsdp_group_info(ctx, FSDP_GROUP_WORLD, size=n), 'fsdp_group_info(size=)')
    call check(n == nranks, 'group size alone')
    call ok(fsdp_context_config(ctx, strategy=strategy), 'fsdp_context_config(strategy=)')
    call check(strategy == FSDP_FULL_SHARD, 'strategy alone')
    call ok(fsdp_context_placement(ctx, transport=transport), 'fsdp_context_placement(transport=)')
    call must(fsdp_unit_create(ctx, [fsdp_param('w', w), fsdp_param('b', b)], unit), 'unit')
    call ok(fsdp_unit_numel(unit, shard_numel=shard_numel), 'fsdp_unit_numel(shard_numel=)')
    call ok(fsdp_unit_numel(unit, numel=numel), 'fsdp_unit_numel(numel=)')
    call check(numel == 17, 'numel alone')
    call ok(fsdp_unit_info(unit, nparams=nparams), 'fsdp_unit_info(nparams=)')
    call check(nparams == 2, 'nparams alone')
    call ok(fsdp_unit_precision(unit, param_dtype=param_dtype), 'fsdp_unit_precision(param_dtype=)')
    call check(param_dtype == FSDP_FLOAT32, 'param_dtype alone')
    call ok(fsdp_param_shard_range(unit, 1, length=length), 'fsdp_param_shard_range(length=)')
    call ok(fsdp_shard_data(unit, numel=numel), 'fsdp_shard_data(numel=)')
    call check(numel == shard_numel, 'shard numel alone')
    call ok(fsdp_shard_data(unit, data), 'fsdp_shard_data(data) without numel')
    call check(c_associated(data), 'shard address alone')
    call ok(fsdp_shard_grad(unit, data), 'fsdp_shard_grad(data) without numel')
    call must(fsdp_unit_create(ctx, [fsdp_param('v', b)], user), 'user unit')
    call ok(fsdp_unit_tie(user, 'w_alias', unit, 0), 'fsdp_unit_tie without alias_index')
    call must(fsdp_unshard_async(unit), 'fsdp_unshard_async without a request')
    call must(fsdp_unit_wait(unit), 'fsdp_unit_wait')
    call must(fsdp_unshard(user), 'unshard user')
    call must(fsdp_grad_data(unit, 0, gw), 'grad_data')
    call must(fsdp_grad_data(unit, 1, gb), 'grad_data')
    gw = 1
    gb = 1
    call ok(fsdp_reshard(user), 'reshard user')
    call ok(fsdp_reduce_grads_async(unit), 'fsdp_reduce_grads_async without a request')
    call ok(fsdp_unit_wait(unit), 'fsdp_unit_wait')
    call ok(fsdp_reshard(unit), 'reshard')
    call ok(fsdp_clip_grad_norm(ctx, 100d0, 2d0), 'fsdp_clip_grad_norm without total_norm')
    call must(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, [unit], opt), 'optimizer')
    call ok(fsdp_optimizer_add_group(opt, '*.none', fsdp_sgd_defaults()), 'add_group, no outputs')
    call ok(fsdp_optimizer_destroy(opt), 'destroy optimizer')
    ! A gradient scaler is for float16 compute.
    call must(fsdp_unit_create(ctx, [fsdp_param('h', b)], half, param_dtype=FSDP_FLOAT16), &
              'float16 unit')
    call must(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, [half], opt), 'optimizer')
    call must(fsdp_grad_scaler_create(ctx, 1d0, 2d0, 0.5d0, 100, scaler), 'scaler')
    call ok(fsdp_grad_scaler_step(scaler, opt), 'fsdp_grad_scaler_step without skipped')
    call ok(fsdp_grad_scaler_destroy(scaler), 'destroy scaler')
    call ok(fsdp_optimizer_destroy(opt), 'destroy optimizer')
    call ok(fsdp_unit_destroy(half), 'destroy float16 unit')
    call ok(fsdp_unit_destroy(user), 'destroy user')
    call ok(fsdp_unit_destroy(unit), 'destroy')
    call ok(fsdp_finalize(ctx), 'finalize')
  end subroutine

  ! An error names the call the program made, with or without options.
  subroutine errors_name_the_call()
    type(fsdp_context_t) :: ctx
    type(fsdp_unit_t) :: unit
    type(fsdp_config_t) :: cfg
    real(c_float) :: w(3, 4), b(5)
    real(c_double) :: s
    integer(c_int) :: st
    call model(w, b, s)
    call must(fsdp_init(MPI_COMM_WORLD, ctx), 'fsdp_init')
    st = fsdp_unit_create(ctx, [fsdp_param('x', w), fsdp_param('x', b)], unit)
    call check(st == FSDP_ERR_INVALID_ARGUMENT .and. &
               index(fsdp_last_error(), 'fsdp_unit_create: ') == 1 .and. &
               index(fsdp_last_error(), 'fsdp_unit_create_ex') == 0, &
               'fsdp_unit_create''s error names it: '//fsdp_last_error())
    st = fsdp_unit_create(ctx, [fsdp_param('x', w), fsdp_param('x', b)], unit, name='layer', &
                          param_dtype=FSDP_FLOAT32)
    call check(st == FSDP_ERR_INVALID_ARGUMENT .and. &
               index(fsdp_last_error(), 'fsdp_unit_create: ') == 1 .and. &
               index(fsdp_last_error(), 'fsdp_unit_create_ex') == 0, &
               'fsdp_unit_create with options names it: '//fsdp_last_error())
    st = fsdp_unit_create(ctx, [fsdp_param('x', w)], unit, param_dtype=99_c_int)
    call check(st == FSDP_ERR_INVALID_ARGUMENT .and. &
               index(fsdp_last_error(), 'fsdp_unit_create: ') == 1 .and. &
               index(fsdp_last_error(), 'fsdp_unit_create_ex') == 0, &
               'a bad option names fsdp_unit_create: '//fsdp_last_error())
    call ok(fsdp_finalize(ctx), 'finalize')
    cfg%strategy = 99
    st = fsdp_init(MPI_COMM_WORLD, ctx, cfg)
    call check(st == FSDP_ERR_INVALID_ARGUMENT .and. &
               index(fsdp_last_error(), 'fsdp_init: ') == 1 .and. &
               index(fsdp_last_error(), 'fsdp_init_fcomm') == 0, &
               'fsdp_init''s error names it: '//fsdp_last_error())
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
    real(c_float), target :: w(3, 4), b(5)
    real(c_double) :: s
    real(c_float), pointer :: p1(:), p3(:, :, :)
    real(c_double), pointer :: d2(:, :), dshard(:)
    integer(c_int) :: st
    character(len=:), allocatable :: path, value
    call model(w, b, s)
    path = trim(dir)//'/fortran.h5'
    call must(fsdp_init(MPI_COMM_WORLD, ctx), 'fsdp_init')

    st = fsdp_unit_create(ctx, [fsdp_param('fc.weight', w), fsdp_param('fc.weight', b)], unit)
    call check(st == FSDP_ERR_INVALID_ARGUMENT, 'duplicate names refused: '//fsdp_last_error())
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
