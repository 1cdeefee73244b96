/* CUDA MLA decode op (DeepSeek-V2/V3 / Kimi-K2 attention, absorbed form) with its q_b and o_proj
 * GEMMs on the split-K family and the qb_prezero / oproj_prezero slots (docs/ARCHITECTURE.md §2, §3). */
#ifndef PZ_BACKEND_CUDA_MLA_H
#define PZ_BACKEND_CUDA_MLA_H
#include <stdbool.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include "core/dtype.h"
#include "core/gate.h"
#include "core/ir.h"
#include "core/status.h"
#include "backend/cuda/gemm.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Device pointers of one MLA decode call; the same fields and shapes as pz_ref_mla_io
 * (backend/cpu/ref_ops.h), per rank: heads = p->n_heads, qh = nope + rope, kvw = kv_lora + rope. */
typedef struct pz_mla_cuda_io {
  const float *__restrict__ qkv_a; int64_t ld_qkv_a; /* q LoRA: f32 [m, q_lora + kv_lora + rope] */
  const float *__restrict__ q; int64_t ld_q;         /* no q LoRA: f32 [m, heads*qh] (q_proj output) */
  const float *__restrict__ kv_a; int64_t ld_kv_a;   /* no q LoRA: f32 [m, kvw] */
  const pz_bf16 *__restrict__ qa_norm_w;             /* [q_lora] */
  const pz_bf16 *__restrict__ qb_w;                  /* [heads*qh, q_lora] */
  const pz_bf16 *__restrict__ kva_norm_w;            /* [kv_lora] */
  const pz_bf16 *__restrict__ w_uk;                  /* [heads, nope, kv_lora] */
  const pz_bf16 *__restrict__ w_uv;                  /* [heads, v, kv_lora] */
  const pz_bf16 *__restrict__ o_w;                   /* [H, heads*v] */
  pz_bf16 *__restrict__ kv_cache;                    /* no block table: [m, cache_seq_stride], row j of sequence i at
                                                        i*stride + j*kvw; with one: the page pool [n_pages, 64, kvw] */
  int64_t cache_seq_stride;                          /* no block table: elements, multiple of 8, >= max_ctx*kvw */
  /* Paged cache (core/kv_pages.h): [m, ld_block_table] i32, device; row j of sequence i at
   * kv_cache + (block_table[i*ld + j/64]*64 + j%64)*kvw. Entries of the blocks a row reads
   * (0..pos[i]/64) must name pages of the pool (not checked on the device). NULL: contiguous. */
  const int32_t *__restrict__ block_table; int64_t ld_block_table;
  const int32_t *__restrict__ pos;                   /* [m] i32, device: position of the new token */
  /* NULL, or device i32 [1]: the real rows r of the batch (CUDA executor: a batch padded to its captured
   * size); rows i >= r still append their KV at pos[i] but attend position 0 only (one token: their
   * outputs are discarded). r <= 0 or r >= m: every row attends pos[i] + 1 positions. */
  const int32_t *__restrict__ rows;
  /* qb_prezero slot: NULL = q_b writes the op's scratch with zero_init = true (as without
   * prezero). Set: q_b writes this [m, heads*qh] f32 slice (row stride ld_qb_slot), with
   * zero_init = !qb_slot_zeroed. */
  float *qb_slot; int64_t ld_qb_slot; bool qb_slot_zeroed;
  /* o_proj output = partial [m, H] f32 (the oproj_prezero slot when set), written with
   * zero_init = !out_zeroed (out_zeroed: the slice is zero on entry, pre-zeroed by the donor). */
  float *out; int64_t ld_out; bool out_zeroed;
} pz_mla_cuda_io;

typedef struct pz_mla_cuda_ctx pz_mla_cuda_ctx;

