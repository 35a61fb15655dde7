// fsdp_checkpoint_verify and fsdp_checkpoint_diff (and their _fcomm twins): the C face of
// checkpoint/verify and checkpoint/compare (fsdp-ckpt verify and diff call them).
#include <string>
#include <vector>

#include "base/agreement.hpp"
#include "base/fingerprint.hpp"
#include "base/group.hpp"
#include "base/mpi_check.hpp"
#include "capi/arguments.hpp"
#include "capi/entry_bodies.hpp"
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

// Checks the arguments on this rank (`local`: what the entry point found, a NULL result), then
// agrees on them (the same paths and options on every rank, or FSDP_ERR_MISMATCH) over a duplicate
// of `comm` whose errors return; runs `body` there and stores its answer in *result.
template <class Body>
void collective(std::optional<fsdp::Error> local, MPI_Comm comm,
                std::vector<std::pair<const char*, const char*>> paths,
                const fsdp_checkpoint_check_options_t* options, int* result, Body&& body) {
  fsdp::capi::require_usable_mpi(comm);
  Request r;
  if (!local)
    local = fsdp::attempt([&] {
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

void verify(std::optional<fsdp::Error> local, MPI_Comm comm, const char* path,
            const fsdp_checkpoint_check_options_t* options, int* failed) {
  collective(std::move(local), comm, {{"path", path}}, options, failed,
             [](MPI_Comm c, const Request& r, const fsdp::ckpt::ReportSink& sink) {
               return !fsdp::ckpt::verify_checkpoint(c, r.paths[0], sink);
             });
}

void diff(std::optional<fsdp::Error> local, MPI_Comm comm, const char* a, const char* b,
          const fsdp_checkpoint_check_options_t* options, int* differ) {
  collective(std::move(local), comm, {{"a", a}, {"b", b}}, options, differ,
             [](MPI_Comm c, const Request& r, const fsdp::ckpt::ReportSink& sink) {
               return fsdp::ckpt::checkpoints_differ(c, r.paths[0], r.paths[1],
                                                     r.options.model_only != 0, sink);
             });
}

}  // namespace

namespace fsdp::capi::body {

void fsdp_checkpoint_verify(std::optional<Error> local, MPI_Comm comm, const char* path,
                            const fsdp_checkpoint_check_options_t* options, int* failed) {
  verify(std::move(local), comm, path, options, failed);
}

void fsdp_checkpoint_verify_fcomm(std::optional<Error> local, int fcomm, const char* path,
                                  const fsdp_checkpoint_check_options_t* options, int* failed) {
  verify(std::move(local), from_fortran(fcomm), path, options, failed);
}

void fsdp_checkpoint_diff(std::optional<Error> local, MPI_Comm comm, const char* a, const char* b,
                          const fsdp_checkpoint_check_options_t* options, int* differ) {
  diff(std::move(local), comm, a, b, options, differ);
}

void fsdp_checkpoint_diff_fcomm(std::optional<Error> local, int fcomm, const char* a, const char* b,
                                const fsdp_checkpoint_check_options_t* options, int* differ) {
  diff(std::move(local), from_fortran(fcomm), a, b, options, differ);
}

}  // namespace fsdp::capi::body
