/* A full disk, injected: an LD_PRELOAD library that makes writes to files under one directory fail
 * with ENOSPC once a byte budget is spent, the way a filesystem that fills up behaves (a last
 * short write, then ENOSPC). It wraps the write calls HDF5 (sec2) and MPICH's ROMIO use, and can
 * make statvfs report the budget as the free space. The test arms it by looking up enospc_arm()
 * at run time; unarmed, every call passes straight through. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char prefix[PATH_MAX];
static long long budget = -1; /* bytes left; -1: disarmed */
static long long written;     /* bytes written under the directory since arming */
static int fake_statvfs;      /* statvfs reports the budget as the free space */

/* Arms (bytes >= 0) or disarms (bytes < 0) the fault for files under `dir`; with `fake_space`,
 * statvfs of a path there says `bytes` are free. */
void enospc_arm(const char* dir, long long bytes, int fake_space) {
  pthread_mutex_lock(&lock);
  snprintf(prefix, sizeof prefix, "%s", dir ? dir : "");
  budget = bytes < 0 ? -1 : bytes;
  fake_statvfs = bytes >= 0 && fake_space;
  written = 0;
  pthread_mutex_unlock(&lock);
}

long long enospc_written(void) {
  return written;
}

static int under_prefix(int fd) {
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = '\0';
  return strncmp(path, prefix, strlen(prefix)) == 0;
}

/* How many of `want` bytes may be written now: all when disarmed or elsewhere, fewer when the
 * budget runs out, -1 (ENOSPC) when it is spent. */
static ssize_t allowance(int fd, size_t want) {
  pthread_mutex_lock(&lock);
  ssize_t ok = (ssize_t)want;
  if (budget >= 0 && want > 0 && under_prefix(fd)) {
    if (budget == 0) {
      ok = -1;
    } else if ((long long)want > budget) {
      ok = (ssize_t)budget;
    }
    if (ok > 0) budget -= ok, written += ok;
  }
  pthread_mutex_unlock(&lock);
  if (ok < 0) errno = ENOSPC;
  return ok;
}

typedef ssize_t (*write_fn)(int, const void*, size_t);
typedef ssize_t (*pwrite_fn)(int, const void*, size_t, off_t);
typedef ssize_t (*writev_fn)(int, const struct iovec*, int);
typedef ssize_t (*pwritev_fn)(int, const struct iovec*, int, off_t);
#define REAL(name, type)          \
  static type real_##name = NULL; \
  if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, const void* buf, size_t n) {
  REAL(write, write_fn);
  const ssize_t ok = allowance(fd, n);
  return ok < 0 ? -1 : real_write(fd, buf, (size_t)ok);
}

ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  REAL(pwrite, pwrite_fn);
  const ssize_t ok = allowance(fd, n);
  return ok < 0 ? -1 : real_pwrite(fd, buf, (size_t)ok, off);
}

ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) {
  REAL(pwrite64, pwrite_fn);
  const ssize_t ok = allowance(fd, n);
  return ok < 0 ? -1 : real_pwrite64(fd, buf, (size_t)ok, off);
}

/* Vectored writes: refused whole once the budget is spent, else passed through (counted). */
static ssize_t vector_allowance(int fd, const struct iovec* iov, int cnt) {
  size_t total = 0;
  for (int i = 0; i < cnt; ++i) total += iov[i].iov_len;
  const ssize_t ok = allowance(fd, total);
  return ok < (ssize_t)total && total > 0 ? (errno = ENOSPC, -1) : ok;
}

ssize_t writev(int fd, const struct iovec* iov, int cnt) {
  REAL(writev, writev_fn);
  return vector_allowance(fd, iov, cnt) < 0 ? -1 : real_writev(fd, iov, cnt);
}

ssize_t pwritev(int fd, const struct iovec* iov, int cnt, off_t off) {
  REAL(pwritev, pwritev_fn);
  return vector_allowance(fd, iov, cnt) < 0 ? -1 : real_pwritev(fd, iov, cnt, off);
}

int statvfs(const char* path, struct statvfs* st) {
  typedef int (*statvfs_fn)(const char*, struct statvfs*);
  REAL(statvfs, statvfs_fn);
  const int rc = real_statvfs(path, st);
  pthread_mutex_lock(&lock);
  if (rc == 0 && fake_statvfs && strncmp(path, prefix, strlen(prefix)) == 0 && st->f_frsize)
    st->f_bavail = st->f_bfree = (fsblkcnt_t)(budget / (long long)st->f_frsize);
  pthread_mutex_unlock(&lock);
  return rc;
}
