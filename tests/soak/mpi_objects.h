/* Live MPI objects of this process, counted by interposing MPI's create and free calls
 * (mpi_objects.c). Link the program with ENABLE_EXPORTS so the definitions reach libfsdp. */
#ifndef FSDP_SOAK_MPI_OBJECTS_H
#define FSDP_SOAK_MPI_OBJECTS_H

#include <mpi.h>

typedef enum {
  MPI_OBJECT_COMM,
  MPI_OBJECT_WIN,
  MPI_OBJECT_TYPE,
  MPI_OBJECT_INFO,
  MPI_OBJECT_GROUP,
  MPI_OBJECT_FILE,
  MPI_OBJECT_REQUEST,
  MPI_OBJECT_KINDS
} mpi_object_kind_t;

static const char* const mpi_object_names[MPI_OBJECT_KINDS] = {
    "communicators", "windows", "datatypes", "infos", "groups", "files", "requests"};

long mpi_objects_live(mpi_object_kind_t kind);

#endif
