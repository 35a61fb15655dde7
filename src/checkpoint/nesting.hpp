// The checkpoint's group nesting, described once: which group sits under which, what each holds,
// how many of a kind there are and where that count is kept, whether a file may lack it, and its
// key in fsdp_checkpoint_describe's JSON. walk_catalog below is that table, one call a group,
// and every encoding of a catalog iterates it:
//   - the groups and attributes a save creates and a load reads (catalog_attrs.cpp);
//   - the groups a load reads the datasets of (catalog_reader.cpp);
//   - the broadcast of the catalog from rank 0 (catalog_wire.cpp);
//   - the JSON (catalog_json.cpp).
// What a group's attributes are is its schema table (schema.hpp); the names are names.hpp's.
//
//   group in the file                 holds                                  JSON key
//   /                                 RootInfo (root_fields)                 (the object)
//   /model                            a dataset a parameter                  "params"
//   /optimizers      [count]          absent when there is no optimizer     "optimizers"
//     /optimizers/<k> [num_groups]    OptimizerInfo (optimizer_fields)
//       /optimizers/<k>/groups/<g>    OptimizerGroupInfo (at least one)      "groups"
//       /optimizers/<k>/<state>       a dataset a parameter with that state  "state": {<state>: }
//                                     (state_names(kind); older files may lack an optional one)
//   /grad_scaler                      ScalerInfo; absent when there is none  "grad_scaler" (null)
//   /metadata                         one string attribute a key             "metadata"
//
// An encoding is a class with these members, called by the walk in the order above (T is S, or
// const S when the walk is given a const Catalog):
//   fields(node, table, T& s)           a group's attributes, the fields of its schema table
//   datasets(node, list)                a group of datasets (its DatasetInfo list)
//   list(node, count, items, each)      groups counted by an attribute; each(item, i) walks one
//   by_name(node, names, lists, each)   a dataset group a name; each(list, b) walks names[b]'s
//   optional(node, present, body)       a group there may not be; body() walks it
//   strings(node, pairs)                a group of string attributes
// Encodings that write what a catalog holds derive from Writing (below), which walks what is
// there; those that read derive from Reading, which sizes the lists as they go.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "checkpoint/catalog.hpp"
#include "checkpoint/names.hpp"
#include "checkpoint/schema.hpp"

namespace fsdp::ckpt {

// How a group's datasets appear in JSON: each dataset's described fields in an array (the
// parameters), or an object of each dataset's step by name (an optimizer state).
enum class DatasetsJson { Fields, Steps };

// One group of the nesting.
struct Node {
  std::string path;    // the group in the file (a by_name node: the group its groups are under)
  const char* json;    // its key in its parent's JSON object; nullptr: the root, a list's element
  bool may_be_absent;  // a file may lack it: the list it holds is empty, the value is not there
  DatasetsJson form = DatasetsJson::Fields;
};

// The attribute that says how many groups a list holds, and how many a load accepts.
struct Count {
  std::string holder;  // the group the attribute is on: the list's own, or its parent
  const char* attr;
  int64_t min, max;
};

// The nesting, walked with an encoding `v` over a Catalog or a const Catalog `c`.
template <class V, class C>
void walk_catalog(V& v, C& c) {
  using Root = std::conditional_t<std::is_const_v<C>, const RootInfo, RootInfo>;
  constexpr int64_t kMost = 100000;  // more optimizers or groups than this: a damaged file
  v.fields(Node{"/", nullptr, false}, root_fields(), static_cast<Root&>(c));
  v.datasets(Node{kModelGroup, "params", false}, c.model);
  v.list(Node{kOptimizersGroup, "optimizers", true}, Count{kOptimizersGroup, kCountAttr, 0, kMost},
         c.optimizers, [&](auto& o, std::size_t k) {
           const std::string path = optimizer_path(k);
           v.fields(Node{path, nullptr, false}, optimizer_fields(), o);
           v.list(Node{path + "/groups", "groups", false}, Count{path, kNumGroupsAttr, 1, kMost},
                  o.groups, [&](auto& g, std::size_t i) {
                    v.fields(Node{optimizer_group_path(k, i), nullptr, false},
                             optimizer_group_fields(), g);
                  });
           const std::vector<std::string> names = state_names(o.kind);
           v.by_name(Node{path, "state", false}, names, o.states, [&](auto& list, std::size_t b) {
             v.datasets(Node{state_path(k, names[b]), names[b].c_str(), true, DatasetsJson::Steps},
                        list);
           });
         });
  v.optional(Node{kScalerGroup, "grad_scaler", true}, c.scaler.present, [&] {
    v.fields(Node{kScalerGroup, nullptr, true}, scaler_fields(), c.scaler);
  });
  v.strings(Node{kMetadataGroup, "metadata", true}, c.metadata);
}

// The iteration of an encoding that writes (or looks at) what a catalog holds: every item of a
// list, every name of a kind's states, the optional group when it is present. A const catalog may
// lack the state lists (a save describes its groups before it has datasets): a name without one
// is walked with an empty list. The encoding adds what it writes around each (a count, a brace)
// and the members it does not take from here.
struct Writing {
  template <class Items, class F>
  void list(const Node&, const Count&, Items& items, F&& each) {
    for (std::size_t i = 0; i < items.size(); ++i) each(items[i], i);
  }
  template <class Lists, class F>
  void by_name(const Node&, const std::vector<std::string>& names, Lists& lists, F&& each) {
    static const std::vector<DatasetInfo> none;
    for (std::size_t b = 0; b < names.size(); ++b) {
      if (b < lists.size())
        each(lists[b], b);
      else if constexpr (std::is_const_v<Lists>)
        each(none, b);
    }
  }
  template <class F>
  void optional(const Node&, bool present, F&& body) {
    if (present) body();
  }
};

// The iteration of an encoding that reads into a catalog: a list sized to the length the
// encoding read, a kind's state lists one a name, each then walked.
struct Reading {
  template <class T, class F>
  static void sized(std::vector<T>& items, std::size_t n, F&& each) {
    items.resize(n);
    for (std::size_t i = 0; i < n; ++i) each(items[i], i);
  }
  template <class F>
  void by_name(const Node&, const std::vector<std::string>& names,
               std::vector<std::vector<DatasetInfo>>& lists, F&& each) {
    sized(lists, names.size(), each);
  }
};

}  // namespace fsdp::ckpt
