// Loading (CheckpointService::load), in named phases: prepare (the queued work done, the request
// agreed), catalog (rank 0 reads the structure and broadcasts it), match (load_match.hpp), verify
// (every rank's ranges checksummed, combined per dataset, compared), place (the verified bytes
// copied into the shards and optimizer state), apply (step counts, hyperparameters, the scaler).
// Nothing changes before every rank has verified. FSDP_TRACE records each phase.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>

#include "base/agreement.hpp"
#include "base/crc32c.hpp"
#include "base/environment.hpp"
#include "checkpoint/checkpoint_service.hpp"
#include "checkpoint/direct_reads.hpp"
#include "checkpoint/file_mapping.hpp"
#include "checkpoint/from_rank0.hpp"
#include "checkpoint/load_match.hpp"
#include "checkpoint/partial_checksums.hpp"
#include "checkpoint/posix_file.hpp"
#include "core/context.hpp"
#include "core/unit.hpp"
#include "diag/trace.hpp"
#include "memory/host/host_kernels.hpp"
#include "optim/grad_scaler.hpp"
#include "optim/optimizer.hpp"

namespace fsdp::ckpt {
namespace {

// One range of a dataset that this rank reads: its target, its place in the shard and in the file.
struct FileRange {
  std::size_t target;
  ShardSlice slice;
  uint64_t file_offset, bytes;
};

// This rank's ranges, in file order.
std::vector<FileRange> plan_reads(const std::vector<Target>& targets) {
  std::vector<FileRange> ranges;
  for (std::size_t t = 0; t < targets.size(); ++t) {
    const Target& tg = targets[t];
    const ShardSlice s =
        tg.optimizer < 0 ? tg.unit->master_slice(tg.param) : tg.unit->update_slice(tg.param);
    if (s.length == 0) continue;
    const std::size_t fes = dtype_size(tg.file->dtype);
    ranges.push_back({t, s, tg.file->offset + s.param_offset * fes, s.length * fes});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const FileRange& a, const FileRange& b) { return a.file_offset < b.file_offset; });
  return ranges;
}

// Where range `rg` starts in `buffer`, its target's shard or optimizer state buffer.
char* range_start(char* buffer, const FileRange& rg, const Target& tg) {
  return buffer + rg.slice.shard_offset * tg.unit->layout().element_size();
}

// The file a load reads: opened for sequential reads and mapped (file_mapping.hpp).
struct LoadFile {
  PosixFile file;
  FileMapping map;
  explicit LoadFile(const std::string& path) : file(path, O_RDONLY), map(file) {}
};

// Testing hook, compiled only with FSDP_TEST_HOOKS: FSDP_CKPT_TEST_COLD_LOAD=1 makes a load read
// its file as if none of it were in the page cache (test_checkpoint_errors: the pieces read
// straight into the shards and optimizer state are put back when verification fails).
bool test_cold_load() {
#ifdef FSDP_TEST_HOOKS
  return env(Env::CkptTestColdLoad) != nullptr;
#else
  return false;
#endif
}

// Each range's CRC-32C, in file order, in 1 MiB pieces: a piece already in the page cache is
// checksummed in place through the mapping; any other is read with pread, into its destination
// where `direct` allows it (then checksummed there, while it is in the CPU's cache), else into one
// scratch buffer that stays in the CPU's cache (large sequential reads, which the kernel reads
// ahead of, rather than page faults).
std::vector<PartialCrc> checksum(const LoadFile& f, const std::vector<FileRange>& ranges,
                                 const std::vector<Target>& targets, DirectReads& direct) {
  const bool cold = test_cold_load();
  std::vector<char> scratch;
  std::vector<PartialCrc> crc;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const FileRange& rg = ranges[i];
    const std::string& name = targets[rg.target].file->name;
    uint32_t c = 0;
    for (uint64_t piece = 0; piece < load_piece_count(rg.bytes); ++piece) {
      const uint64_t done = piece * kLoadPiece, n = std::min(kLoadPiece, rg.bytes - done);
      const uint64_t at = rg.file_offset + done;
      if (!cold && f.map.resident(at, n)) {
        f.map.guarded(at, n, name, [&c](const char* p, uint64_t k) { c = crc32c(c, p, k); });
        continue;
      }
      char* to = direct.claim(i, rg.bytes, piece, n);
      if (!to) {
        scratch.resize(kLoadPiece);
        to = scratch.data();
      }
      f.file.read_at(to, n, at, name);
      c = crc32c(c, to, n);
    }
    crc.push_back({rg.target, rg.slice.param_offset, rg.slice.length, c});
  }
  return crc;
}

