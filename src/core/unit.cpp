#include "core/unit.hpp"

#include "core/context.hpp"
#include "core/error.hpp"

namespace fsdp {

Unit::Unit(Context& ctx, uint64_t id, FlatLayout layout, const void* const* initial_values)
    : ctx_(ctx), id_(id), layout_(std::move(layout)), shard_rank_(ctx.groups().shard().rank) {
  const std::size_t esize = layout_.element_size();
  shard_ = ctx_.memory().allocate(shard_bytes());
  ctx_.accounting().add(MemoryKind::Shard, shard_bytes());
  ctx_.memory().zero(shard_, shard_bytes());  // padding, and parameters given no values
  if (!initial_values) return;
  for (std::size_t i = 0; i < layout_.num_params(); ++i) {
    const ShardSlice s = layout_.slice(i, shard_rank_);
    if (initial_values[i] && s.length)
      ctx_.memory().copy(element(shard_, s.shard_offset),
                         static_cast<const char*>(initial_values[i]) + s.param_offset * esize,
                         s.length * esize);
  }
}

Unit::~Unit() {
  unsharded_.reset();
  full_grad_.reset();
  ctx_.memory().deallocate(shard_, shard_bytes());
  ctx_.accounting().sub(MemoryKind::Shard, shard_bytes());
  if (grad_shard_) {
    ctx_.memory().deallocate(grad_shard_, shard_bytes());
    ctx_.accounting().sub(MemoryKind::GradShard, shard_bytes());
  }
}

char* Unit::element(void* base, std::size_t i) const {
  return static_cast<char*>(base) + i * layout_.element_size();
}

void Unit::unshard() {
  if (unsharded_) fail(Errc::State, label() + " is already unsharded (call fsdp_reshard first)");
  BufferPool::Lease full = ctx_.pool().acquire(padded_bytes());
  ctx_.transport().all_gather(shard_, full.data(), layout_.shard_numel(), layout_.dtype(),
                              ctx_.groups().shard());
  unsharded_ = std::move(full);  // only now: a failed all-gather leaves the unit sharded
}

void Unit::reshard() {
  if (!unsharded_) fail(Errc::State, label() + " is not unsharded (call fsdp_unshard first)");
  unsharded_.reset();
}

void* Unit::param_data(std::size_t i) const {
  if (!unsharded_)
    fail(Errc::State, label() +
                          " is sharded: parameters are readable only between fsdp_unshard "
                          "and fsdp_reshard");
  return element(unsharded_.data(), layout_.flat_offset(i));
}

void* Unit::grad_data(std::size_t i) {
  if (!full_grad_) {
    BufferPool::Lease g = ctx_.pool().acquire(padded_bytes());
    ctx_.memory().zero(g.data(), padded_bytes());  // unwritten parameters and padding add zero
    full_grad_ = std::move(g);
  }
  return element(full_grad_.data(), layout_.flat_offset(i));
}

void* Unit::grad_shard_storage() {
  if (!grad_shard_) {
    grad_shard_ = ctx_.memory().allocate(shard_bytes());
    ctx_.accounting().add(MemoryKind::GradShard, shard_bytes());
    grad_shard_is_zero_ = true;
  }
  return grad_shard_;
}

void* Unit::shard_grad() {
  void* g = grad_shard_storage();
  if (grad_shard_is_zero_) {
    ctx_.memory().zero(g, shard_bytes());
    grad_shard_is_zero_ = false;  // the caller may write through the pointer from now on
  }
  return g;
}

void Unit::reduce_grads() {
  if (!full_grad_)
    fail(Errc::State,
         label() + " has no gradient to reduce: write it through fsdp_grad_data first");
  void* out = grad_shard_storage();
  const Store store = grad_shard_is_zero_ ? Store::Assign : Store::Accumulate;
  const ProcessGroups& groups = ctx_.groups();
  const double divisor = ctx_.options().grad_reduction == GradReduction::Mean
                             ? static_cast<double>(groups.world().size)
                             : 1.0;
  const std::size_t n = layout_.shard_numel();
  const DType t = layout_.dtype();
  if (groups.replicate().size == 1) {
    ctx_.transport().reduce_scatter(full_grad_.data(), n, t, groups.shard(), {out, divisor, store});
  } else {
    // Hybrid: the shard group's sum, then the sum over replicas, then one division by W.
    void* partial = ctx_.partial_sums().get(shard_bytes());
    ctx_.transport().reduce_scatter(full_grad_.data(), n, t, groups.shard(),
                                    {partial, 1.0, Store::Assign});
    ctx_.transport().all_reduce(partial, n, t, groups.replicate());
    ctx_.memory().scaled(out, partial, n, t, divisor, store);
  }
  grad_shard_is_zero_ = false;
  full_grad_.reset();
}

void Unit::zero_grads() {
  grad_shard_is_zero_ = true;
  if (full_grad_) ctx_.memory().zero(full_grad_.data(), padded_bytes());
}

ShardSlice Unit::slice(std::size_t i) const {
  return layout_.slice(i, shard_rank_);
}

}  // namespace fsdp
