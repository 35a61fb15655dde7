#include "base/environment.hpp"

#include <cstdlib>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/fingerprint.hpp"
#include "base/mpi_check.hpp"

namespace fsdp {
namespace {

const EnvVar kVars[kEnvCount] = {
    {"FSDP_TRANSPORT", true, "auto|mpi|shm|shm_zero_copy|nccl: overrides cfg->transport"},
    {"FSDP_REDUCE_SCATTER_ALGORITHM", true, "auto|ring|mpi: the MPI transport's reduce-scatter"},
    {"FSDP_RING_MIN_BLOCK_BYTES", true, "auto picks the ring from blocks of this size"},
    {"FSDP_RING_PIECE_BYTES", true, "ring steps move pieces of this size (0: whole blocks)"},
    {"FSDP_DEBUG_COLLECTIVES", true,
     "0|1: overrides cfg->debug_collectives (and FSDP_DEBUG's choice for it)"},
    {"FSDP_DEBUG", true, "not 0: every debug check (debug_collectives included, release builds)"},
    {"FSDP_TIMEOUT", true, "seconds: overrides cfg->timeout_s (0: the default, < 0: none)"},
    {"FSDP_ON_TIMEOUT", true, "error|abort: overrides cfg->on_timeout"},
    {"FSDP_RANKS_PER_NODE", true, "ranks per node, instead of asking MPI (testing)"},
    {"FSDP_CKPT_METADATA", true, "rank0|collective|independent: who writes HDF5 metadata"},
    {"FSDP_CKPT_DATA_IO", true,
     "direct|posix|collective|independent: how checkpoint data is written"},
    {"FSDP_CKPT_ROMIO_CB", true, "enable|disable|automatic: ROMIO collective buffering"},
    {"FSDP_CKPT_ALIGNMENT", true, "bytes: HDF5 alignment of checkpoint datasets"},
    {"FSDP_CKPT_FILL_TIME", true, "alloc: HDF5 writes fill values (measures their cost)"},
    {"FSDP_PROGRESS_THREAD", false, "0: asynchronous calls run on the caller's thread"},
    {"FSDP_TRACE", false, "directory: each rank writes a Chrome trace there"},
    {"FSDP_CKPT_TEST_KILL_RANK", true, "test hook: that rank dies inside a checkpoint save"},
    {"FSDP_CKPT_TEST_REFUSE_DIRECT", false, "open|write, test hook: O_DIRECT refused there"},
    {"FSDP_CKPT_TEST_TRUNCATE_LOAD", false, "1, test hook: a load's file emptied once verified"},
    {"FSDP_CKPT_TEST_COLD_LOAD", false, "1, test hook: a load reads as if nothing were cached"},
};

}  // namespace

const EnvVar& env_var(Env v) {
  return kVars[static_cast<int>(v)];
}

const char* env(Env v) {
  const char* value = std::getenv(env_var(v).name);
  return value && *value ? value : nullptr;
}

bool debug_env() {
  const char* v = env(Env::Debug);
  return v && std::string(v) != "0";
}

LauncherJob launcher_job() {
  static const char* const kLaunchers[][2] = {
      {"OMPI_COMM_WORLD_SIZE", "Open MPI's mpiexec"},
      {"PMI_SIZE", "a PMI launcher (MPICH's Hydra, srun --mpi=pmi2)"},
      {"SLURM_STEP_NUM_TASKS", "srun"}};
  for (const auto& l : kLaunchers) {
    const char* value = std::getenv(l[0]);
    const long n = value ? std::atol(value) : 0;
    if (n > 1) return {n, l[0], l[1]};
  }
  return {};
}

int env_choice(Env v, std::initializer_list<const char*> choices) {
  const char* value = env(v);
  if (!value) return -1;
  std::string expected;
  int i = 0;
  for (const char* c : choices) {
    if (std::string(value) == c) return i;
    expected += (i == 0                                      ? ""
                 : i + 1 == static_cast<int>(choices.size()) ? " or "
                                                             : ", ") +
                std::string(c);
    ++i;
  }
  fail(Errc::InvalidArgument,
       std::string("environment ") + env_var(v).name + "=" + value + ": expected " + expected);
}

void agree_on_environment(const Group& world) {
  std::vector<uint64_t> mine;
  std::vector<int> which;
  for (int i = 0; i < kEnvCount; ++i) {
    if (!kVars[i].same_on_every_rank) continue;
    const char* v = env(static_cast<Env>(i));
    Fingerprint f;
    f.add(std::string(v ? v : "\x01unset"));
    mine.push_back(f.value());
    which.push_back(i);
  }
  std::vector<uint64_t> rank0(mine);
  mpi_check(MPI_Bcast(rank0.data(), static_cast<int>(rank0.size()), MPI_UINT64_T, 0, world.comm),
            "MPI_Bcast");
  int first = static_cast<int>(mine.size());  // the first variable this rank differs in
  for (std::size_t k = 0; k < mine.size(); ++k)
    if (mine[k] != rank0[k]) {
      first = static_cast<int>(k);
      break;
    }
  int any = first;
  mpi_check(MPI_Allreduce(&first, &any, 1, MPI_INT, MPI_MIN, world.comm), "MPI_Allreduce");
  if (any == static_cast<int>(mine.size())) return;
  const char* name = kVars[which[static_cast<std::size_t>(any)]].name;
  const char* v = env(static_cast<Env>(which[static_cast<std::size_t>(any)]));
  fail(Errc::Mismatch, std::string("environment variable ") + name +
                           " must be the same on every rank (doc/environment.md); it differs "
                           "from rank 0's on some rank (here: " +
                           (v ? std::string("'") + v + "'" : std::string("unset")) + ")");
}

}  // namespace fsdp