// The targets `comm` holds exactly once (those `picked` says): its members' partial checksums
// combine to each dataset's.
template <class Picked>
void verify_checksums(MPI_Comm comm, const std::vector<Target>& targets,
                      const std::vector<PartialCrc>& local, Picked picked_target) {
  std::vector<std::size_t> picked(targets.size(), SIZE_MAX);
  std::vector<std::size_t> of;  // the picked targets' indices
  std::vector<DatasetExtent> extents;
  for (std::size_t t = 0; t < targets.size(); ++t)
    if (picked_target(targets[t])) {
      picked[t] = of.size();
      of.push_back(t);
      extents.push_back(
          {targets[t].file->name, targets[t].file->numel, dtype_size(targets[t].file->dtype)});
    }
  std::vector<PartialCrc> mine;
  for (PartialCrc c : local)
    if (picked[c.dataset] != SIZE_MAX) {
      c.dataset = picked[c.dataset];
      mine.push_back(c);
    }
  const std::vector<uint32_t> crc = combined_checksums(comm, mine, extents);
  for (std::size_t k = 0; k < of.size(); ++k) {
    const Target& tg = targets[of[k]];
    if (crc[k] == tg.file->crc) continue;
    const std::string what = tg.optimizer < 0 ? "parameter '" + tg.file->name + "'"
                                              : "optimizer state of '" + tg.file->name + "'";
    char buf[64];
    std::snprintf(buf, sizeof buf, " (stored crc32c %08x, computed %08x)", tg.file->crc, crc[k]);
    fail(Errc::Corrupt, what + ": checksum mismatch" + buf + ": the file is corrupt");
  }
}

// Pass 1 (verify): opens the file and checks every rank's ranges of every dataset (inside the file,
// the checksums), before anything is copied. Each shard group holds every parameter once; optimizer
// state too, or with HFSDP the whole job does (and the master pieces, Target::in_piece).
std::unique_ptr<LoadFile> open_verified(MPI_Comm all, MPI_Comm shard, bool hfsdp,
                                        const std::string& path,
                                        const std::vector<FileRange>& ranges,
                                        const std::vector<Target>& targets, DirectReads& direct) {
  std::unique_ptr<LoadFile> file;
  agree_on(all, [&] {
    file = std::make_unique<LoadFile>(path);
    file->file.advise_sequential();
    for (const FileRange& rg : ranges)
      if (rg.file_offset + rg.bytes > file->map.size())
        fail(Errc::Corrupt, "'" + path + "': " + targets[rg.target].file->name +
                                " runs past the end of the file (truncated file)");
  });
  try {
    agree_on(all, [&] {
      const std::vector<PartialCrc> crc = checksum(*file, ranges, targets, direct);
      if (!hfsdp) return verify_checksums(shard, targets, crc, [](const Target&) { return true; });
      verify_checksums(shard, targets, crc, [](const Target& t) { return !t.in_piece(); });
      verify_checksums(all, targets, crc, [](const Target& t) { return t.in_piece(); });
    });
  } catch (...) {
    direct.restore();  // some rank failed: the bytes read directly give back what they replaced
    throw;
  }
  return file;
}

// Where each range may be read into during the verify pass (DirectReads): its place in a shard or
// optimizer state buffer that exists now, in host memory, when the file holds the model's dtype;
// nullptr for the rest (device memory, which is filled through host copies made after
// verification; a conversion; state not yet allocated, which verification must not allocate).
std::vector<char*> direct_destinations(Context& ctx, const LoadRequest& r,
                                       const std::vector<Target>& targets,
                                       const std::vector<FileRange>& ranges) {
  std::vector<char*> to(ranges.size(), nullptr);
  if (!ctx.shard_memory().host_accessible()) return to;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const FileRange& rg = ranges[i];
    const Target& tg = targets[rg.target];
    if (tg.file->dtype != tg.unit->layout().param(tg.param).dtype) continue;
    char* d = static_cast<char*>(
        tg.optimizer < 0
            ? tg.unit->shard_data()
            : r.optimizers[static_cast<std::size_t>(tg.optimizer)]->state(*tg.unit, tg.buffer));
    if (d) to[i] = range_start(d, rg, tg);
  }
  return to;
}

