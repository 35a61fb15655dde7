// fsdp_safetensors_export / fsdp_safetensors_import: the C face of checkpoint/safetensors_io
// (fsdp-ckpt export and import call them too), and their _fcomm twins for Fortran and FFI callers.
#include <optional>
#include <string>

#include "base/agreement.hpp"
#include "base/fingerprint.hpp"
#include "base/mpi_check.hpp"
#include "capi/entry_bodies.hpp"
#include "capi/guard.hpp"
#include "capi/mpi_args.hpp"
#include "capi/sized_struct.hpp"
#include "checkpoint/safetensors_io.hpp"
#include "fsdp.h"

using fsdp::Errc;
using fsdp::fail;

namespace {

struct Request {
  std::string from, to;
  fsdp::ckpt::SafetensorsOptions options;
};

std::string read_path(const char* p, const char* arg) {
  if (!p) fail(Errc::InvalidArgument, std::string(arg) + ": NULL");
  if (!*p) fail(Errc::InvalidArgument, std::string(arg) + ": empty");
  return p;
}

// Checks the arguments on this rank, then agrees on them (the same paths and options on every
// rank, or FSDP_ERR_MISMATCH) over a duplicate of `comm` whose errors return. Runs `body` on
// that communicator.
template <class Body>
void collective(MPI_Comm comm, const char* from_arg, const char* from, const char* to_arg,
                const char* to, const fsdp_safetensors_options_t* options, bool is_export,
                Body&& body) {
  fsdp::capi::require_usable_mpi(comm);
  Request r;
  std::optional<fsdp::Error> local = fsdp::attempt([&] {
    r.from = read_path(from, from_arg);
    r.to = read_path(to, to_arg);
    const fsdp_safetensors_options_t defaults = FSDP_SAFETENSORS_OPTIONS_INIT;
    const fsdp_safetensors_options_t o =
        options
            ? fsdp::capi::read_sized(*options, defaults, "options", "FSDP_SAFETENSORS_OPTIONS_INIT")
            : defaults;
    // The raw value: a C enum may hold anything, and reading it as the C++ enum first is undefined.
    const int dtype = fsdp::capi::enum_int(o.dtype);
    if (dtype != FSDP_DTYPE_AUTO) {
      const bool known = dtype == FSDP_FLOAT32 || dtype == FSDP_FLOAT64 || dtype == FSDP_BFLOAT16 ||
                         dtype == FSDP_FLOAT16;
      const bool storable = dtype == FSDP_FLOAT32 || dtype == FSDP_FLOAT64;
      if (!known || (!is_export && !storable))
        fail(Errc::InvalidArgument,
             "options->dtype = " + std::to_string(dtype) +
                 (is_export ? ": expected FSDP_DTYPE_AUTO, FSDP_FLOAT32, FSDP_FLOAT64, "
                              "FSDP_BFLOAT16 or FSDP_FLOAT16"
                            : ": checkpoints store FSDP_FLOAT32 or FSDP_FLOAT64 (or "
                              "FSDP_DTYPE_AUTO)"));
      r.options.dtype = static_cast<fsdp::DType>(dtype);
    }
    if (!is_export && o.max_shard_bytes != 0)
      fail(Errc::InvalidArgument,
           "options->max_shard_bytes = " + std::to_string(o.max_shard_bytes) +
               ": an import reads whatever shards the index names (use 0)");
    r.options.max_shard_bytes = o.max_shard_bytes;
  });
  fsdp::Group g = fsdp::capi::duplicate_caller_comm(comm);
  try {
    fsdp::Fingerprint f;
    f.add(r.from), f.add(r.to);
    f.add(static_cast<uint64_t>(r.options.dtype ? static_cast<int>(*r.options.dtype) + 1 : 0));
    f.add(r.options.max_shard_bytes);
    fsdp::agree(g, "safetensors arguments", f.value(), local);
    body(g.comm, r);
  } catch (...) {
    fsdp::free_group(g);
    throw;
  }
  fsdp::free_group(g);
}

// A Fortran communicator handle as a C one; MPI_COMM_NULL before MPI_Init (MPI_Comm_f2c needs
// MPI), which require_usable_mpi then reports.
MPI_Comm from_fortran(int fcomm) {
  static_assert(sizeof(MPI_Fint) == sizeof(int), "MPI_Fint is not an int in this MPI");
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized ? MPI_Comm_f2c(static_cast<MPI_Fint>(fcomm)) : MPI_COMM_NULL;
}

void export_body(MPI_Comm comm, const char* checkpoint, const char* out,
                 const fsdp_safetensors_options_t* options) {
  collective(comm, "checkpoint", checkpoint, "out", out, options, true,
             [](MPI_Comm c, const Request& r) {
               fsdp::ckpt::export_safetensors(c, r.from, r.to, r.options);
             });
}

void import_body(MPI_Comm comm, const char* in, const char* checkpoint,
                 const fsdp_safetensors_options_t* options) {
  collective(comm, "in", in, "checkpoint", checkpoint, options, false,
             [](MPI_Comm c, const Request& r) {
               fsdp::ckpt::import_safetensors(c, r.from, r.to, r.options);
             });
}

}  // namespace

namespace fsdp::capi::body {

void fsdp_safetensors_export(MPI_Comm comm, const char* checkpoint, const char* out,
                             const fsdp_safetensors_options_t* options) {
  export_body(comm, checkpoint, out, options);
}

void fsdp_safetensors_import(MPI_Comm comm, const char* in, const char* checkpoint,
                             const fsdp_safetensors_options_t* options) {
  import_body(comm, in, checkpoint, options);
}

void fsdp_safetensors_export_fcomm(int fcomm, const char* checkpoint, const char* out,
                                   const fsdp_safetensors_options_t* options) {
  export_body(from_fortran(fcomm), checkpoint, out, options);
}

void fsdp_safetensors_import_fcomm(int fcomm, const char* in, const char* checkpoint,
                                   const fsdp_safetensors_options_t* options) {
  import_body(from_fortran(fcomm), in, checkpoint, options);
}

}  // namespace fsdp::capi::body
