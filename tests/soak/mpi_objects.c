/* Counts the MPI objects alive in this process: every call that creates or frees a communicator,
 * window, datatype, info, group, file or request, interposed through MPI's profiling interface
 * (the program's definitions take the place of MPICH's for libfsdp and HDF5 alike; each calls the
 * PMPI_ original). A leak shows as a count that grows from one sample to the next. */
#include "mpi_objects.h"

static long live[MPI_OBJECT_KINDS];

/* Atomic: libfsdp's progress thread calls MPI too. */
static void add(mpi_object_kind_t kind, long delta) {
  __atomic_fetch_add(&live[kind], delta, __ATOMIC_RELAXED);
}

long mpi_objects_live(mpi_object_kind_t kind) {
  return __atomic_load_n(&live[kind], __ATOMIC_RELAXED);
}

static int counted(int rc, mpi_object_kind_t kind, long delta) {
  if (rc == MPI_SUCCESS) add(kind, delta);
  return rc;
}

/* Communicators */
int MPI_Comm_dup(MPI_Comm c, MPI_Comm* out) {
  return counted(PMPI_Comm_dup(c, out), MPI_OBJECT_COMM, 1);
}
int MPI_Comm_split(MPI_Comm c, int color, int key, MPI_Comm* out) {
  const int rc = PMPI_Comm_split(c, color, key, out);
  return counted(rc, MPI_OBJECT_COMM, *out != MPI_COMM_NULL);
}
int MPI_Comm_split_type(MPI_Comm c, int type, int key, MPI_Info info, MPI_Comm* out) {
  const int rc = PMPI_Comm_split_type(c, type, key, info, out);
  return counted(rc, MPI_OBJECT_COMM, *out != MPI_COMM_NULL);
}
int MPI_Comm_create(MPI_Comm c, MPI_Group g, MPI_Comm* out) {
  const int rc = PMPI_Comm_create(c, g, out);
  return counted(rc, MPI_OBJECT_COMM, *out != MPI_COMM_NULL);
}
int MPI_Comm_free(MPI_Comm* c) {
  return counted(PMPI_Comm_free(c), MPI_OBJECT_COMM, -1);
}

/* Windows */
int MPI_Win_allocate_shared(MPI_Aint size, int unit, MPI_Info info, MPI_Comm c, void* base,
                            MPI_Win* win) {
  return counted(PMPI_Win_allocate_shared(size, unit, info, c, base, win), MPI_OBJECT_WIN, 1);
}
int MPI_Win_allocate(MPI_Aint size, int unit, MPI_Info info, MPI_Comm c, void* base, MPI_Win* win) {
  return counted(PMPI_Win_allocate(size, unit, info, c, base, win), MPI_OBJECT_WIN, 1);
}
int MPI_Win_create(void* base, MPI_Aint size, int unit, MPI_Info info, MPI_Comm c, MPI_Win* win) {
  return counted(PMPI_Win_create(base, size, unit, info, c, win), MPI_OBJECT_WIN, 1);
}
int MPI_Win_free(MPI_Win* win) {
  return counted(PMPI_Win_free(win), MPI_OBJECT_WIN, -1);
}

/* Datatypes (committed or not: every constructor's result needs a free) */
int MPI_Type_contiguous(int n, MPI_Datatype old, MPI_Datatype* out) {
  return counted(PMPI_Type_contiguous(n, old, out), MPI_OBJECT_TYPE, 1);
}
int MPI_Type_create_hindexed(int n, const int lens[], const MPI_Aint displs[], MPI_Datatype old,
                             MPI_Datatype* out) {
  return counted(PMPI_Type_create_hindexed(n, lens, displs, old, out), MPI_OBJECT_TYPE, 1);
}
int MPI_Type_create_struct(int n, const int lens[], const MPI_Aint displs[],
                           const MPI_Datatype types[], MPI_Datatype* out) {
  return counted(PMPI_Type_create_struct(n, lens, displs, types, out), MPI_OBJECT_TYPE, 1);
}
int MPI_Type_create_resized(MPI_Datatype old, MPI_Aint lb, MPI_Aint extent, MPI_Datatype* out) {
  return counted(PMPI_Type_create_resized(old, lb, extent, out), MPI_OBJECT_TYPE, 1);
}
int MPI_Type_vector(int n, int len, int stride, MPI_Datatype old, MPI_Datatype* out) {
  return counted(PMPI_Type_vector(n, len, stride, old, out), MPI_OBJECT_TYPE, 1);
}
int MPI_Type_free(MPI_Datatype* t) {
  return counted(PMPI_Type_free(t), MPI_OBJECT_TYPE, -1);
}

