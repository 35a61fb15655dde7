// Every FSDP_* environment variable the library reads, in one table (doc/environment.md lists
// the same): its name, whether every rank must see the same value, and what it does. Values are
// read when used (a program may change them between two fsdp_init), always through env().
#pragma once

#include <cstdint>
#include <initializer_list>

#include "base/group.hpp"

namespace fsdp {

enum class Env : int {
  // Context options (fsdp_init), compared across ranks with the configuration.
  Transport,
  ReduceScatterAlgorithm,
  RingMinBlockBytes,
  RingPieceBytes,
  DebugCollectives,
  Debug,
  Timeout,
  OnTimeout,
  // Topology and checkpoints: compared at fsdp_init.
  RanksPerNode,
  CkptMetadata,
  CkptDataIo,
  CkptRomioCb,
  CkptAlignment,
  CkptFillTime,
  // Local to each rank.
  ProgressThread,
  Trace,
  // Test hooks: kills a rank inside a checkpoint save (tests/fault/checkpoint_kill.sh); acts as
  // a filesystem that refuses O_DIRECT (checkpoint/posix_sink.cpp); truncates the file a load
  // reads after verifying it, and makes a load read its file as if none of it were in the page
  // cache (checkpoint/checkpoint_load.cpp).
  CkptTestKillRank,
  CkptTestRefuseDirect,
  CkptTestTruncateLoad,
  CkptTestColdLoad,
};
constexpr int kEnvCount = static_cast<int>(Env::CkptTestColdLoad) + 1;

struct EnvVar {
  const char* name;
  bool same_on_every_rank;
  const char* meaning;
};

const EnvVar& env_var(Env v);
// The variable's value; nullptr when it is unset or empty.
const char* env(Env v);
// The index of the variable's value in `choices`, or -1 when it is unset. Throws
// Errc::InvalidArgument naming the variable and the choices for any other value.
int env_choice(Env v, std::initializer_list<const char*> choices);
// Debug mode: FSDP_DEBUG set to anything but 0 turns on every debug check (the collective calls
// compared across ranks, node-shared parameters protected and checksummed; doc/debugging.md).
bool debug_env();

// What the launcher that started this process says of the job: the first of Open MPI's
// OMPI_COMM_WORLD_SIZE, PMI's PMI_SIZE (MPICH's Hydra, srun --mpi=pmi2) and srun's
// SLURM_STEP_NUM_TASKS that is set to a number above 1 (`variable`, `launcher`: words for a
// message), else processes = 0. Not FSDP_* variables: launchers set them (doc/environment.md).
struct LauncherJob {
  long processes = 0;
  const char* variable = nullptr;
  const char* launcher = nullptr;
};
LauncherJob launcher_job();

// Collective over `world` (fsdp_init): throws Errc::Mismatch on every rank, naming the first
// variable that differs, when a variable that must be the same on every rank is not.
void agree_on_environment(const Group& world);

}  // namespace fsdp
