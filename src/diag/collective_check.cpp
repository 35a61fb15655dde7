#include "diag/collective_check.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "base/mpi_check.hpp"

namespace fsdp {
namespace {

constexpr int kTag = 7411;

// What a rank sends: fixed size, plain bytes (every rank runs the same build).
struct Wire {
  uint64_t seq = 0;
  uint64_t unit_id = 0;
  uint64_t bytes = 0;
  uint64_t fingerprint = 0;
  int32_t dtype = -1;
  int32_t collective = 1;
  int32_t refused = 0;  // the Errc of this rank's refusal; 0: none
  char call[40] = {};
  char unit[88] = {};
  char refusal[200] = {};  // its message (truncated)
};

Wire to_wire(const CallInfo& c, uint64_t seq) {
  Wire w;
  w.seq = seq;
  w.unit_id = c.unit_id;
  w.bytes = c.bytes;
  w.fingerprint = c.fingerprint;
  w.dtype = c.dtype;
  std::snprintf(w.call, sizeof w.call, "%s", c.call);
  std::snprintf(w.unit, sizeof w.unit, "%s", c.unit.c_str());
  if (c.refusal) {
    w.refused = static_cast<int32_t>(c.refusal->code());
    std::snprintf(w.refusal, sizeof w.refusal, "%s", c.refusal->what());
  }
  return w;
}

bool same_call(const Wire& a, const Wire& b) {
  return a.seq == b.seq && a.unit_id == b.unit_id && a.bytes == b.bytes &&
         a.fingerprint == b.fingerprint && a.dtype == b.dtype && !std::strcmp(a.call, b.call);
}

std::string describe(const Wire& w) {
  CallInfo c;
  c.call = w.call;
  c.unit_id = w.unit_id;
  c.unit = w.unit;
  c.bytes = w.bytes;
  c.dtype = w.dtype;
  std::string s = "collective #" + std::to_string(w.seq) + " " + c.text();
  if (w.fingerprint) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " [arguments %016llx]",
                  static_cast<unsigned long long>(w.fingerprint));
    s += buf;
  }
  return s;
}

// "0-2, 5, 7-8"
std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += std::to_string(ranks[i]);
    if (j > i) s += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return s;
}

}  // namespace

CollectiveCheck::CollectiveCheck(const Group& world) {
  world_ = world;
  world_.comm = MPI_COMM_NULL;
  mpi_check(MPI_Comm_dup(world.comm, &world_.comm), "MPI_Comm_dup");
}

CollectiveCheck::~CollectiveCheck() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // After an abandoned exchange, peers may still send into it: the communicator is leaked.
  if (!broken_ && !finalized) MPI_Comm_free(&world_.comm);
}

void CollectiveCheck::check(const CallInfo& call, double timeout_s, const CallLog& log,
                            const std::function<void()>& stop) {
  if (broken_)
    fail(Errc::Aborted,
         "an earlier collective call timed out or was aborted: only fsdp_finalize is taken");
  const int n = world_.size, me = world_.rank;
  const Wire mine = to_wire(call, ++checked_);
  if (n == 1) return;
  std::vector<Wire> theirs(static_cast<std::size_t>(n));
  std::vector<MPI_Request> recvs(static_cast<std::size_t>(n), MPI_REQUEST_NULL);
  std::vector<MPI_Request> sends(static_cast<std::size_t>(n), MPI_REQUEST_NULL);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const auto i = static_cast<std::size_t>(p);
    mpi_check(MPI_Irecv(&theirs[i], sizeof(Wire), MPI_BYTE, p, kTag, world_.comm, &recvs[i]),
              "MPI_Irecv");
    mpi_check(MPI_Isend(&mine, sizeof(Wire), MPI_BYTE, p, kTag, world_.comm, &sends[i]),
              "MPI_Isend");
  }
  theirs[static_cast<std::size_t>(me)] = mine;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  int arrived = 0, sent = 0;
  for (unsigned polls = 0;; ++polls) {
    mpi_check(MPI_Testall(n, recvs.data(), &arrived, MPI_STATUSES_IGNORE), "MPI_Testall");
    mpi_check(MPI_Testall(n, sends.data(), &sent, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (arrived && sent) break;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    const bool late = timeout_s > 0 && waited >= timeout_s;
    try {
      if (stop) stop();
    } catch (...) {
      broken_ = true;
      throw;
    }
    if (late) {
      broken_ = true;
      std::vector<int> missing, present;
      for (int p = 0; p < n; ++p) {
        int done = p == me;
        if (!done)
          MPI_Request_get_status(recvs[static_cast<std::size_t>(p)], &done, MPI_STATUS_IGNORE);
        (done ? present : missing).push_back(p);
      }
      const std::string report =
          describe(mine) + ": timed out after " + std::to_string(waited) + " s: rank(s) " +
          rank_list(missing) + " never called it (nor any collective of this context) while " +
          rank_list(present) + " waited; this rank's last calls:\n" + log.recent();
      std::fprintf(stderr, "libfsdp rank %d: %s", me, report.c_str());
      std::fflush(stderr);
      fail(Errc::Timeout, report);
    }
    // Spin a little, then leave the core to others (ranks are often oversubscribed).
    if (polls > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  // A rank that cannot make the call: it fails with its own error, the others name it. Nothing
  // ran anywhere.
  std::vector<int> refusing;
  std::string reasons;
  for (int p = 0; p < n; ++p)
    if (const Wire& w = theirs[static_cast<std::size_t>(p)]; w.refused) {
      refusing.push_back(p);
      reasons += "; rank " + std::to_string(p) + ": " + w.refusal;
    }
  if (call.refusal) throw *call.refusal;
  if (!refusing.empty())
    fail(Errc::Mismatch, describe(mine) + " cannot run: rank(s) " + rank_list(refusing) +
                             " refused it (debug check; nothing ran)" + reasons);
  for (const Wire& w : theirs)
    if (!same_call(w, mine)) {
      std::map<std::string, std::vector<int>> by_call;  // the calls, and who made each
      for (int p = 0; p < n; ++p)
        by_call[describe(theirs[static_cast<std::size_t>(p)])].push_back(p);
      std::string listing;
      for (const auto& [what, ranks] : by_call)
        listing += "; rank(s) " + rank_list(ranks) + " called " + what;
      // A rank missed or doubled the step boundary (core/step_boundary.hpp): its own status.
      if (listing.find("fsdp_step_boundary") != std::string::npos)
        fail(Errc::StepBoundary,
             "ranks made different collective calls: some are at fsdp_step_boundary, which "
             "every rank calls once per step (debug check; nothing ran)" +
                 listing);
      fail(Errc::Mismatch,
           "ranks made different collective calls (debug check; nothing ran)" + listing);
    }
}

}  // namespace fsdp
