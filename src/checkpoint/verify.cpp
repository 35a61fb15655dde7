#include "checkpoint/verify.hpp"

#include <fcntl.h>

#include <cstdio>
#include <vector>

#include "base/agreement.hpp"
#include "base/crc32c.hpp"
#include "base/human_bytes.hpp"
#include "checkpoint/dataset_scan.hpp"
#include "checkpoint/from_rank0.hpp"
#include "checkpoint/partial_checksums.hpp"

namespace fsdp::ckpt {

bool verify_checkpoint(MPI_Comm comm, const std::string& path, const ReportSink& out) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // The datasets themselves are the authority; the index must agree with them.
  const Catalog c = shared_catalog(comm, path, CatalogSource::Walk);
  const Catalog indexed = shared_catalog(comm, path);
  const bool index_wrong = indexed.from_index && !same_datasets(c, indexed);
  const auto ds = labelled_datasets(c);
  uint64_t mine_total = 0, done = 0;
  for (const auto& d : ds) {
    const auto [a, b] = element_share(d.second.numel, rank, size);
    mine_total += (b - a) * dtype_size(d.second.dtype);
  }
  const bool progress = rank == 0 && out.progress;
  const auto n_ranks = static_cast<uint64_t>(size);
  std::vector<PartialCrc> partial;
  agree_on(comm, [&] {
    PosixFile f(path, O_RDONLY);
    for (std::size_t i = 0; i < ds.size(); ++i) {
      const DatasetInfo& d = ds[i].second;
      const auto [a, b] = element_share(d.numel, rank, size);
      uint32_t crc = 0;
      for_chunks(f, d, a, b, [&](uint64_t, uint64_t n, const char* p) {
        const uint64_t nb = n * dtype_size(d.dtype);
        crc = crc32c_combine(crc, crc32c(0, p, nb), nb);
        done += nb;
        if (progress) out.progress(done * n_ranks, mine_total * n_ranks);
      });
      partial.push_back({i, a, b - a, crc});
    }
  });
  const auto bad = failed_checksums(comm, ds, partial);
  if (rank == 0 && out.line) {
    for (const auto& b : bad) out.line("checksum mismatch: " + b);
    if (index_wrong)
      out.line("index: /index disagrees with the datasets it lists (loads would trust it)");
    else if (!indexed.from_index)
      out.line(
          "index: absent or out of date; loads read every dataset's attributes instead "
          "(slower with thousands of parameters; a new save writes a fresh one)");
    if (!bad.empty())
      out.line("FAILED: " + std::to_string(bad.size()) + " of " + std::to_string(ds.size()) +
               " datasets are corrupt");
    else if (index_wrong)
      out.line("FAILED: the index is wrong");
    else
      out.line("OK: " + std::to_string(ds.size()) + " datasets, " + human_bytes(c.total_bytes()) +
               " verified");
  }
  return bad.empty() && !index_wrong;
}

}  // namespace fsdp::ckpt