// Pass 2 (place): copies (or converts) the verified ranges over the shards and optimizer state.
// State buffers are allocated (zeros) even where this rank holds none of a unit's parameters, so
// every rank's optimizer agrees on what exists. Device shards are filled through one host copy of
// each buffer (a unit's master copy, an optimizer state buffer: shared by the unit's parameters;
// what the file does not cover keeps its value), copied back once every range is in.
void place_ranges(Context& ctx, MPI_Comm all, const LoadRequest& r,
                  const std::vector<Target>& targets, const std::vector<FileRange>& ranges,
                  const LoadFile& file, const DirectReads& direct) {
  MemorySpace& memory = ctx.memory();
  const bool staged = !ctx.shard_memory().host_accessible();
  std::vector<char*> destination(targets.size());
  struct Staging {
    char* device;
    std::vector<char> host;
  };
  std::vector<Staging> staging;
  for (std::size_t t = 0; t < targets.size(); ++t) {
    const Target& tg = targets[t];
    char* d = static_cast<char*>(
        tg.optimizer < 0 ? tg.unit->shard_data()
                         : r.optimizers[static_cast<std::size_t>(tg.optimizer)]->ensure_state(
                               *tg.unit, tg.buffer));
    destination[t] = d;
    if (!staged) continue;
    auto same = std::find_if(staging.begin(), staging.end(),
                             [&](const Staging& b) { return b.device == d; });
    if (same == staging.end()) {
      Staging& b = staging.emplace_back(Staging{d, {}});
      b.host.resize(tg.optimizer < 0 ? tg.unit->bytes().masters() : tg.unit->grad_shard_bytes());
      memory.copy(b.host.data(), d, b.host.size());
      same = staging.end() - 1;
    }
    destination[t] = same->host.data();
  }
  if (staged) memory.synchronize();
  // Each range is copied from the page cache (pass 1 just read it) through the mapping straight
  // into its destination, but for the pieces pass 1 read there directly, or into an aligned buffer
  // when it must be converted. An error here means the file changed under the load; every rank
  // reports it alike.
  agree_on(all, [&] {
    std::vector<double> aligned;
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      const FileRange& rg = ranges[i];
      const Target& tg = targets[rg.target];
      const DType model_t = tg.unit->layout().param(tg.param).dtype;
      char* dst = range_start(destination[rg.target], rg, tg);
      const bool same = tg.file->dtype == model_t;
      if (!same) aligned.resize((rg.bytes + sizeof(double) - 1) / sizeof(double));
      char* to = same ? dst : reinterpret_cast<char*>(aligned.data());
      for (uint64_t p = 0, count = load_piece_count(rg.bytes); p < count;) {
        if (direct.direct(i, p)) {
          ++p;
          continue;
        }
        uint64_t end = p + 1;  // a run of pieces still to copy
        while (end < count && !direct.direct(i, end)) ++end;
        const uint64_t at = p * kLoadPiece, n = std::min(end * kLoadPiece, rg.bytes) - at;
        file.map.guarded(rg.file_offset + at, n, tg.file->name,
                         [to, at](const char* src, uint64_t k) { std::memcpy(to + at, src, k); });
        p = end;
      }
      if (!same) host::convert(dst, model_t, aligned.data(), tg.file->dtype, rg.slice.length);
    }
  });
  if (staged) {
    for (const Staging& b : staging) memory.copy(b.device, b.host.data(), b.host.size());
    memory.synchronize();  // before `staging` goes
  }
}

// What is not data: each optimizer's hyperparameters (when its groups match the file's) and
// step counts, and the scaler.
void apply_state(Context& ctx, const Match& m, const Catalog& c, GradScaler* scaler) {
  for (std::size_t k = 0; k < m.optimizers.size(); ++k) {
    const OptimizerMatch& om = m.optimizers[k];
    Optimizer& o = *om.optimizer;
    if (!om.same_kind) continue;
    for (int g = 0; om.same_groups && g < o.num_groups(); ++g)
      o.set_hyperparams(g, om.file->groups[static_cast<std::size_t>(g)]);
    for (const Unit* u : o.units()) {
      auto it = m.steps.find({static_cast<int>(k), u});
      if (it == m.steps.end()) continue;
      const UnitSteps& us = it->second;
      const auto zero = [&](int b) {
        if (void* p = o.state(*u, b)) ctx.shard_memory().zero(p, u->grad_shard_bytes());
      };
      for (int b : us.absent_buffers) zero(b);
      if (std::find(us.steps.begin(), us.steps.end(), -1) != us.steps.end()) {
        // saved before any update: no state
        for (int b = 0; b < Optimizer::max_state_buffers(o.kind()); ++b) zero(b);
        o.set_steps(*u, 0);
      } else {
        for (std::size_t i = 0; i < us.steps.size(); ++i)
          if (us.steps[i] >= 0) o.set_steps(*u, i, us.steps[i]);
      }
    }
  }
  if (scaler && c.scaler.present)
    scaler->restore(c.scaler.scale, static_cast<int>(c.scaler.growth_tracker));
}

