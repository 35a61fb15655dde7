! Units used by any subset of ranks (used_by=FSDP_USED_BY_ANY_RANKS) from Fortran, against values
! computed here: two units, rank r using only unit mod(r, 2) + 1. It reads its unit alone (the
! initial values), writes a gradient for it alone, reduces (kept locally) and reshards; every rank
! calls fsdp_step_boundary, then an SGD step. Rank 0 then reads both units alone while the others
! go on to a collective: each is p - lr * (the sum of the gradients its users wrote) / W (the
! default FSDP_REDUCE_MEAN divides by every rank, users or not); a unit no rank used is unchanged.
! Bad input: the last rank steps before the boundary while it holds an unreduced gradient, and is
! refused with FSDP_ERR_STEP_BOUNDARY, its shards unchanged. Mirrors tests/test_any_ranks.c.
program test_fortran_any_ranks
  use, intrinsic :: iso_c_binding
  use mpi, only: MPI_COMM_WORLD, MPI_Init, MPI_Finalize, MPI_Comm_rank, MPI_Comm_size
  use fsdp
  implicit none
  real(c_double), parameter :: lr = 0.125_c_double
  integer, parameter :: numel(2) = [12, 5]  ! unit 1: w(3, 4), unit 2: v(5)
  real(c_double) :: initial(12, 2)  ! unit u's values in Fortran order: initial(1:numel(u), u)
  type(fsdp_context_t) :: ctx
  type(fsdp_unit_t) :: units(2)
  type(fsdp_optimizer_t) :: opt
  integer :: ierr, rank, nranks, failed = 0, passed = 0

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)

  call train_and_evaluate()

  if (rank == 0) print '(a,i0,a,i0,a,i0,a)', 'test_fortran_any_ranks on ', nranks, ' rank(s): ', &
    passed, ' checks ok, ', failed, ' checks failed'
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

  ! The gradient rank r writes for element k of the unit it uses: (r + 1) times a pattern.
  pure real(c_double) function gradient(r, k)
    integer, intent(in) :: r, k
    gradient = (r + 1) * 0.25_c_double * (mod(7 * k, 5) - 2)
  end function

  ! Unit u after the SGD step: p - lr * (the sum over the ranks that used it of their
  ! gradients) / W.
  function updated(u) result(p)
    integer, intent(in) :: u
    real(c_double) :: p(numel(u))
    integer :: r, k
    p = initial(1:numel(u), u)
    do r = 0, nranks - 1
      if (mod(r, 2) + 1 /= u) cycle
      do k = 1, numel(u)
        p(k) = p(k) - lr * gradient(r, k) / nranks
      end do
    end do
  end function

  ! Unit u's unsharded values (after fsdp_unshard), in Fortran order.
  function param(u) result(p)
    integer, intent(in) :: u
    real(c_double), pointer :: p(:)
    type(c_ptr) :: raw
    call must(fsdp_param_data(units(u), 0, raw), 'fsdp_param_data')
    call c_f_pointer(raw, p, [numel(u)])
  end function

  ! This rank's shards of both units, one after the other.
  function shards() result(s)
    real(c_double), allocatable :: s(:)
    real(c_double), pointer :: s1(:), s2(:)
    call must(fsdp_shard_data(units(1), s1), 'fsdp_shard_data')
    call must(fsdp_shard_data(units(2), s2), 'fsdp_shard_data')
    s = [s1, s2]
  end function

  subroutine train_and_evaluate()
    type(fsdp_hyperparams_t) :: hp
    real(c_double), pointer :: g(:)
    real(c_double), allocatable :: before(:)
    real(c_double), target :: partial(1)
    type(c_ptr) :: raw
    integer(c_int) :: st
    integer :: mine, u, k

    initial = 0
    initial(1:12, 1) = [(real(k, c_double) + 0.5_c_double, k = 1, 12)]
    initial(1:5, 2) = [(-0.25_c_double * k, k = 1, 5)]
    call must(fsdp_init(MPI_COMM_WORLD, ctx), 'fsdp_init')
    call must(fsdp_unit_create(ctx, [fsdp_param('w', reshape(initial(1:12, 1), [3, 4]))], &
                               units(1), used_by=FSDP_USED_BY_ANY_RANKS), &
              'fsdp_unit_create used_by=FSDP_USED_BY_ANY_RANKS')
    call must(fsdp_unit_create(ctx, [fsdp_param('v', initial(1:5, 2))], units(2), &
                               used_by=FSDP_USED_BY_ANY_RANKS), &
              'fsdp_unit_create used_by=FSDP_USED_BY_ANY_RANKS')
    hp = fsdp_sgd_defaults()
    hp%lr = lr
    call must(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_SGD, units, opt, hp), &
              'fsdp_optimizer_create')

    ! This rank's unit alone: its initial values, then its gradient, kept for the boundary.
    mine = mod(rank, 2) + 1
    call must(fsdp_unshard(units(mine)), 'fsdp_unshard of this rank''s unit alone')
    call check(all(param(mine) == initial(1:numel(mine), mine)), &
               'a unit read alone holds its initial values')
    call must(fsdp_grad_data(units(mine), 0, raw), 'fsdp_grad_data')
    call c_f_pointer(raw, g, [numel(mine)])
    g = [(gradient(rank, k), k = 1, numel(mine))]
    call ok(fsdp_reduce_grads(units(mine)), 'fsdp_reduce_grads (local)')
    call ok(fsdp_reshard(units(mine)), 'fsdp_reshard')

    ! The last rank forgets the boundary: its step is refused and changes nothing.
    if (rank == nranks - 1) then
      before = shards()
      st = fsdp_optimizer_step(opt)
      call check(st == FSDP_ERR_STEP_BOUNDARY .and. &
                 index(fsdp_last_error(), 'fsdp_step_boundary') > 0, &
                 'a step without the boundary is refused, naming it: '//fsdp_last_error())
      call check(all(shards() == before), 'a refused step changes no shard')
    end if
    call ok(fsdp_step_boundary(ctx), 'fsdp_step_boundary')
    call ok(fsdp_optimizer_step(opt), 'fsdp_optimizer_step')

    ! An evaluation on rank 0 alone; the others go on to a collective, which publishes their
    ! updated shards for rank 0 to read.
    if (rank == 0) then
      do u = 1, 2
        call must(fsdp_unshard(units(u)), 'fsdp_unshard on rank 0 alone')
        call check(maxval(abs(param(u) - updated(u))) <= 1d-13, &
                   'a unit read by rank 0 alone is p - lr * mean gradient')
        call ok(fsdp_reshard(units(u)), 'fsdp_reshard')
      end do
    end if
    partial = 1
    call ok(fsdp_allreduce(ctx, FSDP_GROUP_WORLD, FSDP_OP_SUM, c_loc(partial), 1_c_size_t), &
            'fsdp_allreduce')
    call check(partial(1) == nranks, 'fsdp_allreduce: the sum over the ranks')

    call ok(fsdp_optimizer_destroy(opt), 'fsdp_optimizer_destroy')
    do u = 1, 2
      call ok(fsdp_unit_destroy(units(u)), 'fsdp_unit_destroy')
    end do
    call ok(fsdp_finalize(ctx), 'fsdp_finalize')
  end subroutine
end program test_fortran_any_ranks
