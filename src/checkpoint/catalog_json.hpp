// A checkpoint's catalog as JSON (fsdp_checkpoint_describe): what a program reading or converting
// a checkpoint needs to know before it loads it (parameter names, shapes and dtypes, optimizers
// with their hyperparameters and per-parameter step counts, the scaler, the metadata). The
// fields come from the schema's tables (checkpoint/schema.hpp), in their order.
#pragma once

#include <string>

#include "checkpoint/catalog.hpp"

namespace fsdp::ckpt {

std::string catalog_json(const Catalog& c);

}  // namespace fsdp::ckpt
