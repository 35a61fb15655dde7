// What a layer above core keeps per context (the optimizers and grad scalers of optim/, the
// checkpoint service of checkpoint/): the context holds it without knowing its type and ends it
// with itself, each slot at its point of the teardown (Context::~Context), so core includes
// nothing from those layers.
#pragma once

namespace fsdp {

// In teardown order: a background checkpoint save ends before anything else goes; optimizers and
// grad scalers after the operations in flight completed and before the units they use.
enum class PartSlot : int { Checkpoints = 0, Optimizers = 1 };
constexpr int kPartSlots = 2;

class ContextPart {
 public:
  virtual ~ContextPart() = default;
};

}  // namespace fsdp
