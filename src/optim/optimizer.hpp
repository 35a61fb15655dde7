// Sharded optimizers (ZeRO-3: each rank updates only its shard, with state for its shard only):
// SGD with momentum, dampening, Nesterov and weight decay, and AdamW with bias correction,
// decoupled weight decay and AMSGrad; either may maximize. State is in the master shard's dtype
// (float32 under mixed precision) and covers the trainable section only, so frozen parameters cost
// none.
//
// Hyperparameter groups are addressed by original parameter name (glob patterns) although shards
// cut across parameters: each unit's shard is split into segments, one per parameter slice, each
// updated with its parameter's group.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "optim/hyperparams.hpp"

namespace fsdp {

class Context;
class Unit;

// "sgd" or "adamw", as checkpoints name the kind.
inline const char* kind_name(OptimizerKind k) {
  return k == OptimizerKind::AdamW ? "adamw" : "sgd";
}

// Throws InvalidArgument naming `who` and the field for a value the kind cannot use.
void validate(const HyperParams& h, OptimizerKind kind, const std::string& who);

// The state buffers an optimizer of `kind` keeps per unit, in buffer order, by PyTorch's state
// names: SGD "momentum"; AdamW "exp_avg", "exp_avg_sq", and "max_exp_avg_sq" when `amsgrad`
// (a group has or had amsgrad on: Optimizer::state_names).
std::vector<std::string> state_names(OptimizerKind kind, bool amsgrad);
// Every state buffer a kind may keep, in buffer order: `kept_when` names the hyperparameter that
// must be (or have been) on for the buffer to exist (AdamW's max_exp_avg_sq: "amsgrad"), nullptr
// for a buffer always kept once the parameter has state.
struct StateBuffer {
  const char* name;
  const char* kept_when;
};
const std::vector<StateBuffer>& state_buffers(OptimizerKind kind);
// How many of state_buffers(kind), from the first, an optimizer allocates for each unit it steps
// (each the size of the unit's gradient shard): SGD its momentum buffer only when a group has
// momentum (without momentum the update needs no state); AdamW both moments, and max_exp_avg_sq
// once a group has or had amsgrad.
int kept_state_buffers(OptimizerKind kind, bool any_momentum, bool amsgrad);

// What a kind's update reads: its hyperparameters (fsdp_hyperparams_t's field names), and
// whether it reads the update count itself (AdamW's bias correction) or only whether it is 0
// (SGD: the momentum buffer restarts from the gradient at 0 and continues after).
struct KindReads {
  std::vector<const char*> hyperparams;
  bool step_count = false;
};
const KindReads& kind_reads(OptimizerKind kind);

class Optimizer {
 public:
  // Local. The units must belong to `ctx` and be distinct; they cannot be destroyed while the
  // optimizer lives.
  Optimizer(Context& ctx, uint64_t id, OptimizerKind kind, const HyperParams& defaults,
            std::vector<Unit*> units);
  ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  uint64_t id() const { return id_; }
  std::string label() const { return "optimizer " + std::to_string(id_); }
  OptimizerKind kind() const { return kind_; }
  Context& context() const { return ctx_; }
  const std::vector<Unit*>& units() const { return units_; }
  int num_groups() const { return static_cast<int>(groups_.size()); }
  const HyperParams& group(int g) const { return groups_[static_cast<std::size_t>(g)].params; }

  // A group for the parameters whose name matches `pattern` (fnmatch) and no earlier group's;
  // returns how many parameters it took. Group 0 holds the defaults.
  int add_group(const std::string& pattern, const HyperParams& h);
  void set_hyperparams(int group, const HyperParams& h);
  // One update of every unit whose gradient shard holds a gradient (units whose gradient was
  // zeroed and not reduced since are skipped, like parameters whose grad is None in PyTorch),
  // except its parameters marked without a gradient (Unit::set_grad_none): their state, step
  // count and weight decay stay as they are, as torch.optim leaves a parameter whose grad is
  // None.
  void step();
  // Refuses (Errc::State, naming the unit) what a step cannot take: a gradient written through
  // fsdp_grad_data that no reduction took, and, when `for_update`, an unsharded unit. Called
  // before anything changes, so a refused step (or unscale) changes nothing.
  void check_steppable(bool for_update) const;
  void zero_grad();
  // Updates made to `unit` so far: its parameters' largest count.
  int64_t steps(const Unit& unit) const;
  // Updates made to parameter i of `unit` (the bias-correction step t; less than the unit's when
  // the parameter was skipped without a gradient).
  int64_t steps(const Unit& unit, std::size_t i) const;

  // ---- For checkpoints ----
  const std::string& pattern(int group) const {
    return groups_[static_cast<std::size_t>(group)].pattern;
  }
  // This optimizer's state buffers: state_names(kind, amsgrad) with amsgrad on once any group had
  // it (as PyTorch keeps max_exp_avg_sq in a parameter's state once created, used or not). Buffer
  // b of `unit` covers its gradient shard, or is nullptr while not allocated.
  std::vector<std::string> state_names() const { return fsdp::state_names(kind_, amsgrad_state_); }
  static int max_state_buffers(OptimizerKind kind) { return kind == OptimizerKind::AdamW ? 3 : 1; }
  void* state(const Unit& unit, int b) const;
  // Allocates buffer b (zeros) if needed; counted as optimizer state.
  void* ensure_state(const Unit& unit, int b);
  // Restores the update count of every parameter of `unit`, or of parameter i; the momentum
  // buffer then continues rather than restarts (a count of 0 restarts it).
  void set_steps(const Unit& unit, int64_t steps);
  void set_steps(const Unit& unit, std::size_t i, int64_t steps);

 private:
  // A trainable parameter's part of this rank's gradient shard (not empty).
  struct Slot {
    std::size_t param = 0;
    std::size_t offset = 0, length = 0;  // inside the gradient shard (the update range)
    int group = 0;
  };
  struct UnitState {
    Unit* unit = nullptr;
    std::vector<Slot> slots;  // in shard order
    void* state[3] = {};      // SGD: momentum; AdamW: exp_avg, exp_avg_sq, max_exp_avg_sq
    // Per parameter of the unit (frozen ones stay 0): updates made, and (SGD) whether its
    // momentum starts as the gradient at the next update (PyTorch's momentum_buffer None).
    std::vector<int64_t> steps;
    std::vector<uint8_t> momentum_fresh;
  };
  struct Group {
    std::string pattern;  // "" for the defaults
    HyperParams params;
  };

  int group_of(const std::string& name) const;
  void keep_hyperparams(int group, const HyperParams& h);
  void assign_slots();
  // The kind's update of `length` elements at `offset` of the shard, with one group, count and
  // momentum start.
  void update(UnitState& s, void* grad, std::size_t offset, std::size_t length, int group,
              int64_t steps, bool fresh);
  int state_buffers() const;
  void allocate_state(UnitState& s);
  void allocate_buffer(UnitState& s, int b);
  UnitState& state_of(const Unit& unit);
  const UnitState& state_of(const Unit& unit) const;
  void step_unit(UnitState& s, void* grad);

  Context& ctx_;
  const uint64_t id_;
  const OptimizerKind kind_;
  std::vector<Group> groups_;
  bool amsgrad_state_ = false;  // a group has had amsgrad on: max_exp_avg_sq is state
  std::vector<Unit*> units_;
  std::vector<UnitState> states_;
};

}  // namespace fsdp
