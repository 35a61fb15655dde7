// C entry points for checkpoints: argument checks, then the collective work in
// checkpoint/checkpoint_service.
#include <set>
#include <string>

#include "base/agreement.hpp"
#include "capi/arguments.hpp"
#include "capi/calls.hpp"
#include "capi/entry_bodies.hpp"
#include "capi/guard.hpp"
#include "capi/handles.hpp"
#include "capi/sized_struct.hpp"
#include "checkpoint/catalog_json.hpp"
#include "checkpoint/catalog_reader.hpp"
#include "checkpoint/checkpoint_service.hpp"
#include "checkpoint/h5util.hpp"

using fsdp::Errc;
using fsdp::Error;
using fsdp::fail;

namespace {

constexpr unsigned kAllLoadFlags =
    FSDP_LOAD_PARTIAL | FSDP_LOAD_MODEL_ONLY | FSDP_LOAD_CONVERT_DTYPE;

fsdp_checkpoint_options_t read_options(const fsdp_checkpoint_options_t* in) {
  const fsdp_checkpoint_options_t defaults = FSDP_CHECKPOINT_OPTIONS_INIT;
  return in ? fsdp::capi::read_sized(*in, defaults, "options", "FSDP_CHECKPOINT_OPTIONS_INIT")
            : defaults;
}

std::string read_path(const char* path) {
  if (!path) fail(Errc::InvalidArgument, "path: NULL");
  if (!*path) fail(Errc::InvalidArgument, "path: empty");
  return path;
}

// Optimizers and scaler must be live handles of `c`.
void read_state_handles(fsdp::Context& c, const fsdp_checkpoint_options_t& o,
                        std::vector<fsdp::Optimizer*>& optimizers, fsdp::GradScaler*& scaler) {
  if (o.noptimizers < 0)
    fail(Errc::InvalidArgument, "options->noptimizers = " + std::to_string(o.noptimizers));
  if (o.noptimizers > 0 && !o.optimizers)
    fail(Errc::InvalidArgument, "options->optimizers: NULL with noptimizers > 0");
  std::set<fsdp::Optimizer*> seen;
  for (int i = 0; i < o.noptimizers; ++i) {
    const std::string arg = "options->optimizers[" + std::to_string(i) + "]";
    fsdp::Optimizer& opt = fsdp::capi::optimizer_from(o.optimizers[i], arg.c_str());
    if (&opt.context() != &c) fail(Errc::InvalidArgument, arg + ": belongs to another context");
    if (!seen.insert(&opt).second) fail(Errc::InvalidArgument, arg + ": listed twice");
    optimizers.push_back(&opt);
  }
  if (o.grad_scaler) {
    scaler = &fsdp::capi::grad_scaler_from(o.grad_scaler, "options->grad_scaler");
    if (&scaler->context() != &c)
      fail(Errc::InvalidArgument, "options->grad_scaler: belongs to another context");
  }
}

fsdp::ckpt::SaveRequest read_save(fsdp::Context& c, const char* path,
                                  const fsdp_checkpoint_options_t* options) {
  fsdp::ckpt::SaveRequest r;
  r.path = read_path(path);
  const fsdp_checkpoint_options_t o = read_options(options);
  read_state_handles(c, o, r.optimizers, r.scaler);
  if (o.nmetadata < 0)
    fail(Errc::InvalidArgument, "options->nmetadata = " + std::to_string(o.nmetadata));
  if (o.nmetadata > 0 && (!o.metadata_keys || !o.metadata_values))
    fail(Errc::InvalidArgument, "options->metadata_keys/values: NULL with nmetadata > 0");
  std::set<std::string> keys;
  for (int i = 0; i < o.nmetadata; ++i) {
    const std::string arg = "options->metadata_keys[" + std::to_string(i) + "]";
    if (!o.metadata_keys[i] || !*o.metadata_keys[i])
      fail(Errc::InvalidArgument, arg + ": NULL or empty");
    if (!o.metadata_values[i])
      fail(Errc::InvalidArgument, "options->metadata_values[" + std::to_string(i) + "]: NULL");
    if (!keys.insert(o.metadata_keys[i]).second)
      fail(Errc::InvalidArgument, arg + " = '" + o.metadata_keys[i] + "': given twice");
    r.metadata.emplace_back(o.metadata_keys[i], o.metadata_values[i]);
  }
  return r;
}

}  // namespace