/* Creates the op for one layer shape on the current device: validates p, sets the attention
 * kernel's shared-memory limit, reads the SM count and occupancy, and allocates the scratch for
 * up to m_max rows (q_a_layernorm output, q, absorbed q, split partials, latent output, o).
 * gemm: the split-K GEMM handle used for q_b and o_proj (borrowed; must outlive the op; one
 * stream at a time). Supported: kv_lora_rank in {96, 128, 256, 512}, (kv_lora + rope) % 32 == 0,
 * rope even <= 128, heads*qh, q_lora, heads*v and H multiples of 64 (the GEMM's rule).
 * Errors: PZ_ERR_INVALID_ARG, PZ_ERR_UNSUPPORTED (shape), PZ_ERR_CUDA, PZ_ERR_OOM. */
pz_status pz_mla_cuda_create(const pz_mla_params *p, int m_max, pz_gemm_ctx *gemm, pz_mla_cuda_ctx **out);
/* Frees the scratch (not the borrowed GEMM handle); NULL is ignored. */
void pz_mla_cuda_destroy(pz_mla_cuda_ctx *c);

/* KV split slots per sequence for m rows: PREZERO_MLA_SPLITS (1 = no split) when set, else
 * max(1, floor(resident attention CTAs / (m * head groups))), at most 64: one wave of CTAs; with
 * attention v3 and the balanced schedule, where that is below 4, floor(2 * resident CTAs / (m *
 * head groups)): two waves (PREZERO_MLA_WAVES=1 or PREZERO_MLA_BALANCE=0 keep one). Either is
 * clamped to the scratch: m*splits <= 2*max(m_max, resident CTAs / head groups). The grid has that
 * many slots per sequence; each step's balanced schedule (core/kv_sched.h) fills only the one-wave
 * share of them unless its contexts are unequal enough for the second wave to be faster, so equal
 * contexts run as with one wave. The slices are computed on the device from pos (the balanced
 * schedule, or with PREZERO_MLA_BALANCE=0 ceil((pos+1)/splits) rounded up to 32 positions), so a
 * captured graph stays right as positions advance. */
int pz_mla_cuda_splits(const pz_mla_cuda_ctx *c, int m);
/* For tests: the slot offsets off[0..m] (m + 1 ints, core/kv_sched.h) that the last attention launch
 * of m rows wrote with the balanced schedule (not written with PREZERO_MLA_BALANCE=0), copied from the
 * device (the caller synchronises first), and *splits1 (may be NULL) the one-wave split count that
 * launch was given; pz_kv_sched_waves(pos, m, pz_mla_cuda_splits(c, m), *splits1, PZ_MLA_MAX_SPLITS)
 * is its host twin. Errors: PZ_ERR_INVALID_ARG (NULL, m outside 1..m_max), PZ_ERR_CUDA. */
pz_status pz_mla_cuda_last_schedule(const pz_mla_cuda_ctx *c, int m, int32_t *off, int *splits1);

/* One decode step (pz_ref_mla_decode's steps, in stream order):
 *   prep kernel: q_a_layernorm -> bf16 scratch; kv_a_layernorm + RoPE(k_pe) -> cache row pos[i];
 *   q_b GEMM (q LoRA; pz_gemm_launch AUTO, into the slot or the scratch, see pz_mla_cuda_io);
 *   absorb kernel: q_lat = q_nope·W_UK, RoPE(q_pe), both bf16 (tensor cores with q_nope rounded to bf16
 *     and f32 sums, kernels/mla_proj.cu, where the head dims are multiples of 8; PREZERO_MLA_PROJ=0 or
 *     other shapes: f32 products and sums in d order, as the reference);
 *   attention kernel: split KV, mma.sync bf16 with f32 accumulation, online softmax;
 *   combine kernel; W_UV kernel -> o bf16 (tensor cores with olat rounded to bf16, or f32 as the
 *     absorb); o_proj GEMM into io->out.
 * Capturable: no host sync, no allocation, launch shapes depend on m only.
 * Precision vs pz_ref_mla_decode: the cache row matches except where the norm's tree-ordered
 * sum moves a value by one bf16 ulp; the attention rounds q_lat, q_pe and the probabilities to
 * bf16 for the tensor cores (the reference keeps them f32), as do the tensor-core absorb and W_UV with
 * q_nope and olat, so o may differ by a few bf16 ulps and
 * the partial output row by up to 1.5e-2 of its rms (rms of the difference; measured <= 7.3e-3 on
 * H200 at context 8192; tests/cuda/test_mla.c states the bounds).
 * Rows may have unequal contexts (pos[i] + 1 each; a row's splits cover its own length, the
 * grid is sized by m only). With a block table the KV loads and the append go through it: one
 * 32-position attention tile always lies inside one 64-position page, so a tile is one table
 * lookup; the results are bit-identical to the contiguous cache holding the same rows.
 * Errors: PZ_ERR_INVALID_ARG (m outside 1..m_max, NULL pointer, bad stride or table stride),
 * errors of pz_gemm_launch, PZ_ERR_CUDA. Positions and table entries are not checked on the
 * device: pos[i] must lie in [0, max_ctx). */
