! hello: one unit on every rank: unshard, read it, write a gradient, reduce, finalize.
!   mpiexec -n 2 ./hello_f
program hello
  use mpi
  use fsdp
  use, intrinsic :: iso_c_binding, only: c_float, c_size_t
  implicit none
  type(fsdp_context_t) :: ctx
  type(fsdp_unit_t) :: unit
  real(c_float), target :: w(4, 3)  ! C shape [3, 4]: Fortran reverses it
  real(c_float), pointer :: full(:, :), grad(:, :), shard(:)
  integer :: ierr, rank, world, i
  integer(c_size_t) :: at, from, n
  logical :: ok

  call MPI_Init(ierr)
  call fsdp_check(fsdp_init(MPI_COMM_WORLD, ctx))  ! full sharding over all ranks
  call fsdp_check(fsdp_group_info(ctx, FSDP_GROUP_WORLD, rank, world))

  w = reshape([(real(i, c_float), i = 1, 12)], [4, 3])  ! C weight[1][2] is w(3, 2) = 7
  call fsdp_check(fsdp_unit_create(ctx, [fsdp_param("weight", w)], unit))

  call fsdp_check(fsdp_unshard(unit))  ! all-gather: the whole weight
  call fsdp_check(fsdp_param_data(unit, 0, full))
  print '(a,i0,a,i0,a,f4.1)', "rank ", rank, " of ", world, ": weight[1][2] = ", full(3, 2)
  ok = full(3, 2) == 7
  call fsdp_check(fsdp_reshard(unit))

  call fsdp_check(fsdp_grad_data(unit, 0, grad))  ! every rank's gradient is its rank + 1
  grad = real(rank + 1, c_float)
  call fsdp_check(fsdp_reduce_grads(unit))  ! reduce-scatter: the mean, sharded
  call fsdp_check(fsdp_shard_grad(unit, shard))
  ! Where this rank's part of the weight sits in its shard (0-based; blocks are padded to a
  ! multiple of 8 elements, so a rank may hold only padding)
  call fsdp_check(fsdp_param_shard_range(unit, 0, at, from, n))
  ok = ok .and. all(shard(at + 1:at + n) == real(world + 1, c_float) / 2)
  print '(a,i0,a,i0,a,l1)', "rank ", rank, ": ", n, " gradient element(s) of the weight, mean ok: ", ok

  call fsdp_check(fsdp_finalize(ctx))
  call MPI_Finalize(ierr)
  if (.not. ok) error stop 1
end program hello
