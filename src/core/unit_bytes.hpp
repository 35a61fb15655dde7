// The bytes of each buffer a unit holds or borrows, from its layout and precision alone: what the
// unit allocates and accounts, and what the planner (plan/memory_plan.hpp) predicts without a unit.
#pragma once

#include <cstddef>

#include "core/flat_layout.hpp"
#include "core/precision.hpp"

namespace fsdp {

struct UnitBytes {
  const FlatLayout& layout;
  const Precision& precision;

  // HFSDP under mixed precision (param_dtype not the storage dtype) splits the masters from the
  // shard: each rank keeps its block of the trainable section in param_dtype (what the shard
  // group's all-gather sends) and the master copy of its update range alone (1/(F*N), storage
  // dtype), as Megatron-FSDP does. Else the shard is the master copy, in the storage dtype.
  bool split_masters() const {
    return layout.update_pieces() > 1 && precision.param != precision.storage;
  }
  // The master copy, storage dtype elements at the shard's start: this rank's whole shard, or
  // (split) its master piece followed by its block of the frozen section.
  std::size_t master_numel() const {
    return split_masters()
               ? layout.grad_shard_numel() + layout.section(SectionKind::Frozen).shard_numel
               : layout.shard_numel();
  }
  std::size_t masters() const { return master_numel() * layout.element_size(); }
  // This rank's shard in fsdp.h's layout (storage dtype, each section's block): the shard itself
  // unless split, else what initialization writes and fsdp_gather_params assembles.
  std::size_t layout_shard() const { return layout.shard_numel() * layout.element_size(); }
  // Where each section's block starts in the shard (bytes), and its dtype: the trainable block
  // after the master copy when split.
  std::size_t block_offset(SectionKind k) const {
    if (split_masters())
      return k == SectionKind::Trainable ? masters()
                                         : layout.grad_shard_numel() * layout.element_size();
    return layout.section(k).shard_base * layout.element_size();
  }
  DType block_dtype(SectionKind k) const {
    return split_masters() && k == SectionKind::Trainable ? precision.param : precision.storage;
  }
  // The parameter shard: the master copy, and when split the trainable block in param_dtype.
  std::size_t shard() const { return masters() + (split_masters() ? trainable_shard() : 0); }
  // The gradient shard (this rank's update range of the trainable section), in the storage
  // dtype; each optimizer state buffer is as large.
  std::size_t grad_shard() const { return layout.grad_shard_numel() * layout.element_size(); }
  // The unsharded parameters (padded), in param_dtype: what an all-gather fills.
  std::size_t unsharded() const { return layout.padded_numel() * dtype_size(precision.param); }
  // The caller's full gradient (trainable section, padded), in param_dtype.
  std::size_t full_grad() const { return layout.grad_padded_numel() * dtype_size(precision.param); }
  // The full gradient in reduce_dtype: what a reduce-scatter reduces (a copy when reduce_dtype is
  // not param_dtype).
  std::size_t reduce_input() const {
    return layout.grad_padded_numel() * dtype_size(precision.reduce);
  }
  // Hybrid sharding: the shard group's partial sum, in reduce_dtype, all-reduced over replicas
  // (reduce-scattered across them with HFSDP).
  std::size_t replica_sum() const {
    return layout.trainable_shard_numel() * dtype_size(precision.reduce);
  }
  // The scratch that holds it; with HFSDP one more piece after it, the reduce-scatter's output.
  std::size_t partial_sum() const {
    const std::size_t piece = layout.update_pieces() > 1 ? layout.grad_shard_numel() : 0;
    return replica_sum() + piece * dtype_size(precision.reduce);
  }
  // HFSDP: the trainable block of the shard (in its dtype) that the all-gather across replicas
  // after a step brings up to date.
  std::size_t trainable_shard() const {
    return layout.trainable_shard_numel() * dtype_size(block_dtype(SectionKind::Trainable));
  }
  // The parameters without sharding or padding (one replica, storage dtype).
  std::size_t model() const { return layout.numel() * layout.element_size(); }
};

}  // namespace fsdp
