// The catalog as bytes, to broadcast the one rank 0 read (checkpoint/from_rank0.hpp). Every
// field comes from the schema's tables (checkpoint/schema.hpp): a field added there travels.
#pragma once

#include <vector>

#include "checkpoint/catalog.hpp"

namespace fsdp::ckpt {

std::vector<char> serialize(const Catalog& c);
// Errc::Internal when the bytes end early (not a message serialize made).
Catalog deserialize(const std::vector<char>& bytes);

}  // namespace fsdp::ckpt
