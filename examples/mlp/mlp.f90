! The MLP example in Fortran: the C example's model (examples/mlp/mlp.c) with the same parameter
! names, shapes, data and training loop: hybrid sharding, bfloat16 compute over a float32 master,
! two micro-batches per step with the first accumulated without communication, prefetch with
! asynchronous reductions, gradient clipping and sharded AdamW; matrix products with matmul.
! A checkpoint saved by either program resumes in the other, on any number of ranks.
!
!   mpiexec -n 4 fsdp_mlp_f [--shard-factor F] [--save FILE] [--resume FILE]
!
! Layout: C's row-major [out, in] weight is Fortran's column-major w(in, out), and a batch of
! activations [BATCH, width] is act(width, BATCH): the same bytes, no transposition.
program mlp
  use mpi
  use fsdp
  use, intrinsic :: iso_c_binding
  implicit none
  integer, parameter :: LAYERS = 6, BATCH = 16, MICRO = 2, STEPS = 40
  integer, parameter :: widths(0:LAYERS) = [16, 64, 64, 64, 64, 64, 4]
  type(fsdp_context_t) :: ctx
  type(fsdp_config_t) :: cfg
  type(fsdp_unit_t) :: units(LAYERS)
  type(fsdp_optimizer_t) :: opt(1)
  type(fsdp_hyperparams_t) :: adamw, no_decay
  type(fsdp_request_t) :: reqs(LAYERS)
  type :: activations
    real(c_float), allocatable :: a(:, :), d(:, :)  ! values and dloss/d(pre-activation)
  end type
  type(activations) :: act(0:LAYERS)
  real(c_float), allocatable, target :: w(:, :), b(:), gw(:, :), gb(:), target_values(:, :)
  real(c_float) :: loss, local, first_loss, saved_loss
  real(c_double) :: norm
  type(c_ptr) :: pgw, pgb
  integer(kind=8) :: seed
  integer :: ierr, provided, rank, world, factor, l, i, step, micro_batch, n, in, out
  character(len=256) :: arg, save_path, resume_path
  character(len=32) :: names(2), loss_text
  character(len=:), allocatable :: text
  logical :: ok

  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided, ierr)  ! a progress thread for the overlap
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, world, ierr)
  save_path = ''
  resume_path = ''
  factor = merge(2, 1, mod(world, 2) == 0)
  i = 1
  do while (i < command_argument_count())
    call get_command_argument(i, arg)
    select case (trim(arg))
    case ('--save')
      call get_command_argument(i + 1, save_path)
    case ('--resume')
      call get_command_argument(i + 1, resume_path)
    case ('--shard-factor')
      call get_command_argument(i + 1, arg)
      read (arg, *) factor
    end select
    i = i + 2
  end do

  cfg%strategy = FSDP_HYBRID_SHARD  ! shard over F ranks, replicate over world / F
  cfg%sharding_factor = factor
  cfg%param_dtype = FSDP_BFLOAT16   ! unsharded parameters and gradients in bfloat16
  cfg%reduce_dtype = FSDP_FLOAT32   ! gradients communicated in float32
  call fsdp_check(fsdp_init(MPI_COMM_WORLD, ctx, cfg))

  ! One unit per layer {weight, bias}, initialized as the C example does.
  seed = 7
  do l = 1, LAYERS
    in = widths(l - 1)
    out = widths(l)
    allocate (w(in, out), b(out))
    do n = 1, out
      do i = 1, in
        w(i, n) = uniform(seed) * sqrt(3.0 / in)
      end do
    end do
    b = 0
    write (names(1), '(a,i0,a)') 'layer', l - 1, '.weight'
    write (names(2), '(a,i0,a)') 'layer', l - 1, '.bias'
    call fsdp_check(fsdp_unit_create(ctx, [fsdp_param(trim(names(1)), w), &
                                           fsdp_param(trim(names(2)), b)], units(l)))
    deallocate (w, b)
  end do
  adamw = fsdp_adamw_defaults()
  adamw%lr = 3d-3
  call fsdp_check(fsdp_optimizer_create(ctx, FSDP_OPTIMIZER_ADAMW, units, opt(1), adamw))
  no_decay = adamw
  no_decay%weight_decay = 0
  call fsdp_check(fsdp_optimizer_add_group(opt(1), '*.bias', no_decay))
  call fsdp_check(fsdp_set_prefetch(ctx, 1, 1))

  saved_loss = 0
  if (len_trim(resume_path) > 0) then
    call fsdp_check(fsdp_checkpoint_metadata(trim(resume_path), 'loss', text))
    read (text, *) saved_loss
    call fsdp_check(fsdp_checkpoint_load(ctx, trim(resume_path), opt))
    if (rank == 0) print '(a,a,a,i0,a,i0,a,f8.5,a)', 'resumed ', trim(resume_path), ' on ', &
      world, ' ranks, F = ', factor, ' (saved at loss ', saved_loss, ')'
  end if

  do l = 0, LAYERS
    allocate (act(l)%a(widths(l), BATCH), act(l)%d(widths(l), BATCH))
  end do
  allocate (target_values(widths(LAYERS), BATCH))
  first_loss = 0
  do step = 0, STEPS - 1
    local = 0
    call fsdp_check(fsdp_begin_forward(ctx))  ! prefetch follows last iteration's order
    do micro_batch = 0, MICRO - 1
      call fsdp_check(fsdp_set_grad_sync(ctx, merge(1, 0, micro_batch == MICRO - 1)))
      call make_batch(rank, step * MICRO + micro_batch, act(0)%a, target_values)
      ! Forward: one layer unsharded at a time (the next one is being prefetched).
      do l = 1, LAYERS
        call layer_params(l)
        call fsdp_check(fsdp_reshard(units(l)))
        act(l)%a = matmul(transpose(w), act(l - 1)%a) + spread(b, 2, BATCH)
        if (l < LAYERS) act(l)%a = tanh(act(l)%a)
      end do
      act(LAYERS)%d = (act(LAYERS)%a - target_values) / (BATCH * MICRO)
      local = local + 0.5 * sum((act(LAYERS)%a - target_values)**2) / (BATCH * MICRO)
      ! Backward, last layer first: add into the unit's bfloat16 full gradient, then start its
      ! reduction, which overlaps the next layer's backward.
      call fsdp_check(fsdp_begin_backward(ctx))
      do l = LAYERS, 1, -1
        in = widths(l - 1)
        out = widths(l)
        call layer_params(l)
        call fsdp_check(fsdp_grad_data(units(l), 0, pgw))  ! zero, or the last micro-batch's
        call fsdp_check(fsdp_grad_data(units(l), 1, pgb))
        allocate (gw(in, out), gb(out))
        call fsdp_check(fsdp_convert(c_loc(gw), FSDP_FLOAT32, pgw, FSDP_BFLOAT16, size(gw, kind=c_size_t)))
        call fsdp_check(fsdp_convert(c_loc(gb), FSDP_FLOAT32, pgb, FSDP_BFLOAT16, size(gb, kind=c_size_t)))
        gw = gw + matmul(act(l - 1)%a, transpose(act(l)%d))
        gb = gb + sum(act(l)%d, dim=2)
        act(l - 1)%d = matmul(w, act(l)%d)
        if (l > 1) act(l - 1)%d = act(l - 1)%d * (1 - act(l - 1)%a**2)
        call fsdp_check(fsdp_convert(pgw, FSDP_BFLOAT16, c_loc(gw), FSDP_FLOAT32, size(gw, kind=c_size_t)))
        call fsdp_check(fsdp_convert(pgb, FSDP_BFLOAT16, c_loc(gb), FSDP_FLOAT32, size(gb, kind=c_size_t)))
        deallocate (gw, gb)
        call fsdp_check(fsdp_reshard(units(l)))
        call fsdp_check(fsdp_reduce_grads_async(units(l), reqs(l)))  ! local while sync is off
      end do
      do l = 1, LAYERS
        call fsdp_check(fsdp_wait(reqs(l)))
      end do
    end do
    call MPI_Allreduce(local, loss, 1, MPI_REAL, MPI_SUM, MPI_COMM_WORLD, ierr)
    loss = loss / world
    if (step == 0) first_loss = loss
    call fsdp_check(fsdp_clip_grad_norm(ctx, 1d0, 2d0, norm))
    call fsdp_check(fsdp_optimizer_step(opt(1)))  ! every rank updates only its shard
    call fsdp_check(fsdp_optimizer_zero_grad(opt(1)))
    if (rank == 0 .and. (mod(step, 10) == 0 .or. step == STEPS - 1)) &
      print '(a,i2,a,f8.5,a,f7.4)', 'step ', step, '  loss ', loss, '  grad norm ', norm
  end do
  if (rank == 0) print '(a,f8.5,a,f8.5,a,i0,a,i0,a,i0)', 'loss ', first_loss, ' -> ', loss, &
    ' over ', STEPS, ' steps on ', world, ' ranks, F = ', factor

  if (len_trim(save_path) > 0) then
    write (loss_text, '(f10.6)') loss
    call fsdp_check(fsdp_checkpoint_save(ctx, trim(save_path), opt, &
                                         metadata_keys=['loss '], &
                                         metadata_values=[adjustl(loss_text)]))
    if (rank == 0) print '(a,a,a,i0,a)', 'saved ', trim(save_path), ' on ', world, ' ranks'
  end if
  call fsdp_check(fsdp_optimizer_destroy(opt(1)))
  call fsdp_check(fsdp_finalize(ctx))
  ! Fresh: the loss falls by half. Resumed: it starts near the saved loss and does not rise.
  if (len_trim(resume_path) > 0) then
    ok = first_loss < 2 * saved_loss + 1e-3 .and. loss <= first_loss * 1.5
  else
    ok = loss < 0.5 * first_loss
  end if
  if (rank == 0 .and. .not. ok) print '(a)', 'the loss did not behave: training is broken'
  ! The main program's arrays are not freed by its end (leak checkers would rightly say so).
  if (allocated(w)) deallocate (w, b)
  if (allocated(gw)) deallocate (gw, gb)
  if (allocated(target_values)) deallocate (target_values)
  call MPI_Finalize(ierr)
  if (.not. ok) error stop 1

