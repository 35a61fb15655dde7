#include "checkpoint/schema.hpp"

#include "checkpoint/names.hpp"

namespace fsdp::ckpt {

// ---- The tables: one row per field ----
// A new field: its member in the struct, then its row here, marked since("<version>") unless
// every file already has it. The encodings (catalog_attrs, catalog_wire, catalog_json) and the
// load, which hands OptimizerGroupInfo back to the optimizer as HyperParams, need no change.

const Table<RootInfo>& root_fields() {
  static const Table<RootInfo> t = {
      {kFormatVersionAttr, &RootInfo::format_version},
      {"library_version", &RootInfo::library_version},
      {"world_size", &RootInfo::world_size},
      {"sharding_factor", &RootInfo::sharding_factor},
      {"strategy", &RootInfo::strategy},
      {"created", &RootInfo::created},
      {"num_units", &RootInfo::num_units, kInformative},
  };
  return t;
}

const Table<OptimizerInfo>& optimizer_fields() {
  static const Table<OptimizerInfo> t = {
      {"kind", &OptimizerInfo::kind},
  };
  return t;
}

// Every group stores every hyperparameter, whichever kind reads it: the optimizer's table
// (optim/hyperparams.hpp), each field required unless a later version added it.
const Table<OptimizerGroupInfo>& optimizer_group_fields() {
  static const Table<OptimizerGroupInfo> t = [] {
    Table<OptimizerGroupInfo> fields = {{"pattern", &OptimizerGroupInfo::pattern}};
    for (const HyperParamField& h : hyperparam_fields()) {
      const Presence p = h.since ? since(h.since) : kRequired;
      if (h.real)
        fields.emplace_back(h.name, h.real, p);
      else
        fields.emplace_back(h.name, h.flag, p);
    }
    return fields;
  }();
  return t;
}

const Table<ScalerInfo>& scaler_fields() {
  static const Table<ScalerInfo> t = {
      {"scale", &ScalerInfo::scale},
      {"growth_factor", &ScalerInfo::growth_factor},
      {"backoff_factor", &ScalerInfo::backoff_factor},
      {"growth_interval", &ScalerInfo::growth_interval},
      {"growth_tracker", &ScalerInfo::growth_tracker},
  };
  return t;
}

// A dataset's dtype and shape are its HDF5 type and dataspace, its offset is where HDF5 put it,
// its checksum and step its "crc32c" and "step" attributes (or its /index row).
const Table<DatasetInfo>& dataset_fields() {
  static const Table<DatasetInfo> t = {
      {"name", &DatasetInfo::name},
      {"dtype", &DatasetInfo::dtype},
      {"shape", &DatasetInfo::shape},
      {"numel", &DatasetInfo::numel, kRequired, Json::Hidden},
      {"crc32c", &DatasetInfo::crc, kRequired, Json::Hidden},
      {"offset", &DatasetInfo::offset, kRequired, Json::Hidden},
      {"step", &DatasetInfo::step, kRequired, Json::Hidden},
  };
  return t;
}

// ---- Derived from the tables ----

// A kind's state buffers are the optimizer's (fsdp::state_buffers): a file may hold every buffer
// the kind can keep; those kept only under a hyperparameter (amsgrad's max_exp_avg_sq) may be
// absent. An unknown kind keeps none.
namespace {
const std::vector<StateBuffer>& buffers_of(const std::string& kind) {
  static const std::vector<StateBuffer> none;
  for (OptimizerKind k : {OptimizerKind::Sgd, OptimizerKind::AdamW})
    if (kind == kind_name(k)) return fsdp::state_buffers(k);
  return none;
}
}  // namespace

std::vector<std::string> state_names(const std::string& kind) {
  std::vector<std::string> names;
  for (const StateBuffer& b : buffers_of(kind)) names.emplace_back(b.name);
  return names;
}

bool state_optional(const std::string& kind, std::size_t b) {
  const std::vector<StateBuffer>& buffers = buffers_of(kind);
  return b < buffers.size() && buffers[b].kept_when;
}

}  // namespace fsdp::ckpt
