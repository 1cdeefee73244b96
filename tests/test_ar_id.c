/* The multi-process all-reduce's unique id (include/prezero/allreduce.h), without a GPU: the
 * rendezvous directory is made and removed, a foreign id and bad arguments are refused, and
 * joining a group without a GPU (or without the CUDA backend) returns a status, never hangs. */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include "prezero/allreduce.h"
#include "backend/ar_mp_id.h"
#include "pz_test.h"

int main(void) {
  pz_ar_unique_id id, id2;
  CHECK_ST(pz_ar_get_unique_id(NULL), PZ_ERR_INVALID_ARG);
  CHECK_OK(pz_ar_get_unique_id(&id));
  CHECK_OK(pz_ar_get_unique_id(&id2));
  pz_ar_id_layout L, L2;
  CHECK_OK(pz_ar_id_parse(&id, &L));
  CHECK_OK(pz_ar_id_parse(&id2, &L2));
  CHECK(strcmp(L.dir, L2.dir) != 0); /* two ids, two directories */
  CHECK(L.nonce != L2.nonce);
  struct stat sb;
  CHECK(stat(L.dir, &sb) == 0 && S_ISDIR(sb.st_mode) && (sb.st_mode & 077) == 0);
  CHECK_OK(pz_ar_unique_id_remove(&id));
  CHECK(stat(L.dir, &sb) != 0);
  CHECK_OK(pz_ar_unique_id_remove(&id)); /* already gone: fine */
  pz_ar_unique_id junk;
  memset(&junk, 0x41, sizeof junk);
  CHECK_ST(pz_ar_unique_id_remove(&junk), PZ_ERR_INVALID_ARG);
  pz_ar_comm *c = (pz_ar_comm *)&junk;
  CHECK(pz_ar_comm_init_rank(&c, 2, 0, junk, 0, 100) != PZ_OK);
  CHECK(c == NULL);
  c = (pz_ar_comm *)&junk;
  CHECK(pz_ar_comm_init_rank(&c, 0, 0, id2, 0, 100) != PZ_OK); /* world 0 */
  CHECK(c == NULL);
#ifdef PZ_HAVE_CUDA
  CHECK_ST(pz_ar_comm_init_rank(&c, 2, 0, junk, 0, 100), PZ_ERR_INVALID_ARG);
  CHECK_ST(pz_ar_comm_init_rank(&c, 2, 2, id2, 0, 100), PZ_ERR_INVALID_ARG);
#endif
  CHECK(pz_ar_comm_rank(NULL) == -1 && pz_ar_comm_world(NULL) == -1 && pz_ar_comm_device(NULL) == -1);
  pz_ar_comm_destroy(NULL);
  CHECK_OK(pz_ar_unique_id_remove(&id2));

  /* An id is bytes from another process: one naming any other directory is refused, and removal
   * deletes only the rendezvous's own files (it once unlinked every file of the named directory). */
  char victim[] = "/tmp/pz_ar_victim.XXXXXX", keep[64], stray[PZ_AR_ID_DIR_MAX + 16], rfile[PZ_AR_ID_DIR_MAX + 16];
  CHECK(mkdtemp(victim) != NULL);
  snprintf(keep, sizeof keep, "%s/precious.txt", victim);
  FILE *f = fopen(keep, "w");
  CHECK(f != NULL);
  if (f) fclose(f);
  pz_ar_unique_id forged;
  CHECK_OK(pz_ar_get_unique_id(&forged));
  CHECK_OK(pz_ar_id_parse(&forged, &L));
  rmdir(L.dir);
  snprintf(((pz_ar_id_layout *)forged.internal)->dir, PZ_AR_ID_DIR_MAX, "%s", victim);
  CHECK_ST(pz_ar_unique_id_remove(&forged), PZ_ERR_INVALID_ARG);
  CHECK(!strcmp(pz_last_error(), "not an all-reduce unique id (make it with pz_ar_get_unique_id and copy all 256 bytes)"));
  CHECK_ST(pz_ar_unique_id_write_file(&forged, "/tmp/pz_ar_victim.id"), PZ_ERR_INVALID_ARG);
  CHECK(stat(keep, &sb) == 0);
  snprintf(((pz_ar_id_layout *)forged.internal)->dir, PZ_AR_ID_DIR_MAX, "/tmp/../%s/pz_ar.abc123", victim + 5);
  CHECK_ST(pz_ar_unique_id_remove(&forged), PZ_ERR_INVALID_ARG);
  CHECK(stat(keep, &sb) == 0);
  /* a real id's directory holding a file the rendezvous did not write: that file stays */
  pz_ar_unique_id id3;
  CHECK_OK(pz_ar_get_unique_id(&id3));
  CHECK_OK(pz_ar_id_parse(&id3, &L));
  snprintf(stray, sizeof stray, "%s/stray", L.dir);
  snprintf(rfile, sizeof rfile, "%s/hx1", L.dir);
  FILE *f1 = fopen(stray, "w"), *f2 = fopen(rfile, "w");
  CHECK(f1 && f2);
  if (f1) fclose(f1);
  if (f2) fclose(f2);
  CHECK_OK(pz_ar_unique_id_remove(&id3));
  CHECK(stat(rfile, &sb) != 0);
  CHECK(stat(stray, &sb) == 0);
  unlink(stray);
  CHECK_OK(pz_ar_unique_id_remove(&id3));
  CHECK(stat(L.dir, &sb) != 0);
  unlink(keep);
  rmdir(victim);
  TEST_DONE();
}
