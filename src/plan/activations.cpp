#include "plan/activations.hpp"

#include <cstdint>
#include <limits>
#include <string>

#include "base/error.hpp"

namespace fsdp::plan {
namespace {

using Wide = unsigned __int128;

std::size_t narrow(Wide v, const char* what) {
  if (v > std::numeric_limits<std::size_t>::max())
    fail(Errc::InvalidArgument, std::string(what) + ": activation bytes beyond size_t");
  return static_cast<std::size_t>(v);
}

}  // namespace

int job_sequence(const PlanModel& model, const PlanJob& job) {
  const std::string field = "job->sequence_length = " + std::to_string(job.sequence);
  if (job.sequence < 0) fail(Errc::InvalidArgument, field + ": must be >= 0 (0: the model's)");
  const int max = model.transformer ? model.transformer->max_sequence : 0;
  if (job.sequence == 0) {
    if (max <= 0)
      fail(Errc::InvalidArgument,
           field + ": the model has no maximum sequence length (not from a config.json): give one");
    return max;
  }
  if (max > 0 && job.sequence > max)
    fail(Errc::InvalidArgument,
         field + ": above the model's maximum sequence length " + std::to_string(max));
  return job.sequence;
}

ActivationPlan plan_activations(const PlanModel& model, const PlanJob& job, DType element) {
  if (job.batch < 1)
    fail(Errc::InvalidArgument,
         "job->batch_size = " + std::to_string(job.batch) + ": must be >= 1");
  ActivationPlan a;
  const std::optional<TransformerShape>& shape = model.transformer;
  const int sequence = shape || job.sequence != 0 ? job_sequence(model, job) : 0;
  a.layers = shape ? shape->layers : static_cast<int>(model.units.size());
  if (!shape && job.activation_bytes_per_layer == 0) return a;
  if (!shape && job.activation_checkpointing)
    fail(Errc::InvalidArgument,
         "job->activation_checkpointing = 1: the model has no hidden size (not from a "
         "config.json), so the layers' kept inputs cannot be sized");
  const Wide layers = static_cast<Wide>(a.layers);
  Wide kept_input = 0;  // e s b h: what a checkpointed layer keeps
  if (shape) {
    const Wide s = static_cast<Wide>(sequence), b = static_cast<Wide>(job.batch);
    const Wide h = static_cast<Wide>(shape->hidden), f = static_cast<Wide>(shape->ffn);
    const Wide heads = static_cast<Wide>(shape->heads), e = dtype_size(element);
    kept_input = e * s * b * h;
    const Wide scores = heads * s * s * b;  // attention scores, per layer
    a.per_layer = narrow(e * (8 * s * b * h + 2 * s * b * f + 2 * scores) + 2 * s * b * h + scores,
                         "job->sequence_length, job->batch_size");
    a.estimated = true;
  }
  if (job.activation_bytes_per_layer != 0) {
    a.per_layer = job.activation_bytes_per_layer;
    a.estimated = false;
  }
  const Wide total = job.activation_checkpointing ? layers * kept_input + a.per_layer
                                                  : layers * static_cast<Wide>(a.per_layer);
  a.bytes = narrow(total, "job->batch_size, job->sequence_length");
  return a;
}

}  // namespace fsdp::plan