pz_status pz_mla_cuda_decode(pz_mla_cuda_ctx *c, int m, const pz_mla_cuda_io *io, cudaStream_t s);

/* The slot rule of the CPU op (pz_cpu_op_MLA_ATTN): a set slot is zero on entry when
 * pz_prezero_slice_zeroed(m, col_offset, width, p->prezero_n_total, p->prezero_n_base, H, tp,
 * dev) holds, with width heads*qh (q_b) or H (o_proj). Writes both answers. */
void pz_mla_cuda_slots_zeroed(const pz_mla_params *p, int64_t m, int tp, const pz_device_desc *dev,
                              bool *qb_zeroed, bool *oproj_zeroed);

/* Attention kernel in use: 2 (default; Q in registers, split-k QK) or 1 (PREZERO_MLA_ATTN=1, or
 * a shape version 2 has no kernel for). Read at pz_mla_cuda_create. 0 for NULL. */
int pz_mla_cuda_attn_version(const pz_mla_cuda_ctx *c);

/* Scratch of the op (for the benchmark): absorbed q, bf16 [m_max, heads, kvw] (device, q_lat |
 * roped q_pe per head); NULL for NULL. */
void *pz_mla_cuda_qabs(pz_mla_cuda_ctx *c);
/* Scratch of the op (for the tests): W_UV's output o, bf16 [m_max, heads * v_head_dim] (device, the
 * o_proj input of the last decode); NULL for NULL. */
void *pz_mla_cuda_o(pz_mla_cuda_ctx *c);
/* Scratch of the op (for the tests): the combine's output, W_UV's input olat, f32 [m_max, heads,
 * kv_lora_rank] (device); NULL for NULL. */
void *pz_mla_cuda_olat(pz_mla_cuda_ctx *c);
/* 1 when the last pz_mla_cuda_decode ran the absorb and W_UV on tensor cores (kernels/mla_proj.cu), 0 when
 * it ran the exact f32 kernels (PREZERO_MLA_PROJ=0, or a shape that path does not take) or none ran yet. */
int pz_mla_cuda_last_proj_tc(const pz_mla_cuda_ctx *c);
/* Launches only the attention part (attention + combine) for m rows on the cache and positions
 * of io, reading the absorbed q left by the last decode (or pz_mla_cuda_qabs filled by hand).
 * Used by `prezero bench attn` to time the part whose bandwidth it reports.
 * Errors: PZ_ERR_INVALID_ARG (NULL context, m outside 1..m_max, missing pointer, bad cache
 * stride), PZ_ERR_UNSUPPORTED (no attention kernel for the shape), PZ_ERR_CUDA. */
pz_status pz_mla_cuda_attention_only(pz_mla_cuda_ctx *c, int m, const pz_mla_cuda_io *io, cudaStream_t s);
#ifdef __cplusplus
}
#endif
#endif