contains

  ! Unshards layer l and converts its bfloat16 weight and bias into w(in, out), b(out).
  subroutine layer_params(l)
    integer, intent(in) :: l
    type(c_ptr) :: pw, pb
    if (allocated(w)) deallocate (w, b)
    allocate (w(widths(l - 1), widths(l)), b(widths(l)))
    call fsdp_check(fsdp_unshard(units(l)))
    call fsdp_check(fsdp_param_data(units(l), 0, pw))
    call fsdp_check(fsdp_param_data(units(l), 1, pb))
    call fsdp_check(fsdp_convert(c_loc(w), FSDP_FLOAT32, pw, FSDP_BFLOAT16, size(w, kind=c_size_t)))
    call fsdp_check(fsdp_convert(c_loc(b), FSDP_FLOAT32, pb, FSDP_BFLOAT16, size(b, kind=c_size_t)))
  end subroutine

  ! xorshift64* in [-1, 1), bit for bit the C example's generator.
  function uniform(s) result(u)
    integer(kind=8), intent(inout) :: s
    real(c_float) :: u
    s = ieor(s, shiftr(s, 12))
    s = ieor(s, shiftl(s, 25))
    s = ieor(s, shiftr(s, 27))
    u = real(top24_of_product(s), c_float) / real(2**23, c_float) - 1
  end function

  ! Bits 40..63 of s * 2685821657736338717 modulo 2^64, as C's unsigned multiply gives them.
  ! Fortran integers are signed and overflowing them is not allowed, so the product is built from
  ! 32-bit halves whose partial products all fit.
  function top24_of_product(s) result(top)
    integer(kind=8), intent(in) :: s
    integer(kind=8) :: top, a_lo, a_hi, low, mid
    integer(kind=8), parameter :: mask32 = 4294967295_8
    integer(kind=8), parameter :: b_lo = 1332534557_8, b_hi = 625341585_8  ! the multiplier's halves
    a_lo = iand(s, mask32)
    a_hi = shiftr(s, 32)
    low = a_lo * b_lo                                             ! < 2^63
    mid = iand(iand(a_hi * b_lo, mask32) + iand(a_lo * b_hi, mask32), mask32)
    top = shiftr(iand(shiftr(low, 32) + mid, mask32), 8)          ! bits 32..63, then 40..63
  end function

  ! The C example's synthetic task: targets from a fixed random teacher on random inputs.
  subroutine make_batch(rank, index, x, t)
    integer, intent(in) :: rank, index
    real(c_float), intent(out) :: x(:, :), t(:, :)
    real(c_float) :: teacher(16, 4)
    integer(kind=8) :: s, ts
    integer :: n, i, o
    s = ieor(int(z'9e3779b97f4a7c15', 8), int(rank, 8) * 1000003_8 + index + 1)
    s = ieor(s, shiftl(s, 7))
    ts = 12345
    do o = 1, 4
      do i = 1, 16
        teacher(i, o) = uniform(ts) * 0.5
      end do
    end do
    do n = 1, BATCH
      do i = 1, widths(0)
        x(i, n) = uniform(s)
      end do
      do o = 1, widths(LAYERS)
        t(o, n) = sin(sum(teacher(:, o) * x(:, n)))
      end do
    end do
  end subroutine
end program mlp
