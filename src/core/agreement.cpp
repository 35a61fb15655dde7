#include "core/agreement.hpp"

#include <string>
#include <vector>

#include "core/mpi_check.hpp"

namespace fsdp {
namespace {

// Lists at most a few ranks, so a 10,000-rank job gets a readable message.
std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  const std::size_t shown = ranks.size() < 8 ? ranks.size() : 8;
  for (std::size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > shown) s += " and " + std::to_string(ranks.size() - shown) + " more";
  return s;
}

}  // namespace

void agree(const Group& group, const char* what, uint64_t fingerprint,
           const std::optional<Error>& local_error) {
  const uint64_t mine[2] = {local_error ? 1u : 0u, fingerprint};
  std::vector<uint64_t> all(2 * static_cast<std::size_t>(group.size));
  mpi_check(MPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, group.comm),
            "MPI_Allgather");
  std::vector<int> invalid, differ;
  for (int r = 0; r < group.size; ++r) {
    if (all[2 * r] != 0) invalid.push_back(r);
    if (all[2 * r + 1] != all[1]) differ.push_back(r);
  }
  if (local_error) throw *local_error;
  if (!invalid.empty())
    fail(Errc::Mismatch, std::string(what) + ": rank(s) " + rank_list(invalid) +
                             " rejected their arguments, so the call fails on every rank");
  if (!differ.empty())
    fail(Errc::Mismatch, std::string(what) + " differ across ranks: rank(s) " + rank_list(differ) +
                             " passed something other than rank 0 did (this rank is " +
                             std::to_string(group.rank) + ")");
}

}  // namespace fsdp
