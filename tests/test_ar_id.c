/* The multi-process all-reduce's unique id (include/prezero/allreduce.h), without a GPU: the
 * rendezvous directory is made and removed, a foreign id and bad arguments are refused, and
 * joining a group without a GPU (or without the CUDA backend) returns a status, never hangs. */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include <sys/stat.h>
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
  TEST_DONE();
}
