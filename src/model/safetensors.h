/* safetensors reader (memory-mapped, header parsed with cJSON) and a small writer used by the
 * tests and tools. Format: https://github.com/huggingface/safetensors (README "Format"). */
#ifndef PZ_MODEL_SAFETENSORS_H
#define PZ_MODEL_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>
#include "core/status.h"

/* Tensor data are little-endian and used in place: the host must be little-endian. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "prezero's safetensors reader needs a little-endian host"
#endif

/* Element types a safetensors header may name (the format's Dtype list, huggingface/safetensors 0.8:
 * F4 = float4 e2m1, F6_* = float6, F8_E8M0 = the MX block-scale type, F8_*FNUZ = ROCm's fp8 variants,
 * C64 = complex64). Only the types
 * checkpoint.h names can be loaded as weights; the others are parsed so that a file holding them (an
 * unused scale of another format, say) still opens and their byte sizes are checked. */
typedef enum pz_st_dtype {
  PZ_ST_BOOL, PZ_ST_U8, PZ_ST_I8, PZ_ST_F8_E4M3, PZ_ST_F8_E5M2, PZ_ST_I16, PZ_ST_U16, PZ_ST_F16,
  PZ_ST_BF16, PZ_ST_I32, PZ_ST_U32, PZ_ST_F32, PZ_ST_F64, PZ_ST_I64, PZ_ST_U64,
  PZ_ST_F4, PZ_ST_F6_E2M3, PZ_ST_F6_E3M2, PZ_ST_F8_E8M0, PZ_ST_C64, PZ_ST_F8_E4M3FNUZ, PZ_ST_F8_E5M2FNUZ,
  PZ_ST_DTYPE_COUNT
} pz_st_dtype;

/* "BF16", "F8_E4M3", ... (the header's spelling); "?" out of range. */
const char *pz_st_dtype_name(pz_st_dtype t);
/* Bytes per element (1, 2, 4 or 8); 0 out of range and for the sub-byte types F4 / F6_* (see
 * pz_st_dtype_bits). */
size_t pz_st_dtype_size(pz_st_dtype t);
/* Bits per element (4, 6, 8, 16, 32 or 64); 0 out of range. A tensor's bytes are numel x bits / 8, which
 * the format requires to be whole. */
size_t pz_st_dtype_bits(pz_st_dtype t);

#define PZ_ST_MAX_DIMS 8

/* One tensor of a file: data points into the mapping (valid until pz_st_close). safetensors
 * packs tensors back to back, so data need not be aligned to the element size: read it with
 * memcpy unless ((uintptr_t)data % size) == 0. */
typedef struct pz_st_tensor {
  char *name;                   /* owned by the file */
  pz_st_dtype dtype;
  int ndim;                     /* 0 (scalar) .. PZ_ST_MAX_DIMS */
  int64_t shape[PZ_ST_MAX_DIMS];
  int64_t numel;
  const void *data;             /* little-endian, row-major */
  size_t nbytes;                /* numel * dtype size */
  const struct pz_st_file *file;
} pz_st_tensor;

typedef struct pz_st_file {
  char *path;
  void *map;                    /* whole file, read-only (NULL for an empty file) */
  size_t size;                  /* bytes */
  int n;                        /* tensors, in header order */
  pz_st_tensor *t;
} pz_st_file;

/* Maps `path` read-only and parses its header: an 8-byte little-endian header length N, N
 * bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
 * then the data (offsets relative to byte 8 + N).
 * Errors (each one line naming the file): PZ_ERR_IO for a file that cannot be opened or mapped,
 * is shorter than 8 bytes, is a Git LFS pointer (the text "version https://git-lfs.github.com/spec/..."), whose header length runs beyond the file or exceeds 256 MiB (taken
 * as corrupt), whose header is not valid
 * JSON (truncated or malformed), a tensor entry with a missing/ill-typed field, an unknown dtype,
 * data_offsets outside the data area or not matching shape x dtype size, two tensors whose data
 * ranges overlap (adjacent ranges and empty tensors are fine), a tensor name that is empty, holds
 * a NUL or another control character (below 0x20, or 0x7f), or appears twice in the header.
 * PZ_ERR_OOM. *out is NULL on error. */
pz_status pz_st_open(const char *path, pz_st_file **out);

/* Unmaps and frees; NULL is ignored. */
void pz_st_close(pz_st_file *f);

/* The tensor called `name`, or NULL (linear search; checkpoint.h indexes many files). */
const pz_st_tensor *pz_st_find(const pz_st_file *f, const char *name);

/* One tensor to write. */
typedef struct pz_st_write_entry {
  const char *name;
  pz_st_dtype dtype;
  int ndim;
  int64_t shape[PZ_ST_MAX_DIMS];
  const void *data;             /* numel * dtype size bytes */
} pz_st_write_entry;

/* Writes a safetensors file with the entries in the given order (data packed in that order,
 * header padded with spaces to a multiple of 8 bytes, as the reference writer does).
 * Errors: PZ_ERR_IO (cannot write), PZ_ERR_INVALID_ARG (NULL, ndim out of range), PZ_ERR_OOM. */
pz_status pz_st_write(const char *path, int n, const pz_st_write_entry *entries);
#endif
