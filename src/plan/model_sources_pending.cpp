// TEMPORARY (plan-core's branch only; the lead deletes this file at the merge): the model sources
// are helper plan-inputs' (plan/model_sources.cpp). These stand in so that this branch links.
#include "base/error.hpp"
#include "plan/model_sources.hpp"

namespace fsdp::plan {

PlanModel model_from_layout_json(const std::string&, const std::string& where) {
  fail(Errc::Unsupported, where + ": model sources are not in this build yet");
}
PlanModel model_from_hf_config(const std::string&, const std::string& where) {
  fail(Errc::Unsupported, where + ": model sources are not in this build yet");
}
PlanModel model_from_checkpoint(const std::string& path) {
  fail(Errc::Unsupported, path + ": model sources are not in this build yet");
}

}  // namespace fsdp::plan
