// The checkpoint schema: every value a file stores besides the datasets' data (the root's
// attributes, each optimizer's kind, hyperparameter groups and state groups, the grad scaler),
// and every field the catalog broadcast carries, described once, as one table of fields per
// group. Which group sits under which is checkpoint/nesting.hpp's. The tables drive every
// encoding of those values:
//   - the attributes a save writes and a load reads (catalog_attrs.hpp);
//   - the broadcast of the catalog from rank 0 to the others (catalog_wire.cpp);
//   - the JSON of fsdp_checkpoint_describe (catalog_json.cpp).
// Adding a value to the format is one row here (plus the code that uses it). Hyperparameters are
// the optimizer's own table (fsdp::hyperparam_fields): AdamW's amsgrad is its row
// {"amsgrad", ..., "0.10"}, which optimizer_group_fields() reads as since("0.10"). State buffers
// are the optimizer's own list (fsdp::state_names): its new buffer max_exp_avg_sq needed no change
// here.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "checkpoint/catalog.hpp"

namespace fsdp::ckpt {

// Whether a file must have a field. A field added to the format after 0.7 names the first
// libfsdp version that writes it: older files lack it and read the in-memory struct's default.
struct Presence {
  bool required;
  const char* since;  // nullptr: every version of the format has it
};
constexpr Presence kRequired{true, nullptr};      // a file without it is refused (Errc::Format)
constexpr Presence kInformative{false, nullptr};  // written always, never needed to load
constexpr Presence since(const char* version) {
  return {false, version};
}

// Whether a field appears in fsdp_checkpoint_describe's JSON (every field is broadcast).
enum class Json { Described, Hidden };

// One field of a group: its name (the attribute's name in the file and the key in JSON) and the
// member of the in-memory struct S that holds it. The member's type is its type everywhere:
//   double        float64 attribute; JSON number (17 significant digits, null if not finite)
//   int64_t       int64 attribute; JSON integer
//   bool          int64 attribute, 0 or 1; JSON true/false
//   std::string   fixed-length UTF-8 string attribute; JSON string
//   uint32/64, DType, shape   datasets' own fields, not attributes (broadcast and JSON only)
template <class S>
struct Field {
  using Member = std::variant<double S::*, int64_t S::*, bool S::*, std::string S::*, uint32_t S::*,
                              uint64_t S::*, DType S::*, std::vector<int64_t> S::*>;
  // `member` may be a member of a base of S (OptimizerGroupInfo's HyperParams).
  template <class T, class Base>
  Field(const char* field_name, T Base::*m, Presence p = kRequired, Json in_json = Json::Described)
      : name(field_name), member(static_cast<T S::*>(m)), presence(p), json(in_json) {}

  const char* name;
  Member member;
  Presence presence;
  Json json;
};

template <class S>
using Table = std::vector<Field<S>>;

// The tables (schema.cpp), in the order the file, the broadcast and the JSON list them.
const Table<RootInfo>& root_fields();                       // attributes of "/"
const Table<OptimizerInfo>& optimizer_fields();             // of "/optimizers/<k>"
const Table<OptimizerGroupInfo>& optimizer_group_fields();  // of "/optimizers/<k>/groups/<g>"
const Table<ScalerInfo>& scaler_fields();                   // of "/grad_scaler"
const Table<DatasetInfo>& dataset_fields();                 // a dataset's catalog entry

// The state buffers a file may hold for a kind, in buffer order (the optimizer's state_names with
// every optional buffer: "sgd": momentum; "adamw": exp_avg, exp_avg_sq, max_exp_avg_sq); empty
// for an unknown kind. The group /optimizers/<k>/<name> holds one dataset per parameter with state.
std::vector<std::string> state_names(const std::string& optimizer_kind);
// Whether buffer b of the kind is kept only under some hyperparameters (amsgrad), so that a file
// may hold it for none of a unit's parameters.
bool state_optional(const std::string& optimizer_kind, std::size_t b);

}  // namespace fsdp::ckpt
