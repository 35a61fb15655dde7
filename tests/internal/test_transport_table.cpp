// The transport table (placement/transport_table.cpp) walked with stand-in entries: for each
// placement and requested transport, which entry is built, which ones are tried and given up for
// the next, and what is an error. The expectations are written from doc/environment.md and
// doc/shared-memory.md (what each FSDP_TRANSPORT value picks), not from the table. The builders
// below replace placement/transport_stacks.cpp: they record the order in which they are asked, and
// fail or find themselves not worth it as each case says. Agreement is simulated: "some other rank"
// failing is a flag.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/memory_accounting.hpp"
#include "check.hpp"
#include "core/process_groups.hpp"
#include "memory/host/host_memory_space.hpp"
#include "placement/transport_table.hpp"

using namespace fsdp;

namespace {

// What the stand-in builders do in the current case.
struct Script {
  std::vector<std::string> built;  // names, in the order the walk asked for them
  std::string fails_here;          // this entry's build throws on this rank
  std::string fails_elsewhere;     // ... or on another rank only
  std::string not_worth_it;        // this entry is built but not worth it (a team of one)
  std::string pending;             // built, its outcome not yet agreed on
} script;

class FakeStack final : public TransportStack {
 public:
  FakeStack(const StackInputs& in, std::string name) : in_(in), name_(std::move(name)) {}
  Transport& transport() override { throw Error(Errc::Internal, "not used"); }
  MemorySpace& buffers() override { return in_.buffers; }
  std::unique_ptr<UnshardedStorage> make_storage(BufferPool&) override { return nullptr; }
  void trim() override {}
  uint64_t allocation_calls() const override { return 0; }
  bool worth_it() const override { return script.not_worth_it != name_; }
  bool tried() const { return in_.tried; }
  StackBuilder delegate() const { return in_.delegate; }

 private:
  StackInputs in_;
  std::string name_;
};

std::unique_ptr<TransportStack> build(const char* name, const StackInputs& in) {
  script.built.push_back(name);
  script.pending = name;
  if (script.fails_here == name)
    throw Error(Errc::OutOfMemory, std::string(name) + ": no memory here");
  return std::make_unique<FakeStack>(in, name);
}

// Two ranks in spirit: this one, and another whose outcome the script gives.
class FakeAgreement final : public Agreement {
 public:
  void all_or_none(const char* what, const std::optional<Error>& local) override {
    if (local) throw *local;
    if (failed_elsewhere()) throw Error(Errc::Mismatch, std::string(what) + ": failed on rank 1");
  }
  bool everywhere(bool yes) override { return !failed_elsewhere() && yes; }

 private:
  static bool failed_elsewhere() {
    const bool failed = !script.pending.empty() && script.pending == script.fails_elsewhere;
    script.pending.clear();
    return failed;
  }
};

struct Case {
  const char* what;
  MemoryPlace memory;
  TransportKind requested;
  bool nccl_built;
  bool gpu_shared;
  Script script;
  // Expected: the entries built in order, and the one chosen with its resolved kind; or the error
  // code (0: none) and a piece of its message.
  std::vector<std::string> built;
  const char* chosen;
  TransportKind resolved;
  bool chosen_tried;
  Errc error;
  const char* message;
};

const char* kind_name(TransportKind k) {
  switch (k) {
    case TransportKind::Auto: return "auto";
    case TransportKind::Mpi: return "mpi";
    case TransportKind::Nccl: return "nccl";
    case TransportKind::Shm: return "shm";
    case TransportKind::ShmZeroCopy: return "shm_zero_copy";
  }
  return "?";
}

}  // namespace

