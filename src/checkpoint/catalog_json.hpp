// A checkpoint's catalog as JSON (fsdp_checkpoint_describe): what a program reading or converting
// a checkpoint needs to know before it loads it (parameter names, shapes and dtypes, optimizers
// with their hyperparameters and per-parameter step counts, the scaler, the metadata). The
// fields come from the schema's tables (checkpoint/schema.hpp), in their order.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "checkpoint/catalog.hpp"
#include "checkpoint/json_text.hpp"
#include "checkpoint/schema.hpp"

namespace fsdp::ckpt {

std::string catalog_json(const Catalog& c);

// One value as JSON, by its type. Doubles: the shortest text that reads back as the same
// double; JSON has no NaN or infinity: null.
template <class T>
std::string json_value(const T& v) {
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
std::string json_members(const Table<S>& table, const S& s) {
  std::string out;
  for (const Field<S>& f : table) {
    if (f.json != Json::Described) continue;
    out += (out.empty() ? "" : ",") + json_quote(f.name) + ":" +
           std::visit([&](auto m) { return json_value(s.*m); }, f.member);
  }
  return out;
}

// The fields of `table` whose values differ between a and b, each as "name: A vs B" (values as
// JSON writes them): what fsdp-ckpt diff reports of hyperparameters, the scaler and the root.
template <class S>
std::vector<std::string> differing_fields(const Table<S>& table, const S& a, const S& b) {
  std::vector<std::string> out;
  for (const Field<S>& f : table)
    std::visit(
        [&](auto m) {
          if (!(a.*m == b.*m))
            out.push_back(std::string(f.name) + ": " + json_value(a.*m) + " vs " +
                          json_value(b.*m));
        },
        f.member);
  return out;
}

}  // namespace fsdp::ckpt
