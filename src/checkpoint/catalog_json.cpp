#include "checkpoint/catalog_json.hpp"

#include "checkpoint/json_text.hpp"
#include "checkpoint/nesting.hpp"

namespace fsdp::ckpt {

namespace {

// The catalog as one JSON object, a member a group (its key the nesting's), the fields of a
// group inside its object.
struct JsonOut : Writing {
  std::string out = "{";

  // A comma unless the member or element is the first of its object or array.
  void next() {
    if (out.back() != '{' && out.back() != '[' && out.back() != ':') out += ',';
  }
  void key(const Node& n) {
    if (n.json) next(), out += json_quote(n.json) + ":";
  }
  template <class S>
  void fields(const Node&, const Table<S>& table, const S& s) {
    const std::string members = json_members(table, s);
    if (!members.empty()) next(), out += members;
  }
  void datasets(const Node& n, const std::vector<DatasetInfo>& list) {
    key(n);
    const bool steps = n.form == DatasetsJson::Steps;
    out += steps ? "{" : "[";
    for (const DatasetInfo& d : list) {
      next();
      out += steps ? json_quote(d.name) + ":{\"step\":" + std::to_string(d.step) + "}"
                   : "{" + json_members(dataset_fields(), d) + "}";
    }
    out += steps ? "}" : "]";
  }
  template <class T, class F>
  void list(const Node& n, const Count&, const std::vector<T>& items, F&& each) {
    key(n);
    out += "[";
    for (std::size_t i = 0; i < items.size(); ++i)
      next(), out += "{", each(items[i], i), out += "}";
    out += "]";
  }
  template <class F>
  void by_name(const Node& n, const std::vector<std::string>& names,
               const std::vector<std::vector<DatasetInfo>>& lists, F&& each) {
    key(n);
    out += "{";
    Writing::by_name(n, names, lists, each);
    out += "}";
  }
  template <class F>
  void optional(const Node& n, bool present, F&& body) {
    key(n);
    if (!present) return void(out += "null");
    out += "{";
    body();
    out += "}";
  }
  void strings(const Node& n, const std::vector<std::pair<std::string, std::string>>& kv) {
    key(n);
    out += "{";
    for (const auto& [k, v] : kv) next(), out += json_quote(k) + ":" + json_quote(v);
    out += "}";
  }
};

}  // namespace

std::string catalog_json(const Catalog& c) {
  JsonOut j;
  walk_catalog(j, c);
  return j.out + "}";
}

}  // namespace fsdp::ckpt
