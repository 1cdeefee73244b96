/* The GEMM kernel choices and the tuner table, host code only (no CUDA): the flavours and their
 * names, pz_gemm_config, and the JSON table of tuned winners per device (cJSON) with its reader,
 * writer and look-up. The CUDA GEMM family (backend/cuda/gemm.h) and tuner (backend/cuda/tuner.h)
 * build on it; the CPU build has it too, so the reader is fuzzed and tested without a GPU. */
#ifndef PZ_BACKEND_GEMM_TABLE_H
#define PZ_BACKEND_GEMM_TABLE_H
#include <stddef.h>
#include "core/status.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Flavours (issue 3 numbering; docs/ARCHITECTURE.md §3). Every flavour computes the same function:
 *   with zero_init = true, C = A·Wᵀ (+bias) whatever C held;
 *   with zero_init = false, C must be zero on entry and ends as A·Wᵀ (+bias).
 * 1 SPLITK_ATOMIC: split-K, each split atomically adds its partial (fp32 RED / bf16 atomics).
 *   Does not zero C. Asked for with zero_init = true it runs as flavour 3.
 * 2 SPLITK_ZERO: split-K; split 0 zeroes its C tile at kernel start and raises a per-tile flag;
 *   the other splits wait for the flag before their atomics. Flags reset themselves.
 * 3 MEMSET_SPLITK: cudaMemset2DAsync of the C slice (one memset node), then flavour 1.
 * 4 FULLK: one CTA per n tile over all of K, plain stores (not split-K).
 * 5 SPLITK_SERIAL: deterministic split-K: split s waits for split s-1 of its tile (turnstile),
 *   then C = (s == 0 ? partial : C + partial). Needs no zeroing; bit-exact run to run.
 * 6 CUBLAS: cublasGemmEx (bf16 in, fp32 compute, beta 0), plus a bias kernel when bias != NULL.
 * PZ_GEMM_AUTO: the tuner's table for this (m bucket, n, k), else the heuristic. */
typedef enum pz_gemm_flavour {
  PZ_GEMM_AUTO = 0,
  PZ_GEMM_SPLITK_ATOMIC = 1,
  PZ_GEMM_SPLITK_ZERO = 2,
  PZ_GEMM_MEMSET_SPLITK = 3,
  PZ_GEMM_FULLK = 4,
  PZ_GEMM_SPLITK_SERIAL = 5,
  PZ_GEMM_CUBLAS = 6,
  PZ_GEMM_FLAVOUR_COUNT
} pz_gemm_flavour;

/* Short name of a flavour ("atomic", "zero", "memset", "fullk", "serial", "cublas", "auto"). */
const char *pz_gemm_flavour_name(pz_gemm_flavour f);
/* Parses a name above or a digit 0..6; returns PZ_GEMM_FLAVOUR_COUNT when unknown. */
pz_gemm_flavour pz_gemm_flavour_parse(const char *s);

/* A kernel choice. splits: K slices (1 for FULLK / CUBLAS); wt: output columns per warp / 16
 * (1 -> 16, 2 -> 32; forced to 1 for m > 64); warps: 4 or 8 per CTA; wn: 0 = the CTA's warps
 * share its columns and interleave its K chunks (reduced in shared memory, fixed order),
 * 1 = each warp owns columns of its own (CTA tile = warps*16*wt columns, must divide n) and
 * the warps read the same A chunks (L1 hits); 2 = the staged cp.async kernel, removed (it won no
 * H200 row, bench/results/gemm_h200.json): refused; 3 = the Hopper TMA + wgmma split-K kernel (wt = 64-row W tiles per CTA: 1, 2, 4;
 * wt 1 with warps 9 is its token split, two warpgroups per W tile; warps is otherwise ignored);
 * 4 = the Hopper stream-K kernel: a persistent grid of `splits` CTAs (the SM count) sharing the
 * (tile, k-block) units evenly, atomic flavour only (1, or 3 with its memset node).
 * 0 in splits/wt/warps = heuristic/table.
 * bn (wn 3 only): the token tile of the wgmma kernel, 16..256 (128 at wt 4), a power of two; 0 = the
 * smallest power of two >= m (pz_gemm_wgmma_bn). A smaller tile runs m / bn token tiles side by side:
 * more CTAs for the short-K shapes (k <= 1024) where one tile of all m tokens leaves most SMs idle. */
typedef struct pz_gemm_config {
  pz_gemm_flavour flavour;
  int splits;
  int wt;
  int warps;
  int wn;
  int bn;
} pz_gemm_config;