/* Info objects, groups, files */
int MPI_Info_create(MPI_Info* info) {
  return counted(PMPI_Info_create(info), MPI_OBJECT_INFO, 1);
}
int MPI_Info_dup(MPI_Info in, MPI_Info* out) {
  return counted(PMPI_Info_dup(in, out), MPI_OBJECT_INFO, 1);
}
int MPI_Info_free(MPI_Info* info) {
  return counted(PMPI_Info_free(info), MPI_OBJECT_INFO, -1);
}
int MPI_Comm_group(MPI_Comm c, MPI_Group* g) {
  return counted(PMPI_Comm_group(c, g), MPI_OBJECT_GROUP, 1);
}
int MPI_Group_incl(MPI_Group g, int n, const int ranks[], MPI_Group* out) {
  return counted(PMPI_Group_incl(g, n, ranks, out), MPI_OBJECT_GROUP, 1);
}
int MPI_Group_free(MPI_Group* g) {
  return counted(PMPI_Group_free(g), MPI_OBJECT_GROUP, -1);
}
int MPI_File_open(MPI_Comm c, const char* name, int mode, MPI_Info info, MPI_File* fh) {
  return counted(PMPI_File_open(c, name, mode, info, fh), MPI_OBJECT_FILE, 1);
}
int MPI_File_close(MPI_File* fh) {
  return counted(PMPI_File_close(fh), MPI_OBJECT_FILE, -1);
}

/* Requests: created by the nonblocking calls, gone when a completion call sets them to
 * MPI_REQUEST_NULL (or MPI_Request_free). */
static long non_null(int n, const MPI_Request* r) {
  long k = 0;
  for (int i = 0; i < n; ++i) k += r[i] != MPI_REQUEST_NULL;
  return k;
}
int MPI_Isend(const void* buf, int n, MPI_Datatype t, int dest, int tag, MPI_Comm c,
              MPI_Request* r) {
  return counted(PMPI_Isend(buf, n, t, dest, tag, c, r), MPI_OBJECT_REQUEST, 1);
}
int MPI_Irecv(void* buf, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Request* r) {
  return counted(PMPI_Irecv(buf, n, t, src, tag, c, r), MPI_OBJECT_REQUEST, 1);
}
int MPI_Ibarrier(MPI_Comm c, MPI_Request* r) {
  return counted(PMPI_Ibarrier(c, r), MPI_OBJECT_REQUEST, 1);
}
int MPI_Wait(MPI_Request* r, MPI_Status* st) {
  const long before = non_null(1, r);
  const int rc = PMPI_Wait(r, st);
  add(MPI_OBJECT_REQUEST, non_null(1, r) - before);
  return rc;
}
int MPI_Waitall(int n, MPI_Request r[], MPI_Status st[]) {
  const long before = non_null(n, r);
  const int rc = PMPI_Waitall(n, r, st);
  add(MPI_OBJECT_REQUEST, non_null(n, r) - before);
  return rc;
}
int MPI_Test(MPI_Request* r, int* flag, MPI_Status* st) {
  const long before = non_null(1, r);
  const int rc = PMPI_Test(r, flag, st);
  add(MPI_OBJECT_REQUEST, non_null(1, r) - before);
  return rc;
}
int MPI_Testall(int n, MPI_Request r[], int* flag, MPI_Status st[]) {
  const long before = non_null(n, r);
  const int rc = PMPI_Testall(n, r, flag, st);
  add(MPI_OBJECT_REQUEST, non_null(n, r) - before);
  return rc;
}
int MPI_Request_free(MPI_Request* r) {
  const long before = non_null(1, r);
  const int rc = PMPI_Request_free(r);
  add(MPI_OBJECT_REQUEST, non_null(1, r) - before);
  return rc;
}
