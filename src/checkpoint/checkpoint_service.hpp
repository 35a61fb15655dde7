// Checkpoints of a context (fsdp_checkpoint_save / _save_async / _load): the service that owns
// their communicators and background thread. Saving is checkpoint_save.cpp (which datasets a
// model, its optimizers and grad scaler become, this rank's pieces; the file written by
// writer.hpp); loading is checkpoint_load.cpp, in named phases (the catalog matched by
// load_match.hpp, every checksum verified, then the values placed through file_mapping.hpp), all
// or nothing.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "core/context_part.hpp"
#include "runtime/comm_worker.hpp"

namespace fsdp {
class Context;
class Optimizer;
class GradScaler;
}  // namespace fsdp

namespace fsdp::ckpt {

struct SaveJob;

struct SaveRequest {
  std::string path;
  std::vector<Optimizer*> optimizers;  // saved as /optimizers/0, /optimizers/1, ...
  GradScaler* scaler = nullptr;
  std::vector<std::pair<std::string, std::string>> metadata;
};

struct LoadRequest {
  std::string path;
  std::vector<Optimizer*> optimizers;  // matched to the file's by position
  GradScaler* scaler = nullptr;
  bool partial = false;     // load what matches, report the rest (else: all or nothing)
  bool model_only = false;  // skip optimizer and scaler state
  bool convert = false;     // float32 <-> float64 on load (else a dtype difference is an error)
};

struct LoadReport {
  int loaded = 0, missing = 0, unexpected = 0, mismatched = 0;
  std::string details;  // one line per parameter not loaded
};

// What every rank must pass alike to a save or a load (compared by agree()).
uint64_t request_fingerprint(const SaveRequest& r);
uint64_t request_fingerprint(const LoadRequest& r);

class CheckpointService final : public ContextPart {
 public:
  // The context's service (its Checkpoints slot), created on first use.
  static CheckpointService& of(Context& ctx);
  explicit CheckpointService(Context& ctx) : ctx_(ctx) {}
  ~CheckpointService() override;  // waits for a background save, frees the communicators
  CheckpointService(const CheckpointService&) = delete;
  CheckpointService& operator=(const CheckpointService&) = delete;

  // Collective over the world group. `local_error`: this rank's arguments were invalid.
  void save(const SaveRequest& r, const std::optional<Error>& local_error);
  // Copies this rank's share (shards and optimizer state) and returns; a background thread
  // writes and commits it. The task reports the outcome (the same on every rank).
  std::shared_ptr<CommWorker::Task> save_async(const SaveRequest& r,
                                               const std::optional<Error>& local_error);
  LoadReport load(const LoadRequest& r, const std::optional<Error>& local_error);
  // Waits for a background save to finish (its outcome stays with its task).
  void wait_pending();

 private:
  void ensure_comms();
  // Load's first phase: the queued work done, the request agreed, every unit sharded.
  void prepare_load(const LoadRequest& r, const std::optional<Error>& local_error);
  std::shared_ptr<CommWorker::Task> start_save(const SaveRequest& r,
                                               const std::optional<Error>& local_error,
                                               bool background);

  Context& ctx_;
  // Checkpoint I/O has its own communicators: a background save must not share one with the
  // context's collectives.
  MPI_Comm all_ = MPI_COMM_NULL, writers_ = MPI_COMM_NULL, shard_ = MPI_COMM_NULL;
  std::unique_ptr<CommWorker> worker_;
  std::shared_ptr<CommWorker::Task> pending_;
  // The last background save: its copy buffers are reused by the next one.
  std::shared_ptr<SaveJob> last_job_;
};

}  // namespace fsdp::ckpt