/* True when bn is a token tile the wgmma split-K kernel runs with wt 64-row W tiles per CTA: 0 (one
 * tile of all m tokens), or a power of two in 16..256 (16..128 at wt 4). The one rule the table
 * reader, the resolver, the options check and the launcher apply. */
static inline int pz_gemm_bn_ok(int bn, int wt) {
  return bn == 0 || (bn >= 16 && bn <= (wt == 4 ? 128 : 256) && !(bn & (bn - 1)));
}

/* One tuned shape. cfg[f] / us[f]: the best config of flavour f and its median time in µs
 * (splits 0 / us 0 when f was not timed). best_nozero: fastest of the flavours valid with a
 * zeroed C and no zeroing (atomic, fullk, serial, cublas); best_zero: fastest of those that
 * zero or overwrite C themselves (zero, memset, fullk, serial, cublas). */
typedef struct pz_tuner_entry {
  int m_bucket, n, k;
  pz_gemm_config cfg[PZ_GEMM_FLAVOUR_COUNT];
  double us[PZ_GEMM_FLAVOUR_COUNT];
  pz_gemm_flavour best_nozero, best_zero;
} pz_tuner_entry;

typedef struct pz_tuner_table {
  char device[256];
  int sm_count;
  char path[1024]; /* the JSON file this table loads from and saves to */
  char source[16];  /* where the entries came from: "cache", "built-in" or "none" */
  int count, cap;
  pz_tuner_entry *e;
} pz_tuner_table;

/* m bucket: m (tokens) rounded up to a power of two (1, 2, 4, ..., 256). */
int pz_tuner_m_bucket(int m);
/* Reads table JSON text (len bytes, need not be NUL-terminated) into t, which
 * pz_tuner_table_init set up (or zeroed with device / sm_count filled in): a tree {device,
 * sm_count, entries: [{m, n, k, flavours: {name: {splits, wt, warps, wn, us}}, best_nozero,
 * best_zero}]} whose device and sm_count equal t's. Malformed JSON, another device, or a missing
 * entries array add nothing and are not errors. Entries are checked before they are kept:
 * m a power of two in 1..256, n and k positive multiples of 64 up to 2^20, and per flavour splits
 * 1..4096, wt 1..8, warps 1..32 (the wgmma kernels count their producer warp: 5 / 9), wn 0..4 and us
 * finite and >= 0, all integers; a flavour outside these is
 * dropped from its entry (a best_* naming a dropped or unknown flavour becomes auto), an entry
 * with bad m / n / k is dropped whole. *dropped (may be NULL) gets the number of entries and
 * flavours dropped. The GEMM resolver still checks each choice against the shape when it is used.
 * Errors: PZ_ERR_OOM. */
pz_status pz_tuner_table_load_text(pz_tuner_table *t, const char *text, size_t len, int *dropped);

/* Sets up an empty table for (device, sm_count) and loads
 * cache_dir (the handle's options: PREZERO_CACHE_DIR, default ~/.cache/prezero)/gemm_<device>_<sm>sm.json (characters of the
 * device name other than [A-Za-z0-9] become '_') when it exists and its device/sm_count match;
 * otherwise the table built into the library for that device (backend/tables/gemm_tables.h),
 * unless builtin is 0 (PREZERO_GEMM_BUILTIN=0). t->source says which. A missing or malformed file is not an
 * error (table stays empty). Errors: PZ_ERR_OOM. */
pz_status pz_tuner_table_init(pz_tuner_table *t, const char *device, int sm_count, const char *cache_dir,
                              int builtin);
/* Frees the entries; t itself is the caller's. */
void pz_tuner_table_free(pz_tuner_table *t);
/* Entry for (bucket(m), n, k), or NULL. */
const pz_tuner_entry *pz_tuner_lookup(const pz_tuner_table *t, int m, int n, int k);
/* Inserts or replaces the entry with the same key. PZ_ERR_OOM. */
pz_status pz_tuner_put(pz_tuner_table *t, const pz_tuner_entry *e);
/* Writes the table to t->path (creating the directory). PZ_ERR_IO. */
pz_status pz_tuner_save(const pz_tuner_table *t);
/* The table as a cJSON tree {device, sm_count, entries: [...]} (caller deletes with
 * cJSON_Delete); NULL when an allocation fails. Used by pz_tuner_save and the bench. */
struct cJSON;
struct cJSON *pz_tuner_to_json(const pz_tuner_table *t);

#ifdef __cplusplus
}
#endif
#endif
