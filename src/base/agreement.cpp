#include "base/agreement.hpp"

#include <new>
#include <string>
#include <vector>

#include "base/mpi_check.hpp"

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

std::optional<Error> attempt(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e;
  } catch (const std::bad_alloc&) {
    return Error(Errc::OutOfMemory, "out of host memory");
  }
  return std::nullopt;
}

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

void agree_error(MPI_Comm comm, const std::optional<Error>& local) {
  int rank = 0, size = 1;
  mpi_check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  mpi_check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  int mine = local ? rank : size, first = size;
  mpi_check(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce");
  if (first == size) return;
  std::string text = rank == first ? local->what() : std::string();
  int header[2] = {rank == first ? static_cast<int>(local->code()) : 0,
                   static_cast<int>(text.size())};
  mpi_check(MPI_Bcast(header, 2, MPI_INT, first, comm), "MPI_Bcast");
  text.resize(static_cast<std::size_t>(header[1]));
  mpi_check(MPI_Bcast(text.data(), header[1], MPI_CHAR, first, comm), "MPI_Bcast");
  if (rank == first) throw *local;
  fail(static_cast<Errc>(header[0]), "rank " + std::to_string(first) + ": " + text);
}

void agree_on(MPI_Comm comm, const std::function<void()>& body) {
  agree_error(comm, attempt(body));
}

}  // namespace fsdp
