// Where a plan's model comes from (doc/planning.md): a layout JSON written for the planner, a
// Hugging Face config.json of a GPT-2 or Llama-style decoder, or a libfsdp checkpoint. Each
// returns the units a job would create, parameters described as fsdp_unit_create takes them
// (stored in float32 or float64; a job's param_dtype says what they compute in), with nothing
// allocated. A file that cannot be a model is fail(Errc::Format) (Errc::Unsupported for a
// config.json of an architecture not understood here), the message naming the file and the field.
#pragma once

#include <string>

#include "plan/plan_model.hpp"

namespace fsdp::plan {

// The planner's layout JSON, `text` read from `where`:
//   {"units": [{"name": "block.0",
//               "params": [{"name": "w", "shape": [4, 8], "dtype": "float32",
//                           "requires_grad": true}],
//               "ties": [{"alias": "head.weight", "owner_unit": "embed",
//                         "owner_param": "embed.weight"}]}]}
// dtype defaults to float32 and requires_grad to true; owner_unit and owner_param are an index
// or a name.
PlanModel model_from_layout_json(const std::string& text, const std::string& where);

// A Hugging Face config.json (`text` read from `where`) of model_type gpt2, llama, mistral or
// qwen2, wrapped one unit per decoder block plus a root unit (embeddings, final norm and the
// output head, or a tie to the embedding when tie_word_embeddings), with transformers' own
// parameter names and shapes for its *ForCausalLM model. Fills PlanModel::transformer.
PlanModel model_from_hf_config(const std::string& text, const std::string& where);

// The units of a libfsdp checkpoint, as its /layout recorded them at save, with the shapes and
// dtypes of its datasets. A checkpoint does not record which parameters were frozen: every
// parameter reads as trainable. Errors as the checkpoint reader's (Io, Format, Version, Corrupt).
// Reads with HDF5: the caller holds ckpt::hdf5_mutex(), as the C API's checkpoint calls do.
PlanModel model_from_checkpoint(const std::string& path);

}  // namespace fsdp::plan