// Testing hook, compiled only with FSDP_TEST_HOOKS: FSDP_CKPT_TEST_TRUNCATE_LOAD=1 makes world
// rank 0 truncate the file to nothing once every rank has verified it (test_checkpoint_errors:
// the place phase then fails with Errc::Io on every rank instead of ending in SIGBUS).
void maybe_truncate_for_test(MPI_Comm all, const std::string& path) {
#ifdef FSDP_TEST_HOOKS
  if (!env(Env::CkptTestTruncateLoad)) return;
  int rank = 0;
  MPI_Comm_rank(all, &rank);
  if (rank == 0) PosixFile(path, O_WRONLY).resize(0);
  MPI_Barrier(all);
#else
  (void)all, (void)path;
#endif
}

}  // namespace

void CheckpointService::prepare_load(const LoadRequest& r,
                                     const std::optional<Error>& local_error) {
  wait_pending();
  ctx_.scheduler().quiesce();
  ctx_.before_shard_update();  // nothing queued still reads or writes the shards
  agree(ctx_.groups().world(), "checkpoint load arguments", request_fingerprint(r), local_error);
  // Every rank's earlier reads of shards are done (the agreement): units used by any subset of
  // ranks take the load's writes in an update phase, ended when the load returns.
  ctx_.step_boundary().begin_collective_update();
  ensure_comms();
  for (const Unit* u : ctx_.units())
    if (u->is_unsharded())
      fail(Errc::State, u->label() +
                            " is unsharded: reshard every unit before loading (its "
                            "unsharded copy would keep the old values)");
}

LoadReport CheckpointService::load(const LoadRequest& r, const std::optional<Error>& local_error) {
  Trace& trace = ctx_.trace();
  std::optional<TraceSpan> phase(std::in_place, trace, "checkpoint_load_prepare", r.path, 0);
  struct EndUpdate {  // publishes the loaded shards (or what a failed load left), on any exit
    StepBoundary& b;
    ~EndUpdate() {
      try {
        b.end_update();
      } catch (...) {  // an MPI failure here is reported by the next call that reads
      }
    }
  } end_update{ctx_.step_boundary()};
  prepare_load(r, local_error);
  // Read once, by rank 0: every rank sees the same file and the same error.
  phase.emplace(trace, "checkpoint_load_catalog", r.path, 0);
  const Catalog catalog = shared_catalog(all_, r.path);
  phase.emplace(trace, "checkpoint_load_match", r.path, 0);
  const Match m = match(ctx_, catalog, r);
  if (!m.problems.empty() && !r.partial)
    fail(Errc::Mismatch, "'" + r.path + "' does not match the model (nothing was loaded):" +
                             problem_list(m.problems));
  const std::vector<FileRange> ranges = plan_reads(m.targets);
  phase.emplace(trace, "checkpoint_load_verify", r.path, 0);
  DirectReads direct(direct_destinations(ctx_, r, m.targets, ranges));
  const std::unique_ptr<LoadFile> file =
      open_verified(all_, shard_, ctx_.options().hfsdp, r.path, ranges, m.targets, direct);
  maybe_truncate_for_test(all_, r.path);
  // Everything is verified: from here on the destinations change.
  phase.emplace(trace, "checkpoint_load_place", r.path, 0);
  place_ranges(ctx_, all_, r, m.targets, ranges, *file, direct);
  for (Unit* u : ctx_.units())  // split masters: the trainable blocks from the loaded pieces
    if (u->split_masters()) u->gather_update_pieces();
  phase.emplace(trace, "checkpoint_load_apply", r.path, 0);
  apply_state(ctx_, m, catalog, r.model_only ? nullptr : r.scaler);
  ctx_.shard_memory().handover_to_caller();  // the caller's stream sees the loaded values
  return m.report;
}

}  // namespace fsdp::ckpt