namespace fsdp {
std::unique_ptr<TransportStack> make_nccl_stack(const StackInputs& in) {
  return build("nccl", in);
}
std::unique_ptr<TransportStack> make_zero_copy_stack(const StackInputs& in) {
  return build("zero-copy", in);
}
std::unique_ptr<TransportStack> make_shm_stack(const StackInputs& in) {
  return build("shm", in);
}
std::unique_ptr<TransportStack> make_staged_stack(const StackInputs& in) {
  return build("staged", in);
}
std::unique_ptr<TransportStack> make_mpi_stack(const StackInputs& in) {
  return build("mpi", in);
}
}  // namespace fsdp

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  {
    Topology topo;
    ProcessGroups groups(world, topo, 1);
    MemoryAccounting accounting;
    HostMemorySpace memory;
    MpiTransportOptions mpi;
    using K = TransportKind;
    const MemoryPlace H = MemoryPlace::Host, C = MemoryPlace::Cuda;
    const Errc none = static_cast<Errc>(0);
    const Case cases[] = {
        // Host memory.
        {"host, AUTO: shared memory",
         H,
         K::Auto,
         false,
         false,
         {},
         {"shm"},
         "shm",
         K::Shm,
         true,
         none,
         ""},
        {"host, AUTO, a team of one: MPI",
         H,
         K::Auto,
         false,
         false,
         {{}, "", "", "shm"},
         {"shm", "mpi"},
         "mpi",
         K::Mpi,
         false,
         none,
         ""},
        {"host, AUTO, shm fails here: MPI",
         H,
         K::Auto,
         false,
         false,
         {{}, "shm", "", ""},
         {"shm", "mpi"},
         "mpi",
         K::Mpi,
         false,
         none,
         ""},
        {"host, AUTO, shm fails on another rank: MPI here too",
         H,
         K::Auto,
         false,
         false,
         {{}, "", "shm", ""},
         {"shm", "mpi"},
         "mpi",
         K::Mpi,
         false,
         none,
         ""},
        {"host, NCCL means AUTO",
         H,
         K::Nccl,
         true,
         false,
         {},
         {"shm"},
         "shm",
         K::Shm,
         true,
         none,
         ""},
        {"host, MPI", H, K::Mpi, false, false, {}, {"mpi"}, "mpi", K::Mpi, false, none, ""},
        {"host, SHM asked for",
         H,
         K::Shm,
         false,
         false,
         {{}, "", "", "shm"},
         {"shm"},
         "shm",
         K::Shm,
         false,
         none,
         ""},
        {"host, SHM asked for, fails: an error, no fallback",
         H,
         K::Shm,
         false,
         false,
         {{}, "shm", "", ""},
         {"shm"},
         nullptr,
         K::Mpi,
         false,
         Errc::OutOfMemory,
         "no memory"},
        {"host, SHM asked for, fails on another rank: an error here too",
         H,
         K::Shm,
         false,
         false,
         {{}, "", "shm", ""},
         {"shm"},
         nullptr,
         K::Mpi,
         false,
         Errc::Mismatch,
         "(cfg->transport = FSDP_TRANSPORT_SHM)"},
        {"host, zero-copy asked for",
         H,
         K::ShmZeroCopy,
         false,
         false,
         {},
         {"zero-copy"},
         "zero-copy",
         K::ShmZeroCopy,
         false,
         none,
         ""},
        {"host, zero-copy fails on another rank",
         H,
         K::ShmZeroCopy,
         false,
         false,
         {{}, "", "zero-copy", ""},
         {"zero-copy"},
         nullptr,
         K::Mpi,
         false,
         Errc::Mismatch,
         "FSDP_TRANSPORT_SHM_ZERO_COPY"},
        // CUDA memory.
        {"CUDA, AUTO with NCCL",
         C,
         K::Auto,
         true,
         false,
         {},
         {"nccl"},
         "nccl",
         K::Nccl,
         false,
         none,
         ""},
        {"CUDA, AUTO without NCCL: staged MPI",
         C,
         K::Auto,
         false,
         false,
         {},
         {"staged"},
         "staged",
         K::Mpi,
         false,
         none,
         ""},
        {"CUDA, AUTO, ranks share a GPU: staged MPI",
         C,
         K::Auto,
         true,
         true,
         {},
         {"staged"},
         "staged",
         K::Mpi,
         false,
         none,
         ""},
        {"CUDA, SHM (environment) means AUTO",
         C,
         K::Shm,
         true,
         false,
         {},
         {"nccl"},
         "nccl",
         K::Nccl,
         false,
         none,
         ""},
        {"CUDA, MPI: staged",
         C,
         K::Mpi,
         true,
         false,
         {},
         {"staged"},
         "staged",
         K::Mpi,
         false,
         none,
         ""},
        {"CUDA, NCCL asked for",
         C,
         K::Nccl,
         true,
         false,
         {},
         {"nccl"},
         "nccl",
         K::Nccl,
         false,
         none,
         ""},
        {"CUDA, NCCL asked for, not built",
         C,
         K::Nccl,
         false,
         false,
         {},
         {},
         nullptr,
         K::Mpi,
         false,
         Errc::Unsupported,
         "built without NCCL"},
        {"CUDA, NCCL asked for, ranks share a GPU",
         C,
         K::Nccl,
         true,
         true,
         {},
         {},
         nullptr,
         K::Mpi,
         false,
         Errc::Unsupported,
         "world ranks 0 and 1 use the same GPU"},
        {"CUDA, AUTO, NCCL setup fails: an error, no fallback",
         C,
         K::Auto,
         true,
         false,
         {{}, "nccl", "", ""},
         {"nccl"},
         nullptr,
         K::Mpi,
         false,
         Errc::OutOfMemory,
         "no memory"},
    };
    for (const Case& c : cases) {
      script = c.script;
      SelectionFacts facts;
      facts.memory = c.memory;
      facts.requested = c.requested;
      facts.nccl_built = c.nccl_built;
      if (c.gpu_shared) facts.shared_gpu = {0, 1};
      PlacementRequest request;
      request.memory = c.memory;
      request.transport = c.requested;
      const StackInputs in{request, mpi, groups, topo, accounting, memory, -1};
      FakeAgreement agreement;
      const std::string label = std::string(c.what) + " (" + kind_name(c.requested) + ")";
      try {
        Chosen got = walk_transport_table(facts, in, agreement);
        check(c.error == none, label + ": no error");
        check(c.chosen && std::strcmp(got.entry->name, c.chosen) == 0,
              label + ": chose " + got.entry->name);
        check(got.entry->resolved == c.resolved,
              label + ": resolved to " + kind_name(got.entry->resolved));
        check(static_cast<FakeStack&>(*got.stack).tried() == c.chosen_tried,
              label + ": tried (what it cannot hold goes to MPI) or asked for");
        // The entries that delegate what they do not carry, and to whom (the table's comment).
        const std::string name = got.entry->name;
        const bool delegates = name == "shm" || name == "zero-copy" || name == "staged";
        check(static_cast<FakeStack&>(*got.stack).delegate() ==
                  (delegates ? &fsdp::make_mpi_stack : nullptr),
              label + ": its delegate is the mpi entry, or none");
      } catch (const Error& e) {
        check(c.error == e.code(), label + ": error " + e.what());
        check(std::strstr(e.what(), c.message) != nullptr, label + ": message " + e.what());
      }
      check(script.built == c.built, label + ": the entries built, in order");
    }
  }
  int all = 0;
  MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  if (all == 0) std::printf("transport table: every case chose as expected\n");
  return all == 0 ? 0 : 1;
}
