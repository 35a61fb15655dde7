// The schema's attribute encoding (checkpoint/schema.hpp): the groups and attributes a save
// creates (through writer.hpp's plan) and a load reads back (catalog_reader.hpp), the groups as
// checkpoint/nesting.hpp nests them, each group's attributes from its table. A field the file lacks
// reads as the struct's default when its row allows it (Presence), else it is refused naming the
// field.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "checkpoint/catalog.hpp"
#include "checkpoint/h5util.hpp"
#include "checkpoint/schema.hpp"
#include "checkpoint/writer.hpp"

namespace fsdp::ckpt {

// A struct's fields as the attributes a save writes.
template <class S>
std::vector<Attr> to_attrs(const Table<S>& table, const S& s) {
  std::vector<Attr> attrs;
  for (const Field<S>& f : table) {
    std::visit(
        [&](auto m) {
          using T = std::decay_t<decltype(s.*m)>;
          if constexpr (std::is_same_v<T, double>)
            attrs.push_back(Attr::f64(f.name, s.*m));
          else if constexpr (std::is_same_v<T, int64_t>)
            attrs.push_back(Attr::i64(f.name, s.*m));
          else if constexpr (std::is_same_v<T, bool>)
            attrs.push_back(Attr::i64(f.name, s.*m ? 1 : 0));
          else if constexpr (std::is_same_v<T, std::string>)
            attrs.push_back(Attr::str(f.name, s.*m));
          else
            fail(Errc::Internal, std::string("checkpoint schema: '") + f.name +
                                     "' is a dataset's field, not an attribute");
        },
        f.member);
  }
  return attrs;
}

// Reads the fields into `s` from an object's attributes; `where` names the object in errors.
template <class S>
void read_attrs(hid_t obj, const Table<S>& table, S& s, const std::string& where) {
  for (const Field<S>& f : table) {
    if (!f.presence.required && !has_attr(obj, f.name)) continue;  // keeps s's default
    std::visit(
        [&](auto m) {
          using T = std::decay_t<decltype(s.*m)>;
          if constexpr (std::is_same_v<T, double>)
            s.*m = read_attr_f64(obj, f.name, where);
          else if constexpr (std::is_same_v<T, int64_t>)
            s.*m = read_attr_i64(obj, f.name, where);
          else if constexpr (std::is_same_v<T, bool>)
            s.*m = read_attr_i64(obj, f.name, where) != 0;
          else if constexpr (std::is_same_v<T, std::string>)
            s.*m = read_attr_string(obj, f.name, where);
          else
            fail(Errc::Internal, std::string("checkpoint schema: '") + f.name +
                                     "' is a dataset's field, not an attribute");
        },
        f.member);
  }
}

// The root attributes a save by this library writes.
// `created`: utc_timestamp() of rank 0.
RootInfo this_library_root(int64_t world_size, int64_t sharding_factor, const std::string& strategy,
                           const std::string& created, int64_t num_units);

// Every group of the file with its attributes, in creation order (checkpoint/nesting.hpp): "/",
// /model, /optimizers, each optimizer with its hyperparameter groups and (empty) state groups,
// /grad_scaler when present, /metadata. `c`'s dataset lists are not used.
std::vector<GroupSpec> attribute_groups(const Catalog& c);

// The counterpart for a file being read (after its format and version were checked): every
// group's attributes into `c` (the root's, the optimizers with their groups, the scaler, the
// metadata), each optimizer's state lists sized, not filled. `file_name` names the file (and
// its root) in errors.
void read_attribute_groups(hid_t file, const std::string& file_name, Catalog& c);
// The /metadata group alone.
std::vector<std::pair<std::string, std::string>> read_metadata_group(hid_t file);

}  // namespace fsdp::ckpt
