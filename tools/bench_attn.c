/* prezero bench attn: the CUDA MLA decode op on Kimi-K2 per-rank shapes (TP 1/2/4), batch m and
 * context 8192: µs per call of the attention part and of the whole op, and the attention part's
 * achieved HBM bandwidth (KV bytes read / time) beside a plain streaming read of the same bytes.
 * --paged reads the cache through a block table of shuffled pages, --ctx-min mixes contexts in a
 * batch. --layout gqa runs the GQA table instead (tools/bench_attn_gqa.c). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "cli_args.h"
#include "bench_common.h"

#define POOL_SEQS 256     /* sequences in the rotated cache pool (2.4 GB at context 8192) */

/* --layout gqa: the GQA decode op's table (tools/bench_attn_gqa.c). */
int pz_bench_attn_gqa(int argc, char **argv);
void pz_bench_attn_gqa_usage(FILE *f);

static void usage(FILE *f) {
  fprintf(f,
          "usage: prezero bench attn [--layout mla|gqa] [--json FILE] [--md FILE] [--m 4,8,...] [--tp 1,2,4] [--ctx N] [--reps N]\n"
          "                          [--paged] [--ctx-min N]\n"
          "  --layout mla (default): the MLA table below; --layout gqa: the GQA table (--help with it).\n"
          "  Kimi-K2 per-rank MLA shapes (64/TP heads, q_lora 1536, kv_lora 512, rope 64, nope 128,\n"
          "  v 128, H 7168). Every row is timed by CUDA-graph replay (median of --reps replays, default\n"
          "  9) of launches that rotate over a %d-sequence cache pool and two weight copies, so the\n"
          "  KV cache and the weights stream from HBM. Columns: attention part (split attention +\n"
          "  combine) µs and its KV bandwidth, whole op µs, streaming read of the KV bytes µs.\n"
          "  Defaults: m 4,8,16,32,64,128; TP 1,2,4; context 8192. PREZERO_MLA_SPLITS overrides the\n"
          "  split count; PREZERO_MLA_ATTN=1..4 selects an attention kernel version (README).\n"
          "  --paged: the cache pool as 64-token pages in a shuffled order, read through a block table\n"
          "  (core/kv_pages.h; --ctx a multiple of 64). --ctx-min N: unequal contexts in a batch, row i's\n"
          "  drawn uniformly from [N, --ctx] (seeded); KV bytes and the read yardstick are their sum.\n", POOL_SEQS);
}

/* The layout asked for (--layout VALUE, last one wins): 1 for gqa, 0 for mla or none, -1 for
 * anything else (reported). */
static int layout_of(int argc, char **argv) {
  int gqa = 0;
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--layout")) {
      const char *v = argv[++i];
      if (!strcmp(v, "gqa")) gqa = 1;
      else if (!strcmp(v, "mla")) gqa = 0;
      else { fprintf(stderr, "prezero bench attn: --layout %s is unknown; use --layout mla or gqa\n", v); return -1; }
    }
  return gqa;
}

#ifdef PZ_HAVE_CUDA
#include <cuda_runtime.h>
#include <cjson/cJSON.h>
#include "backend/cpu/ref_ops.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/mla.h"
#include "core/status.h"

/* One TP shape's buffers. */
typedef struct bench {
  pz_mla_params p;
  pz_mla_cuda_ctx *op;
  pz_gemm_ctx *gemm;
  int m;
  int64_t stride;         /* cache elements per sequence */
  pz_bf16 *cache;         /* [POOL_SEQS, stride] */
  int32_t *pos;           /* [128] ctx-1, or the drawn contexts - 1 (--ctx-min) */
  int32_t *table;         /* --paged: [POOL_SEQS + 128, mb] shuffled pages of the pool (rows >= POOL_SEQS repeat 0..) */
  int64_t mb;             /* blocks per sequence (--paged) */
  double kv_bytes;        /* KV bytes one launch of m rows reads */
  float *qkv_a, *out;     /* [128, 3648], [128, 7168] */
  pz_bf16 *w[2][5];       /* two copies of qa_norm, q_b, kva_norm, w_uk, w_uv; o_w below */
  pz_bf16 *o_w[2];
  unsigned *sink;
  int sm_count;
} bench;

