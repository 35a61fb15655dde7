// NodeSlots (transport/shm/node_slots.hpp) on the ranks of one node, against its rule written
// here: a slot lent to every team rank is one buffer (each rank's writes are seen by the others)
// and its lease says it is the node's copy; a held slot is never lent again; a request takes the
// smallest free slot that fits; when none fits, the free slots are freed and one of the requested
// size (whole pages) is made; a steady loop makes none.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "check.hpp"
#include "runtime/lease.hpp"
#include "transport/shm/fallback.hpp"
#include "transport/shm/node_slots.hpp"
#include "transport/shm/node_team.hpp"

using namespace fsdp;
using namespace fsdp::shm;

namespace {

// Every team rank writes its rank + `salt` into byte r of the lease; then every rank reads all.
bool one_buffer(NodeTeam& team, const Lease& lease, int salt) {
  char* p = static_cast<char*>(lease.data());
  p[team.rank()] = static_cast<char>(team.rank() + salt);
  team.barrier();
  bool ok = true;
  for (int r = 0; r < team.size(); ++r) ok = ok && p[r] == static_cast<char>(r + salt);
  team.barrier();  // everyone read before anyone writes again
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Group world;
  world.comm = MPI_COMM_WORLD;
  MPI_Comm_rank(world.comm, &world.rank);
  MPI_Comm_size(world.comm, &world.size);
  {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    NodeTeam team(world, /*node_key=*/0);  // one node: every rank in the team
    Fallback fallback(team, /*tried=*/false);
    NodeSlots slots(team, /*protect=*/false, fallback);

    Lease big, small;
    slots.acquire(3 * page - 10, big);
    check(big.located().where.kind == Where::Kind::NodeCopy, "a slot is the node's copy");
    check(big.bytes() == 3 * page - 10 && big.capacity() == 3 * page, "whole pages taken");
    check(one_buffer(team, big, 1), "one buffer for the team");
    slots.acquire(100, small);  // `big` is held: a new slot
    check(small.data() != big.data() && small.capacity() == page, "a held slot is not lent again");
    check(one_buffer(team, small, 2), "the second slot is one buffer too");
    check(slots.allocation_calls() == 2, "two slots made");

    big.reset();
    small.reset();
    Lease a, b;
    slots.acquire(50, a);
    team.barrier();  // the all-gather's: no rank posts again before every rank read the posts
    check(a.capacity() == page, "the smallest free slot that fits");
    slots.acquire(2 * page, b);
    check(b.capacity() == 3 * page, "the larger one for a larger request");
    check(one_buffer(team, b, 3), "a reused slot is still one buffer");
    check(slots.allocation_calls() == 2, "reuse makes no slot");
    a.reset();
    b.reset();

    // A steady loop: unshard, reshard, of two sizes in turn, makes nothing.
    for (int step = 0; step < 5; ++step) {
      Lease x, y;
      slots.acquire(page, x);
      team.barrier();
      slots.acquire(3 * page, y);
      check(one_buffer(team, y, 4 + step), "steady loop: one buffer");
    }
    check(slots.allocation_calls() == 2, "a steady loop makes no slot");

    // None fits: the free ones are freed, one of the requested size is made.
    Lease huge;
    slots.acquire(5 * page, huge);
    check(huge.capacity() == 5 * page && slots.allocation_calls() == 3, "a miss makes one slot");
    check(one_buffer(team, huge, 9), "the new slot is one buffer");
  }
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  if (all == 0 && world.rank == 0) std::printf("node slots: chosen as the rule says\n");
  return all == 0 ? 0 : 1;
}
