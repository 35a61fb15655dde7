// A unit: one flat parameter (paper, section "FlatParameter"). Holds this rank's parameter shard
// and gradient shard; borrows an unsharded parameter buffer from the pool between unshard and
// reshard, and a full gradient buffer between the first grad_data and reduce_grads.
#pragma once

#include <cstdint>
#include <string>

#include "core/buffer_pool.hpp"
#include "core/flat_layout.hpp"

namespace fsdp {

class Context;

class Unit {
 public:
  // Not collective: Context::create_unit does the cross-rank check first.
  Unit(Context& ctx, uint64_t id, FlatLayout layout, const void* const* initial_values);
  ~Unit();
  Unit(const Unit&) = delete;
  Unit& operator=(const Unit&) = delete;

  uint64_t id() const { return id_; }
  std::string label() const { return "unit " + std::to_string(id_); }
  const FlatLayout& layout() const { return layout_; }
  Context& context() const { return ctx_; }
  bool is_unsharded() const { return static_cast<bool>(unsharded_); }

  void unshard();  // collective over the shard group
  void reshard();
  void* param_data(std::size_t i) const;
  void* grad_data(std::size_t i);
  void reduce_grads();  // collective over the shard and replicate groups
  void zero_grads();

  void* shard_data() const { return shard_; }
  void* shard_grad();  // the caller's view: zeros are written here if the shard is marked zero
  ShardSlice slice(std::size_t i) const;

 private:
  std::size_t shard_bytes() const { return layout_.shard_numel() * layout_.element_size(); }
  std::size_t padded_bytes() const { return layout_.padded_numel() * layout_.element_size(); }
  char* element(void* base, std::size_t i) const;
  void* grad_shard_storage();  // allocated, contents meaningful only if !grad_shard_is_zero_

  Context& ctx_;
  const uint64_t id_;
  const FlatLayout layout_;
  const int shard_rank_;
  void* shard_ = nullptr;
  void* grad_shard_ = nullptr;  // allocated on first use: frozen or inference units never pay
  // The gradient shard is zero without its memory saying so (fresh, or after zero_grads, like
  // PyTorch's set_to_none): the next reduce assigns instead of reading and adding, which saves
  // two passes over the shard per step (the zeroing and the read).
  bool grad_shard_is_zero_ = true;
  BufferPool::Lease unsharded_;  // the all-gather's output while unsharded
  BufferPool::Lease full_grad_;  // the caller's full gradient while one is being written
};

}  // namespace fsdp
