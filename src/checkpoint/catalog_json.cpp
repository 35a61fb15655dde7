#include "checkpoint/catalog_json.hpp"

#include <cmath>
#include <cstdio>

#include "checkpoint/json_text.hpp"

namespace fsdp::ckpt {

namespace {

// Shortest text that reads back as the same double; JSON has no NaN or infinity: null.
std::string number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string shape(const std::vector<int64_t>& dims) {
  std::string out = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) out += (i ? "," : "") + std::to_string(dims[i]);
  return out + "]";
}

std::string group_json(const OptimizerGroupInfo& g) {
  return "{\"pattern\":" + json_quote(g.pattern) + ",\"lr\":" + number(g.lr) +
         ",\"weight_decay\":" + number(g.weight_decay) + ",\"momentum\":" + number(g.momentum) +
         ",\"dampening\":" + number(g.dampening) +
         ",\"nesterov\":" + (g.nesterov ? "true" : "false") + ",\"beta1\":" + number(g.beta1) +
         ",\"beta2\":" + number(g.beta2) + ",\"eps\":" + number(g.eps) + "}";
}

std::string optimizer_json(const OptimizerInfo& o) {
  std::string out = "{\"kind\":" + json_quote(o.kind) + ",\"groups\":[";
  for (std::size_t g = 0; g < o.groups.size(); ++g) out += (g ? "," : "") + group_json(o.groups[g]);
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
  std::string out = "{\"format_version\":" + std::to_string(c.format_version) +
                    ",\"library_version\":" + json_quote(c.library_version) +
                    ",\"strategy\":" + json_quote(c.strategy) +
                    ",\"created\":" + json_quote(c.created) +
                    ",\"world_size\":" + std::to_string(c.world_size) +
                    ",\"sharding_factor\":" + std::to_string(c.sharding_factor) + ",\"params\":[";
  for (std::size_t i = 0; i < c.model.size(); ++i) {
    const DatasetInfo& d = c.model[i];
    out += std::string(i ? "," : "") + "{\"name\":" + json_quote(d.name) + ",\"dtype\":\"" +
           dtype_name(d.dtype) + "\",\"shape\":" + shape(d.shape) + "}";
  }
  out += "],\"optimizers\":[";
  for (std::size_t k = 0; k < c.optimizers.size(); ++k)
    out += (k ? "," : "") + optimizer_json(c.optimizers[k]);
  out += "],\"grad_scaler\":";
  if (c.scaler.present)
    out += "{\"scale\":" + number(c.scaler.scale) +
           ",\"growth_factor\":" + number(c.scaler.growth_factor) +
           ",\"backoff_factor\":" + number(c.scaler.backoff_factor) +
           ",\"growth_interval\":" + std::to_string(c.scaler.growth_interval) +
           ",\"growth_tracker\":" + std::to_string(c.scaler.growth_tracker) + "}";
  else
    out += "null";
  out += ",\"metadata\":{";
  for (std::size_t i = 0; i < c.metadata.size(); ++i)
    out +=
        (i ? "," : "") + json_quote(c.metadata[i].first) + ":" + json_quote(c.metadata[i].second);
  return out + "}}";
}

}  // namespace fsdp::ckpt
