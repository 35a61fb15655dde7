#include "checkpoint/catalog_json.hpp"

#include "checkpoint/json_text.hpp"

namespace fsdp::ckpt {

namespace {

std::string optimizer_json(const OptimizerInfo& o) {
  std::string out = "{" + json_members(optimizer_fields(), o) + ",\"groups\":[";
  for (std::size_t g = 0; g < o.groups.size(); ++g)
    out += (g ? ",{" : "{") + json_members(optimizer_group_fields(), o.groups[g]) + "}";
  out += "],\"state\":{";
  const std::vector<std::string> names = state_names(o.kind);
  for (std::size_t k = 0; k < o.states.size() && k < names.size(); ++k) {
    out += (k ? "," : "") + json_quote(names[k]) + ":{";
    for (std::size_t i = 0; i < o.states[k].size(); ++i)
      out += (i ? "," : "") + json_quote(o.states[k][i].name) +
             ":{\"step\":" + std::to_string(o.states[k][i].step) + "}";
    out += "}";
  }
  return out + "}}";
}

}  // namespace

std::string catalog_json(const Catalog& c) {
  std::string out =
      "{" + json_members(root_fields(), static_cast<const RootInfo&>(c)) + ",\"params\":[";
  for (std::size_t i = 0; i < c.model.size(); ++i)
    out += (i ? ",{" : "{") + json_members(dataset_fields(), c.model[i]) + "}";
  out += "],\"optimizers\":[";
  for (std::size_t k = 0; k < c.optimizers.size(); ++k)
    out += (k ? "," : "") + optimizer_json(c.optimizers[k]);
  out += "],\"grad_scaler\":";
  out += c.scaler.present ? "{" + json_members(scaler_fields(), c.scaler) + "}" : "null";
  out += ",\"metadata\":{";
  for (std::size_t i = 0; i < c.metadata.size(); ++i)
    out +=
        (i ? "," : "") + json_quote(c.metadata[i].first) + ":" + json_quote(c.metadata[i].second);
  return out + "}}";
}

}  // namespace fsdp::ckpt