static pz_mla_cuda_io io_for(bench *b, int j) {
  pz_mla_cuda_io io = {0};
  const int c = j & 1;
  const int64_t seq0 = ((int64_t)j * b->m) % POOL_SEQS;
  io.qkv_a = b->qkv_a; io.ld_qkv_a = b->p.q_lora_rank + b->p.kv_lora_rank + b->p.qk_rope_head_dim;
  io.qa_norm_w = b->w[c][0]; io.qb_w = b->w[c][1]; io.kva_norm_w = b->w[c][2];
  io.w_uk = b->w[c][3]; io.w_uv = b->w[c][4]; io.o_w = b->o_w[c];
  io.kv_cache = b->cache + seq0 * b->stride; io.cache_seq_stride = b->stride;
  if (b->table) { /* --paged: the whole pool, this launch's rows of the shuffled table */
    io.kv_cache = b->cache;
    io.cache_seq_stride = 0;
    io.block_table = b->table + seq0 * b->mb;
    io.ld_block_table = b->mb;
  }
  io.pos = b->pos;
  io.out = b->out; io.ld_out = b->p.hidden; io.out_zeroed = false;
  return io;
}
static pz_status run_attn(void *v, int j, cudaStream_t s) {
  bench *b = v;
  pz_mla_cuda_io io = io_for(b, j);
  return pz_mla_cuda_attention_only(b->op, b->m, &io, s);
}
static pz_status run_op(void *v, int j, cudaStream_t s) {
  bench *b = v;
  pz_mla_cuda_io io = io_for(b, j);
  return pz_mla_cuda_decode(b->op, b->m, &io, s);
}
static pz_status run_read(void *v, int j, cudaStream_t s) {
  bench *b = v;
  const int64_t seq0 = ((int64_t)j * b->m) % POOL_SEQS;
  const int64_t bytes = (int64_t)b->kv_bytes;
  return pz_gemm_stream_read(b->cache + seq0 * b->stride, bytes / 16 * 16, b->sink, b->sm_count, s);
}


static int bench_mla(int argc, char **argv);

int pz_cmd_bench_attn(int argc, char **argv) {
  const int layout = layout_of(argc, argv);
  if (layout < 0) return 2;
  if (layout == 1) return pz_bench_attn_gqa(argc, argv);
  return bench_mla(argc, argv);
}

