#include "checkpoint/collective_error.hpp"

#include <new>
#include <string>
#include <vector>

#include "core/mpi_check.hpp"

namespace fsdp::ckpt {

void unify_error(MPI_Comm comm, const std::optional<Error>& local) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
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

void run_unified(MPI_Comm comm, const std::function<void()>& body) {
  std::optional<Error> local;
  try {
    body();
  } catch (const Error& e) {
    local = e;
  } catch (const std::bad_alloc&) {
    local = Error(Errc::OutOfMemory, "out of host memory");
  }
  unify_error(comm, local);
}

}  // namespace fsdp::ckpt
