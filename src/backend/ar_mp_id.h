/* Layout of pz_ar_unique_id (include/prezero/allreduce.h): magic, nonce, rendezvous directory.
 * Shared by the id functions (ar_mp_id.c, every build) and the CUDA communicator (cuda/ar_mp.c). */
#ifndef PZ_BACKEND_AR_MP_ID_H
#define PZ_BACKEND_AR_MP_ID_H
#include <stdint.h>
#include "prezero/allreduce.h"

#define PZ_AR_ID_MAGIC "PZARID1"
#define PZ_AR_ID_DIR_MAX 232

typedef struct pz_ar_id_layout {
  char magic[8];               /* PZ_AR_ID_MAGIC, NUL-terminated */
  uint64_t nonce;              /* random, written into every rendezvous file */
  char dir[PZ_AR_ID_DIR_MAX];  /* absolute path of the rendezvous directory, NUL-terminated */
} pz_ar_id_layout;

/* Copies the layout out of id; PZ_ERR_INVALID_ARG when it is not a pz_ar_get_unique_id id. */
pz_status pz_ar_id_parse(const pz_ar_unique_id *id, pz_ar_id_layout *out);
#endif
