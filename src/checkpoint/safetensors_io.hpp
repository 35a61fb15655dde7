// Interchange with the safetensors format: a checkpoint's parameters exported to one
// `.safetensors` file or to Hugging Face's sharded layout (`model-0000k-of-0000n.safetensors`
// plus `model.safetensors.index.json`), and either imported into a new checkpoint. Collective
// over a communicator: each rank reads and writes a share of every tensor, so no rank holds a
// whole tensor and memory stays bounded (16 MiB chunks) whatever the model's size.
//
// Export verifies every dataset's CRC-32C while it reads and writes nothing in place of `out`
// unless all of them hold (temporary files, renamed at the end). Import checks every header and
// the index (a shard it names must exist and hold the tensors named for it; sizes must match the
// file) before anything is written, and writes the checkpoint as a save does (tmp + rename), so
// an existing checkpoint at `out` is intact after any error.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>

#include "base/dtype.hpp"

namespace fsdp::ckpt {

struct SafetensorsOptions {
  // Export: the tensors' dtype in the output (none: each parameter's own). Import: the
  // checkpoint's dtype, float32 or float64 (none: float64 stays, everything else becomes float32).
  std::optional<DType> dtype;
  // Export only. 0: one file at `out`. Otherwise `out` is a directory (created if absent) that
  // receives shards of at most this many bytes of tensor data each (a larger tensor gets a shard
  // of its own), as Hugging Face's save_pretrained(max_shard_size=...) writes them: one shard is
  // `model.safetensors` alone, several are `model-0000k-of-0000n.safetensors` and
  // `model.safetensors.index.json`.
  uint64_t max_shard_bytes = 0;
};

void export_safetensors(MPI_Comm comm, const std::string& checkpoint, const std::string& out,
                        const SafetensorsOptions& options);

// `in`: a `.safetensors` file, a `model.safetensors.index.json`, or a directory holding either.
void import_safetensors(MPI_Comm comm, const std::string& in, const std::string& out,
                        const SafetensorsOptions& options);

}  // namespace fsdp::ckpt
