/* pz_ar_get_unique_id / pz_ar_unique_id_remove (every build), and the multi-process
 * communicator's stubs when the CUDA backend is not built (include/prezero/allreduce.h). */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE
#include "backend/ar_mp_id.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "core/status.h"

_Static_assert(sizeof(pz_ar_id_layout) <= PZ_AR_UNIQUE_ID_BYTES, "id layout too large");

static uint64_t random_nonce(void) {
  uint64_t v = 0;
  int fd = open("/dev/urandom", O_RDONLY);
  if (fd >= 0) {
    if (read(fd, &v, sizeof v) != (ssize_t)sizeof v) v = 0;
    close(fd);
  }
  if (v == 0) { /* no urandom: time and pid */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    v = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
    if (v == 0) v = 1;
  }
  return v;
}

static int dir_usable(const char *d) {
  struct stat sb;
  return d && d[0] == '/' && stat(d, &sb) == 0 && S_ISDIR(sb.st_mode) && access(d, W_OK | X_OK) == 0;
}

pz_status pz_ar_get_unique_id(pz_ar_unique_id *out) {
  if (!out) return pz_error(PZ_ERR_INVALID_ARG, "pz_ar_get_unique_id: out is NULL");
  memset(out, 0, sizeof *out);
  const char *base = NULL;
  base = dir_usable("/dev/shm") ? "/dev/shm" : "/tmp"; /* shared by every process of the machine */
  pz_ar_id_layout L;
  memset(&L, 0, sizeof L);
  memcpy(L.magic, PZ_AR_ID_MAGIC, sizeof PZ_AR_ID_MAGIC);
  L.nonce = random_nonce();
  int n = snprintf(L.dir, sizeof L.dir, "%s/pz_ar.XXXXXX", base);
  if (n < 0 || (size_t)n >= sizeof L.dir)
    return pz_error(PZ_ERR_IO, "pz_ar_get_unique_id: rendezvous path under %s longer than %d bytes", base,
                    PZ_AR_ID_DIR_MAX - 1);
  if (!mkdtemp(L.dir))
    return pz_error(PZ_ERR_IO, "pz_ar_get_unique_id: cannot create a directory under %s: %s", base, strerror(errno));
  memcpy(out->internal, &L, sizeof L);
  return PZ_OK;
}

/* The directory pz_ar_get_unique_id makes: "<base>/pz_ar." and mkdtemp's 6 letters or digits, with no
 * "." or ".." component on the way. An id is plain bytes from another process (a file, a pipe):
 * anything else in it is refused, so that pz_ar_unique_id_remove never empties a directory it did
 * not make. */