namespace fsdp::capi::body {

void fsdp_checkpoint_save(fsdp::Context& c, const char* path,
                          const fsdp_checkpoint_options_t* options) {
  std::optional<Error> local;
  fsdp::ckpt::SaveRequest r;
  local = fsdp::attempt([&] { r = read_save(c, path, options); });
  fsdp::ckpt::CheckpointService::of(c).save(r, local);
}

void fsdp_checkpoint_save_async(std::optional<fsdp::Error> local, fsdp::Context& c,
                                const char* path, const fsdp_checkpoint_options_t* options,
                                fsdp_request_t* req) {
  fsdp::ckpt::SaveRequest r;
  if (!local) local = fsdp::attempt([&] { r = read_save(c, path, options); });
  auto task = fsdp::ckpt::CheckpointService::of(c).save_async(r, local);
  fsdp::Request& request = c.scheduler().add_request(std::move(task));
  fsdp::capi::register_request(&request);
  *req = fsdp::capi::to_handle(&request);
}

void fsdp_test(fsdp::Request& r, int* done) {
  *done = !r.task || r.task->done() ? 1 : 0;
}

void fsdp_checkpoint_load(fsdp::Context& c, const char* path,
                          const fsdp_checkpoint_options_t* options,
                          fsdp_checkpoint_report_t* report) {
  std::optional<Error> local;
  fsdp::ckpt::LoadRequest r;
  local = fsdp::attempt([&] {
    r.path = read_path(path);
    const fsdp_checkpoint_options_t o = read_options(options);
    read_state_handles(c, o, r.optimizers, r.scaler);
    if (o.load_flags & ~kAllLoadFlags)
      fail(Errc::InvalidArgument,
           "options->load_flags = " + std::to_string(o.load_flags) + ": unknown flag bits");
    r.partial = o.load_flags & FSDP_LOAD_PARTIAL;
    r.model_only = o.load_flags & FSDP_LOAD_MODEL_ONLY;
    r.convert = o.load_flags & FSDP_LOAD_CONVERT_DTYPE;
    if (report && report->size < sizeof(size_t))
      fail(Errc::InvalidArgument, "report->size: set it to sizeof(fsdp_checkpoint_report_t)");
  });
  static thread_local std::string details;  // the report's text lives until the next load
  fsdp::ckpt::LoadReport rep = fsdp::ckpt::CheckpointService::of(c).load(r, local);
  details = std::move(rep.details);
  if (report) {
    fsdp_checkpoint_report_t out{};
    out.loaded = rep.loaded, out.missing = rep.missing, out.unexpected = rep.unexpected;
    out.mismatched = rep.mismatched, out.details = details.c_str();
    fsdp::capi::write_sized(report, out, "report");
  }
}

void fsdp_checkpoint_metadata(const char* path, const char* key, char* value, size_t capacity,
                              size_t* length) {
  const std::string p = read_path(path);
  if (!key) fail(Errc::InvalidArgument, "key: NULL");
  std::vector<std::pair<std::string, std::string>> metadata;
  {
    std::lock_guard<std::mutex> lock(fsdp::ckpt::hdf5_mutex());
    metadata = fsdp::ckpt::read_metadata(p);
  }
  for (const auto& [k, v] : metadata) {
    if (k != key) continue;
    if (value && capacity < v.size() + 1)
      fail(Errc::InvalidArgument, "capacity = " + std::to_string(capacity) + ": the value of '" +
                                      k + "' needs " + std::to_string(v.size() + 1) + " bytes");
    if (value) std::memcpy(value, v.c_str(), v.size() + 1);
    if (length) *length = v.size();
    return;
  }
  fail(Errc::OutOfRange, "key = '" + std::string(key) + "': no such metadata in '" + p + "'");
}

void fsdp_checkpoint_describe(const char* path, char* json, size_t capacity, size_t* length) {
  const std::string p = read_path(path);
  fsdp::ckpt::Catalog catalog;
  {
    std::lock_guard<std::mutex> lock(fsdp::ckpt::hdf5_mutex());
    catalog = fsdp::ckpt::read_catalog(p);
  }
  const std::string text = fsdp::ckpt::catalog_json(catalog);
  if (json && capacity < text.size() + 1)
    fail(Errc::InvalidArgument, "capacity = " + std::to_string(capacity) +
                                    ": the description of '" + p + "' needs " +
                                    std::to_string(text.size() + 1) + " bytes");
  if (json) std::memcpy(json, text.c_str(), text.size() + 1);
  if (length) *length = text.size();
}

}  // namespace fsdp::capi::body
