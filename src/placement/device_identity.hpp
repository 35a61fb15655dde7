// Which GPU a rank uses, as something two ranks can compare: the device's UUID (the same GPU has
// the same UUID whatever CUDA_VISIBLE_DEVICES makes its ordinal; with one GPU per rank every rank
// sees ordinal 0 of a different device).
#pragma once

#include <array>
#include <utility>
#include <vector>

#include "base/group.hpp"

namespace fsdp {

using DeviceUuid = std::array<unsigned char, 16>;

// The first two ranks (indices into `all`) that name the same device, or {-1, -1}.
std::pair<int, int> first_pair_sharing(const std::vector<DeviceUuid>& all);

// Collective over `world`: the first two world ranks that use the same device, or {-1, -1}.
std::pair<int, int> ranks_sharing_a_device(const Group& world, const DeviceUuid& mine);

}  // namespace fsdp
