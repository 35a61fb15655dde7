// Fuzz target: the planner's model sources from text (plan/model_sources.hpp) and, through them,
// the library's JSON reader (base/json_reader.hpp). Input: one byte choosing the source (even: a
// layout JSON, odd: a Hugging Face config.json), then the file's text. Besides crashes, it checks
// what the readers promise of a model they accept: at least one unit, every unit with parameters
// of positive extents whose numel is their product, unique names and one dtype per unit, float32
// or float64, ties inside the model to a unit other than their own that has no ties itself. Any
// exception other than fsdp::Error(Format or Unsupported) is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "base/error.hpp"
#include "plan/model_sources.hpp"

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz_plan_model: accepted model breaks a promise: %s\n", what);
  std::abort();
}

void check_accepted(const fsdp::plan::PlanModel& m) {
  if (m.units.empty()) broken("no units");
  for (const auto& u : m.units) {
    if (u.params.empty()) broken("a unit without parameters");
    std::set<std::string> names;
    for (const fsdp::ParamSpec& p : u.params) {
      unsigned __int128 n = 1;
      for (int64_t e : p.shape) {
        if (e <= 0) broken("an extent not positive");
        n *= static_cast<uint64_t>(e);
        if (n > (uint64_t(1) << 59)) broken("a parameter of more than 2^59 elements");
      }
      if (n != p.numel) broken("numel is not the product of the extents");
      if (!names.insert(p.name).second) broken("a name twice in a unit");
      if (p.dtype != u.params[0].dtype || !fsdp::dtype_storable(p.dtype))
        broken("dtypes mixed or not storable");
    }
    for (const auto& t : u.ties) {
      if (t.owner_unit >= m.units.size() || &m.units[t.owner_unit] == &u) broken("a tie's owner");
      if (t.owner_param >= m.units[t.owner_unit].params.size()) broken("a tie's parameter");
      if (!m.units[t.owner_unit].ties.empty()) broken("a tie to a unit with ties");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    check_accepted(data[0] % 2 ? fsdp::plan::model_from_hf_config(text, "config.json")
                               : fsdp::plan::model_from_layout_json(text, "model.json"));
  } catch (const fsdp::Error& e) {
    if (e.code() != fsdp::Errc::Format && e.code() != fsdp::Errc::Unsupported)
      broken("an error other than Format or Unsupported");
  }
  return 0;
}
