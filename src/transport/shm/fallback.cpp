#include "transport/shm/fallback.hpp"

#include <cstdio>

namespace fsdp::shm {

void Fallback::allow_or_rethrow(const Error& e) const {
  if (!allowed() || e.code() != Errc::OutOfMemory) throw e;
}

void Fallback::warn_once(const Error& e, Buffers what) {
  bool& warned = warned_[what == Buffers::Unsharded ? 0 : 1];
  if (!warned && team_.rank() == 0)
    std::fprintf(stderr,
                 "libfsdp: warning: %s: %s through MPI instead (FSDP_TRANSPORT=mpi or =shm "
                 "chooses)\n",
                 e.what(),
                 what == Buffers::Unsharded
                     ? "unsharded parameters that do not fit are all-gathered"
                     : "gradients that do not fit are reduced");
  warned = true;
}

}  // namespace fsdp::shm
