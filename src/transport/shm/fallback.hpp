// Where node shared memory (/dev/shm) cannot hold a buffer: under FSDP_TRANSPORT_AUTO on one node
// the work goes to the shared-memory transport's delegate (DelegatingTransport: the MPI transport,
// the transport table's delegate entry), with one warning per kind of buffer;
// with the shared-memory transport asked for by name, or across nodes, it is
// FSDP_ERR_OUT_OF_MEMORY. The one place that decides, for unsharded parameters (node slots) and
// gradients (the arena). Every team rank decides alike: on one node the team is the whole group,
// and the failure comes from a collective allocation.
#pragma once

#include "base/error.hpp"
#include "transport/shm/node_team.hpp"

namespace fsdp::shm {

class Fallback {
 public:
  enum class Buffers { Unsharded, Gradients };
  // `tried`: the transport table tried this transport (AUTO) rather than being asked for it.
  Fallback(const NodeTeam& team, bool tried) : team_(team), tried_(tried) {}
  // Whether an allocation that fails may go to the delegate (MPI).
  bool allowed() const { return tried_ && team_.cross().size == 1; }
  // Called with what a node-shared allocation threw: rethrows it unless it may go to the delegate.
  void allow_or_rethrow(const Error& e) const;
  // The work goes to the delegate: said once per kind of buffer, on one line, by team rank 0.
  void warn_once(const Error& e, Buffers what);

 private:
  const NodeTeam& team_;
  const bool tried_;
  bool warned_[2] = {false, false};
};

}  // namespace fsdp::shm