static int id_dir_ok(const char *dir) {
  if (dir[0] != '/' || strstr(dir, "/./") || strstr(dir, "/../")) return 0;
  const char *base = strrchr(dir, '/') + 1;
  if (strncmp(base, "pz_ar.", 6) != 0 || strlen(base) != 12) return 0;
  for (const char *c = base + 6; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'))) return 0;
  return 1;
}

pz_status pz_ar_id_parse(const pz_ar_unique_id *id, pz_ar_id_layout *out) {
  if (!id) return pz_error(PZ_ERR_INVALID_ARG, "all-reduce id is NULL");
  memcpy(out, id->internal, sizeof *out);
  if (memcmp(out->magic, PZ_AR_ID_MAGIC, sizeof PZ_AR_ID_MAGIC) != 0 ||
      memchr(out->dir, 0, sizeof out->dir) == NULL || !id_dir_ok(out->dir))
    return pz_error(PZ_ERR_INVALID_ARG, "not an all-reduce unique id (make it with pz_ar_get_unique_id and copy "
                    "all %d bytes)", PZ_AR_UNIQUE_ID_BYTES);
  return PZ_OK;
}

/* A file the rendezvous writes (cuda/ar_mp.c): r<rank>, hx<rank>, ok<rank>, or publish()'s
 * temporary .tmp.<name>.<pid>. */
static int rendezvous_file(const char *name) {
  const char *digits = !strncmp(name, "r", 1) ? name + 1 : !strncmp(name, "hx", 2) || !strncmp(name, "ok", 2) ? name + 2
                     : NULL;
  if (!strncmp(name, ".tmp.", 5)) return 1;
  if (!digits || !*digits) return 0;
  for (; *digits; digits++)
    if (*digits < '0' || *digits > '9') return 0;
  return 1;
}

pz_status pz_ar_unique_id_remove(const pz_ar_unique_id *id) {
  pz_ar_id_layout L;
  PZ_CHECK(pz_ar_id_parse(id, &L));
  struct stat sb;
  if (lstat(L.dir, &sb) != 0) return PZ_OK; /* already gone */
  if (!S_ISDIR(sb.st_mode) || sb.st_uid != geteuid())
    return pz_error(PZ_ERR_INVALID_ARG, "pz_ar_unique_id_remove: %s is not a rendezvous directory of this user; "
                    "nothing removed", L.dir);
  DIR *d = opendir(L.dir);
  if (!d) return PZ_OK; /* already gone */
  struct dirent *e;
  char p[PZ_AR_ID_DIR_MAX + 300];
  while ((e = readdir(d)) != NULL) {
    if (!rendezvous_file(e->d_name)) continue; /* only what the rendezvous wrote */
    snprintf(p, sizeof p, "%s/%s", L.dir, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(L.dir);
  return PZ_OK;
}

#ifndef PZ_HAVE_CUDA
#define PZ_AR_NO_CUDA pz_error(PZ_ERR_UNSUPPORTED, "multi-process all-reduce: built without the CUDA backend")
pz_status pz_ar_comm_init_rank(pz_ar_comm **comm, int world, int rank, pz_ar_unique_id id, int device,
                               int timeout_ms) {
  if (comm) *comm = NULL;
  return PZ_AR_NO_CUDA;
}
pz_status pz_ar_comm_init_rank_config(pz_ar_comm **comm, const pz_ar_comm_config *cfg, pz_ar_unique_id id) {
  if (comm) *comm = NULL;
  return PZ_AR_NO_CUDA;
}
void pz_ar_comm_destroy(pz_ar_comm *comm) { (void)comm; }
int pz_ar_comm_rank(const pz_ar_comm *comm) { return -1; }
int pz_ar_comm_world(const pz_ar_comm *comm) { return -1; }
int pz_ar_comm_device(const pz_ar_comm *comm) { return -1; }
pz_status pz_ar_rmsnorm(pz_ar_comm *comm, const pz_ar_rmsnorm_params *p, pz_ar_stream stream) {
  return PZ_AR_NO_CUDA;
}
pz_status pz_ar_comm_check(pz_ar_comm *comm, pz_ar_stream stream) { return PZ_AR_NO_CUDA; }
#endif

/* ---------------------------------------------------------------- the id in a file */

pz_status pz_ar_unique_id_write_file(const pz_ar_unique_id *id, const char *path) {
  if (!path || !path[0]) return pz_error(PZ_ERR_INVALID_ARG, "pz_ar_unique_id_write_file: no path");
  pz_ar_id_layout L;
  PZ_CHECK(pz_ar_id_parse(id, &L));
  const size_t n = strlen(path);
  char *tmp = malloc(n + 16);
  if (!tmp) return pz_error(PZ_ERR_OOM, "pz_ar_unique_id_write_file: host allocation");
  snprintf(tmp, n + 16, "%s.XXXXXX", path); /* a fresh name per writer (O_EXCL), beside the target */
  pz_status st = PZ_OK;
  int fd = mkstemp(tmp);
  if (fd < 0) {
    st = pz_error(PZ_ERR_IO, "all-reduce id file %s: cannot create a temporary file beside it: %s; use a writable "
                  "directory", path, strerror(errno));
  } else {
    ssize_t w = -1;
    int err = 0;
    if (fchmod(fd, 0600) != 0) err = errno;
    if (!err) {
      w = write(fd, id->internal, PZ_AR_UNIQUE_ID_BYTES);
      if (w < 0) err = errno;
    }
    if (close(fd) != 0 && !err) err = errno;
    if (err || w != (ssize_t)PZ_AR_UNIQUE_ID_BYTES)
      st = pz_error(PZ_ERR_IO, "all-reduce id file %s: cannot write %s: %s", path, tmp,
                    err ? strerror(err) : "short write (file system full?)");
    else if (rename(tmp, path) != 0)
      st = pz_error(PZ_ERR_IO, "all-reduce id file %s: cannot rename %s onto it: %s", path, tmp, strerror(errno));
    if (st != PZ_OK) unlink(tmp);
  }
  free(tmp);
  return st;
}

pz_status pz_ar_unique_id_read_file(const char *path, int timeout_ms, pz_ar_unique_id *out) {
  if (!path || !path[0] || !out || timeout_ms < 0)
    return pz_error(PZ_ERR_INVALID_ARG, "pz_ar_unique_id_read_file: NULL path or out, or a negative timeout");
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    /* O_NONBLOCK: a FIFO at the path would block this open with no writer, past timeout_ms */
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd >= 0) {
      struct stat sb;
      if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return pz_error(PZ_ERR_IO, "all-reduce id file %s: not a regular file; rank 0 writes it with "
                        "pz_ar_unique_id_write_file", path);
      }
      pz_ar_unique_id id;
      const ssize_t r = read(fd, id.internal, PZ_AR_UNIQUE_ID_BYTES);
      char extra;
      const ssize_t more = r == (ssize_t)PZ_AR_UNIQUE_ID_BYTES ? read(fd, &extra, 1) : 0;
      close(fd);
      if (r != (ssize_t)PZ_AR_UNIQUE_ID_BYTES || more != 0)
        return pz_error(PZ_ERR_IO, "all-reduce id file %s: not %d bytes long; rank 0 writes it with "
                        "pz_ar_unique_id_write_file", path, PZ_AR_UNIQUE_ID_BYTES);
      pz_ar_id_layout L;
      if (pz_ar_id_parse(&id, &L) != PZ_OK)
        return pz_error(PZ_ERR_IO, "all-reduce id file %s: does not hold an all-reduce id; rank 0 writes it with "
                        "pz_ar_unique_id_write_file", path);
      *out = id;
      return PZ_OK;
    }
    if (errno != ENOENT)
      return pz_error(PZ_ERR_IO, "all-reduce id file %s: cannot open it: %s", path, strerror(errno));
    clock_gettime(CLOCK_MONOTONIC, &t);
    const double ms = 1e3 * (double)(t.tv_sec - t0.tv_sec) + 1e-6 * (double)(t.tv_nsec - t0.tv_nsec);
    if (ms >= (double)timeout_ms)
      return pz_error(PZ_ERR_TIMEOUT, "all-reduce id file %s: not there after %d ms; start rank 0 first, or check "
                      "that every rank names the same path", path, timeout_ms);
    struct timespec nap = {0, 2000000}; /* 2 ms */
    nanosleep(&nap, NULL);
  }
}
