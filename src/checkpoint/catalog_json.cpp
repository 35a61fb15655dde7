#include "checkpoint/catalog_json.hpp"

#include <cmath>
#include <cstdio>
#include <type_traits>

#include "checkpoint/json_text.hpp"
#include "checkpoint/schema.hpp"

namespace fsdp::ckpt {

namespace {

// One field, by its type. Doubles: the shortest text that reads back as the same double; JSON
// has no NaN or infinity: null.
template <class T>
std::string value(const T& v) {
  if constexpr (std::is_same_v<T, double>) {
    if (!std::isfinite(v)) return "null";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
  } else if constexpr (std::is_same_v<T, bool>) {
    return v ? "true" : "false";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return json_quote(v);
  } else if constexpr (std::is_same_v<T, DType>) {
    return json_quote(dtype_name(v));
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
    return out + "]";
  } else {
    return std::to_string(v);
  }
}

// `s`'s described fields as JSON members: "name":value,...
template <class S>
std::string members(const Table<S>& table, const S& s) {
  std::string out;
  for (const Field<S>& f : table) {
    if (f.json != Json::Described) continue;
    out += (out.empty() ? "" : ",") + json_quote(f.name) + ":" +
           std::visit([&](auto m) { return value(s.*m); }, f.member);
  }
  return out;
}

std::string optimizer_json(const OptimizerInfo& o) {
  std::string out = "{" + members(optimizer_fields(), o) + ",\"groups\":[";
  for (std::size_t g = 0; g < o.groups.size(); ++g)
    out += (g ? ",{" : "{") + members(optimizer_group_fields(), o.groups[g]) + "}";
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
  std::string out = "{" + members(root_fields(), static_cast<const RootInfo&>(c)) + ",\"params\":[";
  for (std::size_t i = 0; i < c.model.size(); ++i)
    out += (i ? ",{" : "{") + members(dataset_fields(), c.model[i]) + "}";
  out += "],\"optimizers\":[";
  for (std::size_t k = 0; k < c.optimizers.size(); ++k)
    out += (k ? "," : "") + optimizer_json(c.optimizers[k]);
  out += "],\"grad_scaler\":";
  out += c.scaler.present ? "{" + members(scaler_fields(), c.scaler) + "}" : "null";
  out += ",\"metadata\":{";
  for (std::size_t i = 0; i < c.metadata.size(); ++i)
    out +=
        (i ? "," : "") + json_quote(c.metadata[i].first) + ":" + json_quote(c.metadata[i].second);
  return out + "}}";
}

}  // namespace fsdp::ckpt
