// The checkpoint file format, version 1 (doc/checkpoint-format.md), as code outside checkpoint/
// (fsdp-ckpt, the C API, the fuzz and unit tests) uses it: its names, its catalog, its schema
// and the schema's attribute encoding, reading a catalog and broadcasting one. Code inside
// checkpoint/ includes the part it needs.
#pragma once

#include "checkpoint/catalog.hpp"
#include "checkpoint/catalog_attrs.hpp"
#include "checkpoint/catalog_reader.hpp"
#include "checkpoint/catalog_wire.hpp"
#include "checkpoint/names.hpp"
#include "checkpoint/schema.hpp"
