// The checkpoint file format, version 1 (doc/checkpoint-format.md), in one include: its names,
// its catalog, its schema and the schema's attribute encoding, reading a catalog and broadcasting
// one. Included by the fuzz target, the schema test and a few checkpoint/ files that use most of
// it; other code includes the part it needs. fsdp-ckpt reaches the format through the C API only.
#pragma once

#include "checkpoint/catalog.hpp"
#include "checkpoint/catalog_attrs.hpp"
#include "checkpoint/catalog_reader.hpp"
#include "checkpoint/catalog_wire.hpp"
#include "checkpoint/names.hpp"
#include "checkpoint/schema.hpp"
