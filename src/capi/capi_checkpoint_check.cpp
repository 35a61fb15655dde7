// fsdp_checkpoint_verify and fsdp_checkpoint_diff (and their _fcomm twins): the C face of
// checkpoint/verify and checkpoint/compare (fsdp-ckpt verify and diff call them).
#include <string>
#include <vector>

#include "base/agreement.hpp"
#include "base/fingerprint.hpp"
#include "base/group.hpp"
#include "base/mpi_check.hpp"
#include "capi/arguments.hpp"
#include "capi/guard.hpp"
#include "capi/mpi_args.hpp"
#include "capi/sized_struct.hpp"
#include "checkpoint/compare.hpp"
#include "checkpoint/verify.hpp"
#include "fsdp.h"

using fsdp::Errc;
using fsdp::fail;

namespace {

struct Request {
  std::vector<std::string> paths;
  fsdp_checkpoint_check_options_t options = FSDP_CHECKPOINT_CHECK_OPTIONS_INIT;
};

// MPI_Comm_f2c needs MPI initialized: without it, MPI_COMM_NULL, which the checks then report.
MPI_Comm from_fortran(int fcomm) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized ? MPI_Comm_f2c(static_cast<MPI_Fint>(fcomm)) : MPI_COMM_NULL;
}

// Checks the arguments on this rank, then agrees on them (the same paths and options on every
// rank, or FSDP_ERR_MISMATCH) over a duplicate of `comm` whose errors return; runs `body` there
// and stores its answer in *result.
template <class Body>
void collective(MPI_Comm comm, std::vector<std::pair<const char*, const char*>> paths,
                const fsdp_checkpoint_check_options_t* options, int* result, const char* result_arg,
                Body&& body) {
  fsdp::capi::require_usable_mpi(comm);
  Request r;
  std::optional<fsdp::Error> local = fsdp::attempt([&] {
    for (const auto& [arg, p] : paths) {
      if (!p) fail(Errc::InvalidArgument, std::string(arg) + ": NULL");
      if (!*p) fail(Errc::InvalidArgument, std::string(arg) + ": empty");
      r.paths.emplace_back(p);
    }
    if (options)
      r.options = fsdp::capi::read_sized(*options, r.options, "options",
                                         "FSDP_CHECKPOINT_CHECK_OPTIONS_INIT");
    if (r.options.model_only != 0 && r.options.model_only != 1)
      fail(Errc::InvalidArgument,
           "options->model_only = " + std::to_string(r.options.model_only) + ": expected 0 or 1");
    fsdp::capi::require_output(result, result_arg);
  });
  fsdp::Group g = fsdp::capi::duplicate_caller_comm(comm);
  try {
    fsdp::Fingerprint f;
    for (const auto& p : r.paths) f.add(p);
    f.add(static_cast<uint64_t>(r.options.model_only));
    fsdp::agree(g, "checkpoint check arguments", f.value(), local);
    fsdp::ckpt::ReportSink sink;
    const fsdp_checkpoint_check_options_t o = r.options;
    if (o.report) sink.line = [o](const std::string& line) { o.report(line.c_str(), o.user); };
    if (o.progress)
      sink.progress = [o](uint64_t done, uint64_t total) { o.progress(done, total, o.user); };
    const int answer = body(g.comm, r, sink) ? 1 : 0;
    *result = answer;
  } catch (...) {
    fsdp::free_group(g);
    throw;
  }
  fsdp::free_group(g);
}

fsdp_status_t verify(const char* call, MPI_Comm comm, const char* path,
                     const fsdp_checkpoint_check_options_t* options, int* failed) {
  return fsdp::capi::guard(call, [&] {
    collective(comm, {{"path", path}}, options, failed, "failed",
               [](MPI_Comm c, const Request& r, const fsdp::ckpt::ReportSink& sink) {
                 return !fsdp::ckpt::verify_checkpoint(c, r.paths[0], sink);
               });
  });
}

fsdp_status_t diff(const char* call, MPI_Comm comm, const char* a, const char* b,
                   const fsdp_checkpoint_check_options_t* options, int* differ) {
  return fsdp::capi::guard(call, [&] {
    collective(comm, {{"a", a}, {"b", b}}, options, differ, "differ",
               [](MPI_Comm c, const Request& r, const fsdp::ckpt::ReportSink& sink) {
                 return fsdp::ckpt::checkpoints_differ(c, r.paths[0], r.paths[1],
                                                       r.options.model_only != 0, sink);
               });
  });
}

}  // namespace

extern "C" {

fsdp_status_t fsdp_checkpoint_verify(MPI_Comm comm, const char* path,
                                     const fsdp_checkpoint_check_options_t* options, int* failed) {
  return verify(__func__, comm, path, options, failed);
}

fsdp_status_t fsdp_checkpoint_verify_fcomm(int fcomm, const char* path,
                                           const fsdp_checkpoint_check_options_t* options,
                                           int* failed) {
  return verify(__func__, from_fortran(fcomm), path, options, failed);
}

fsdp_status_t fsdp_checkpoint_diff(MPI_Comm comm, const char* a, const char* b,
                                   const fsdp_checkpoint_check_options_t* options, int* differ) {
  return diff(__func__, comm, a, b, options, differ);
}

fsdp_status_t fsdp_checkpoint_diff_fcomm(int fcomm, const char* a, const char* b,
                                         const fsdp_checkpoint_check_options_t* options,
                                         int* differ) {
  return diff(__func__, from_fortran(fcomm), a, b, options, differ);
}

}  // extern "C"