static int bench_mla(int argc, char **argv) {
  const char *json_path = NULL, *md_path = NULL;
  int ms[16] = {4, 8, 16, 32, 64, 128}, nm = 6, tps[8] = {1, 2, 4}, ntp = 3, reps = 9, ctx = 8192, paged = 0, ctx_min = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
    if (!strcmp(a, "--paged")) { paged = 1; continue; }
    if (!v) { fprintf(stderr, "prezero bench attn: %s needs a value; see --help\n", a); return 2; }
    i++;
    if (!strcmp(a, "--json")) json_path = v;
    else if (!strcmp(a, "--md")) md_path = v;
    else if (!strcmp(a, "--reps")) {
      long long x = 0;
      if (pz_cli_parse_int("bench attn", a, v, 3, 1000, &x)) return 2; /* as bench gemm: 3..1000 */
      reps = (int)x;
    }
    else if (!strcmp(a, "--layout")) continue; /* mla: checked by layout_of */
    else if (!strcmp(a, "--ctx-min")) {
      long long x = 0;
      if (pz_cli_parse_int("bench attn", a, v, 1, 32768, &x)) return 2;
      ctx_min = (int)x;
    } else if (!strcmp(a, "--ctx")) {
      long long x = 0;
      if (pz_cli_parse_int("bench attn", a, v, 1, 32768, &x)) return 2;
      ctx = (int)x;
    } else if (!strcmp(a, "--m")) {
      if ((nm = pz_bench_parse_list(v, ms, 16, 1, 128)) <= 0) { fprintf(stderr, "prezero bench attn: --m '%s' is not a list of batch sizes 1..128; use --m 4,8\n", v); return 2; }
    } else if (!strcmp(a, "--tp")) {
      if ((ntp = pz_bench_parse_list(v, tps, 8, 1, 64)) <= 0) { fprintf(stderr, "prezero bench attn: --tp '%s' is not a list of TP degrees 1..64; use --tp 1,2,4\n", v); return 2; }
      for (int k = 0; k < ntp; k++)
        if (64 % tps[k]) { fprintf(stderr, "prezero bench attn: TP %d does not divide Kimi-K2's 64 heads; use --tp 1, 2, 4, 8, 16, 32 or 64\n", tps[k]); return 2; }
    } else { fprintf(stderr, "prezero bench attn: unknown option '%s'; see --help\n", a); return 2; }
  }
  if (ctx_min > ctx) { fprintf(stderr, "prezero bench attn: --ctx-min %d exceeds --ctx %d; use --ctx-min 1..%d\n", ctx_min, ctx, ctx); return 2; }
  if (paged && ctx % 64) { fprintf(stderr, "prezero bench attn: --paged needs --ctx a multiple of 64 (got %d); use --ctx %d\n", ctx, (ctx + 63) / 64 * 64); return 2; }
  if (pz_bench_need_gpus("bench attn", "this benchmark", 1, 0)) return 1;
  struct cudaDeviceProp prop;
  PZ_BENCH_CUDA("bench attn", cudaGetDeviceProperties(&prop, 0), return 1);
  bench b;
  memset(&b, 0, sizeof b);
  b.sm_count = prop.multiProcessorCount;
  pz_status st = pz_gemm_ctx_create(&b.gemm);
  cudaStream_t s = NULL;
  if (st == PZ_OK) st = PZ_CUDA_STATUS(cudaStreamCreate(&s));
  const int64_t L = 512, rope = 64, nope = 128, vd = 128, ql = 1536, H = 7168, kvw = L + rope;
  b.stride = (int64_t)ctx * kvw;
  b.cache = pz_bench_dalloc(sizeof(pz_bf16) * (size_t)(POOL_SEQS * b.stride), &st);
  pz_bench_fill_bf16(b.cache, POOL_SEQS * b.stride, 11, &st);
  b.pos = pz_bench_dalloc(sizeof(int32_t) * 128, &st);
  b.qkv_a = pz_bench_dalloc(sizeof(float) * 128 * (size_t)(ql + kvw), &st);
  b.out = pz_bench_dalloc(sizeof(float) * 128 * (size_t)H, &st);
  b.sink = pz_bench_dalloc(sizeof(unsigned) * 64, &st);
  int32_t hp[128];
  if (st == PZ_OK) {
    uint32_t rr = 4242;
    for (int i = 0; i < 128; i++) {
      rr = rr * 1664525u + 1013904223u;
      hp[i] = ctx_min > 0 ? ctx_min - 1 + (int32_t)((rr >> 8) % (uint32_t)(ctx - ctx_min + 1)) : ctx - 1;
    }
    st = PZ_CUDA_STATUS(cudaMemcpy(b.pos, hp, sizeof hp, cudaMemcpyHostToDevice));
    float *hq = malloc(sizeof(float) * 128 * (size_t)(ql + kvw));
    uint32_t r = 99;
    for (int64_t i = 0; i < 128 * (ql + kvw); i++) {
      r = r * 1664525u + 1013904223u;
      hq[i] = (float)(r >> 8) / 8388608.0f - 1.0f;
    }
    if (st == PZ_OK) st = PZ_CUDA_STATUS(cudaMemcpy(b.qkv_a, hq, sizeof(float) * 128 * (size_t)(ql + kvw), cudaMemcpyHostToDevice));
    free(hq);
  }
  if (st == PZ_OK && paged) { /* a random permutation of the pool's pages (core/kv_pages.h layout) */
    b.mb = ctx / 64;
    const int64_t np = (int64_t)POOL_SEQS * b.mb, rows = POOL_SEQS + 128;
    int32_t *ht = malloc(sizeof(int32_t) * (size_t)(rows * b.mb));
    uint32_t rr = 777;
    for (int64_t k = 0; k < np; k++) ht[k] = (int32_t)k;
    for (int64_t k = np - 1; k > 0; k--) {
      rr = rr * 1664525u + 1013904223u;
      const int64_t q = (int64_t)((rr >> 4) % (uint32_t)(k + 1));
      const int32_t t = ht[k]; ht[k] = ht[q]; ht[q] = t;
    }
    for (int64_t k = np; k < rows * b.mb; k++) ht[k] = ht[k - np];
    b.table = pz_bench_dalloc(sizeof(int32_t) * (size_t)(rows * b.mb), &st);
    if (st == PZ_OK) st = PZ_CUDA_STATUS(cudaMemcpy(b.table, ht, sizeof(int32_t) * (size_t)(rows * b.mb), cudaMemcpyHostToDevice));
    free(ht);
  }
  if (st != PZ_OK) {
    fprintf(stderr, "prezero bench attn: %s\n", pz_last_error());
    return 1;
  }
  printf("device: %s, %d SMs; context %d%s; cache pool %d sequences (%.2f GB)%s\n", prop.name, b.sm_count, ctx,
         ctx_min > 0 ? " (max; per row drawn from [--ctx-min, --ctx])" : "", POOL_SEQS, (double)POOL_SEQS * b.stride * 2 / 1e9,
         paged ? ", paged (shuffled 64-token pages)" : "");
  printf("%-8s %3s %5s %4s %6s | %10s %9s %6s | %10s %8s | %10s\n", "model", "TP", "heads", "m", "splits", "attn us",
         "attn TB/s", "%HBM", "read us", "attn/rd", "op us");

  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "device", prop.name);
  cJSON_AddNumberToObject(root, "sm_count", b.sm_count);
  {
    char cmd[1024];
    pz_bench_command_line(cmd, sizeof cmd, "prezero bench", argc, argv);
    pz_bench_json_add_command_date(root, cmd);
  }
  cJSON_AddStringToObject(root, "method",
                          "CUDA-graph replay, median of reps replays of a graph of iters launches; launch j uses "
                          "sequences (j*m mod 256) of a 256-sequence cache pool and weight copy j%2, so KV and weights "
                          "stream from HBM. attn = split attention + combine kernels; KV bytes = m*ctx*(kv_lora+rope)*2; "
                          "op = the whole MLA op (prep, q_b GEMM, absorb, attention, combine, W_UV, o_proj GEMM); "
                          "read = plain 16-byte streaming read of the KV bytes.");
  cJSON_AddNumberToObject(root, "context", ctx);
  if (ctx_min > 0) cJSON_AddNumberToObject(root, "context_min", ctx_min);
  cJSON_AddBoolToObject(root, "paged", paged);
  cJSON_AddNumberToObject(root, "reps", reps);
  cJSON *rows = cJSON_AddArrayToObject(root, "rows");
  FILE *md = md_path ? fopen(md_path, "w") : NULL;
  if (md) {
    fprintf(md, "MLA decode attention, Kimi-K2 per-rank shapes, context %d, %s (%d SMs). CUDA-graph replay medians, KV and weights rotated beyond L2.\n\n", ctx, prop.name, b.sm_count);
    if (ctx_min > 0) fprintf(md, "Unequal contexts: row i's drawn uniformly from [%d, %d] (seeded); KV bytes are their sum.\n\n", ctx_min, ctx);
    if (paged) fprintf(md, "Paged cache: shuffled 64-token pages read through a block table.\n\n");
    fprintf(md, "splits = KV split slots per row in the grid (mla.h); with two waves of slots the balanced schedule fills the second only where the contexts are unequal enough (core/kv_sched.h).\n\n");
    fprintf(md, "| TP | heads | m | kernel | splits | KV MB | attn µs | attn TB/s | %% of 4.8 TB/s | read µs | attn / read | op µs |\n");
    pz_bench_md_rule(md, 12, 0);
  }
  int rc = 0;
  for (int t = 0; t < ntp && st == PZ_OK; t++) {
    const int tp = tps[t], heads = 64 / tp;
    pz_mla_params *p = &b.p;
    memset(p, 0, sizeof *p);
    p->n_heads = heads; p->hidden = H; p->q_lora_rank = ql; p->kv_lora_rank = L; p->qk_nope_head_dim = nope;
    p->qk_rope_head_dim = rope; p->v_head_dim = vd; p->max_ctx = ctx; p->eps = 1e-6f;
    p->rope = (pz_rope_params){.theta = 50000, .factor = 32, .original_max_position_embeddings = 4096,
                               .beta_fast = 1, .beta_slow = 1, .mscale = 1, .mscale_all_dim = 1};
    p->softmax_scale = pz_ref_mla_softmax_scale(nope, rope, &p->rope);
    const int64_t sz[5] = {ql, heads * (nope + rope) * ql, L, heads * nope * L, heads * vd * L};
    for (int c = 0; c < 2; c++) {
      for (int k = 0; k < 5; k++) {
        b.w[c][k] = pz_bench_dalloc(sizeof(pz_bf16) * (size_t)sz[k], &st);
        pz_bench_fill_bf16(b.w[c][k], sz[k], 100 + 10 * c + k, &st);
      }
      b.o_w[c] = pz_bench_dalloc(sizeof(pz_bf16) * (size_t)(H * heads * vd), &st);
      pz_bench_fill_bf16(b.o_w[c], H * heads * vd, 200 + c, &st);
    }
    if (st == PZ_OK) st = pz_mla_cuda_create(p, 128, b.gemm, &b.op);
    for (int a = 0; a < nm && st == PZ_OK; a++) {
      b.m = ms[a];
      double kv_bytes = 0;
      for (int i = 0; i < b.m; i++) kv_bytes += (double)(hp[i] + 1) * kvw * 2;
      b.kv_bytes = kv_bytes;
      int iters = (int)(2e9 / kv_bytes);
      if (iters < 4) iters = 4;
      if (iters > 64) iters = 64;
      double us_attn = 0, us_op = 0, us_read = 0;
      st = pz_bench_capture_us(run_attn, &b, iters, reps, s, &us_attn);
      if (st == PZ_OK) st = pz_bench_capture_us(run_read, &b, iters, reps, s, &us_read);
      if (st == PZ_OK) st = pz_bench_capture_us(run_op, &b, iters, reps, s, &us_op);
      if (st != PZ_OK) break;
      const double tbps = kv_bytes / us_attn / 1e6;
      const int splits = pz_mla_cuda_splits(b.op, b.m);
      if (a == 0) printf("(attention kernel v%d)\n", pz_mla_cuda_attn_version(b.op)); /* per TP: its heads choose it */
      printf("%-8s %3d %5d %4d %6d | %10.1f %9.2f %5.1f%% | %10.1f %8.2f | %10.1f\n", "Kimi-K2", tp, heads, b.m, splits,
             us_attn, tbps, 100.0 * tbps / PZ_BENCH_HBM_TBPS, us_read, us_attn / us_read, us_op);
      if (md)
        fprintf(md, "| %d | %d | %d | v%d | %d | %.1f | %.1f | %.2f | %.1f%% | %.1f | %.2f | %.1f |\n", tp, heads, b.m,
                pz_mla_cuda_attn_version(b.op), splits, kv_bytes / 1e6, us_attn, tbps, 100.0 * tbps / PZ_BENCH_HBM_TBPS, us_read, us_attn / us_read, us_op);
      cJSON *r = cJSON_CreateObject();
      cJSON_AddStringToObject(r, "model", "Kimi-K2");
      cJSON_AddNumberToObject(r, "tp", tp);
      cJSON_AddNumberToObject(r, "heads", heads);
      cJSON_AddNumberToObject(r, "m", b.m);
      cJSON_AddNumberToObject(r, "context", ctx);
      cJSON_AddNumberToObject(r, "splits", splits);
      cJSON_AddNumberToObject(r, "attn_kernel_version", pz_mla_cuda_attn_version(b.op));
      cJSON_AddNumberToObject(r, "launches_per_graph", iters);
      cJSON_AddNumberToObject(r, "kv_bytes", kv_bytes);
      cJSON_AddNumberToObject(r, "attn_us", us_attn);
      cJSON_AddNumberToObject(r, "attn_tbps", tbps);
      cJSON_AddNumberToObject(r, "attn_share_of_4p8", tbps / PZ_BENCH_HBM_TBPS);
      cJSON_AddNumberToObject(r, "read_us", us_read);
      cJSON_AddNumberToObject(r, "op_us", us_op);
      cJSON_AddItemToArray(rows, r);
      fflush(stdout);
    }
    pz_mla_cuda_destroy(b.op);
    b.op = NULL;
    for (int c = 0; c < 2; c++) {
      for (int k = 0; k < 5; k++) { PZ_CUDA_IGNORE(cudaFree(b.w[c][k])); b.w[c][k] = NULL; } /* cleanup */
      PZ_CUDA_IGNORE(cudaFree(b.o_w[c]));
      b.o_w[c] = NULL;
    }
  }
  if (st != PZ_OK) {
    fprintf(stderr, "prezero bench attn: %s\n", pz_last_error());
    rc = 1;
  }
  if (md) fclose(md);
  if (json_path && pz_bench_write_json(root, json_path, 1) != 0)
    fprintf(stderr, "prezero bench attn: cannot write %s\n", json_path);
  cJSON_Delete(root);
  /* Cleanup: failures ignored on purpose (the exit code is already decided). */
  PZ_CUDA_IGNORE(cudaFree(b.cache)); PZ_CUDA_IGNORE(cudaFree(b.pos)); PZ_CUDA_IGNORE(cudaFree(b.qkv_a));
  PZ_CUDA_IGNORE(cudaFree(b.out)); PZ_CUDA_IGNORE(cudaFree(b.sink)); PZ_CUDA_IGNORE(cudaFree(b.table));
  pz_gemm_ctx_destroy(b.gemm);
  if (s) PZ_CUDA_IGNORE(cudaStreamDestroy(s));
  return rc;
}
#else
int pz_cmd_bench_attn(int argc, char **argv) {
  if (layout_of(argc, argv) == 1) return pz_bench_attn_gqa(argc, argv);
  return pz_bench_no_cuda("bench attn", argc, argv, usage);
}
#endif
