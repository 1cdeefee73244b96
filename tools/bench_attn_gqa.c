/* prezero bench attn --layout gqa: the CUDA GQA decode op (backend/cuda/gqa.h) on Llama-3.1-70B
 * per-rank shapes (TP 1 and 2) and Qwen3-30B-A3B, batch m and context 8192: µs per call of the
 * attention part (split attention + combine) and of the whole op, and the attention part's
 * achieved HBM bandwidth (K + V bytes of the batch / time) beside a plain streaming read of
 * the same bytes. The same method as the MLA table (bench_attn.c). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "cli_args.h"
#include "bench_common.h"

#define GQA_POOL_SEQS 256 /* sequences in the rotated cache pool (8.6 GB of K + V for Llama-3.1-70B TP 1 at 8192) */

int pz_bench_attn_gqa(int argc, char **argv);

void pz_bench_attn_gqa_usage(FILE *f);
void pz_bench_attn_gqa_usage(FILE *f) {
  fprintf(f,
          "usage: prezero bench attn --layout gqa [--json FILE] [--md FILE] [--m 1,4,...] [--ctx N] [--reps N]\n"
          "  GQA shapes, head_dim 128: Llama-3.1-70B TP 1 (64 q / 8 kv heads, H 8192), TP 2 (32 / 4), and\n"
          "  Qwen3-30B-A3B (32 / 4, qk-norm, H 2048). Every row is timed by CUDA-graph replay (median of\n"
          "  --reps replays, default 9) of launches that rotate over a %d-sequence cache pool and two\n"
          "  o_proj copies, so K, V and the weights stream from HBM; every sequence is at position ctx-1.\n"
          "  Columns: attention part (split attention + combine) µs, its K+V bandwidth and share of\n"
          "  4.8 TB/s, streaming read of the same bytes µs, whole op (prep, attention, combine, o_proj) µs.\n"
          "  Defaults: m 1,4,16,32,64,128; context 8192.\n", GQA_POOL_SEQS);
}

#ifdef PZ_HAVE_CUDA
#include <cuda_runtime.h>
#include <cjson/cJSON.h>
#include "backend/cuda/gemm.h"
#include "backend/cuda/gqa.h"
#include "core/status.h"

typedef struct gqa_model {
  const char *name;
  int tp, heads, kvh, qk_norm;
  int64_t H;
  float theta;
  int llama3;
} gqa_model;

/* Llama-3.1-70B: 64 heads, 8 kv heads, hidden 8192, rope llama3 (factor 8, 8192 original);
 * Qwen3-30B-A3B: 32 heads, 4 kv heads, hidden 2048, qk-norm, rope_theta 1e6 (config.json). */
static const gqa_model models[] = {
    {"Llama-3.1-70B", 1, 64, 8, 0, 8192, 500000.0f, 1},
    {"Llama-3.1-70B", 2, 32, 4, 0, 8192, 500000.0f, 1},
    {"Qwen3-30B-A3B", 1, 32, 4, 1, 2048, 1000000.0f, 0},
};

/* One shape's buffers. */
typedef struct bench {
  pz_gqa_params p;
  pz_gqa_cuda_ctx *op;
  pz_gemm_ctx *gemm;
  int m, sm_count, qk_norm;
  int64_t seq, head;       /* cache strides (elements) */
  pz_bf16 *kc, *vc;        /* [GQA_POOL_SEQS, kvh, ctx, d] each */
  int32_t *pos;            /* [128] all ctx - 1 */
  float *qkv, *out;        /* [128, (heads + 2 kvh) * d], [128, H] */
  pz_bf16 *norm_w;         /* [2, d]: q_norm, k_norm */
  pz_bf16 *o_w[2];
  void *ws;
  size_t ws_bytes;
  unsigned *sink;
} bench;

static int64_t seq0_of(const bench *b, int j) {
  int64_t s0 = ((int64_t)j * b->m) % GQA_POOL_SEQS;
  return s0 + b->m > GQA_POOL_SEQS ? 0 : s0;
}

static pz_gqa_cuda_io io_for(bench *b, int j) {
  pz_gqa_cuda_io io = {0};
  const int64_t s0 = seq0_of(b, j);
  const int64_t d = b->p.head_dim;
  io.qkv = b->qkv; io.ld_qkv = (b->p.n_heads + 2 * b->p.n_kv_heads) * d;
  io.q_norm_w = b->qk_norm ? b->norm_w : NULL;
  io.k_norm_w = b->qk_norm ? b->norm_w + d : NULL;
  io.o_w = b->o_w[j & 1];
  io.k_cache = b->kc + s0 * b->seq; io.v_cache = b->vc + s0 * b->seq;
  io.cache_seq_stride = b->seq; io.cache_head_stride = b->head;
  io.pos = b->pos;
  io.out = b->out; io.ld_out = b->p.hidden; io.out_zeroed = false;
  io.workspace = b->ws; io.workspace_bytes = b->ws_bytes;
  return io;
}
static pz_status run_attn(void *v, int j, cudaStream_t s) {
  bench *b = v;
  pz_gqa_cuda_io io = io_for(b, j);
  return pz_gqa_cuda_attention_only(b->op, b->m, &io, s);
}
static pz_status run_op(void *v, int j, cudaStream_t s) {
  bench *b = v;
  pz_gqa_cuda_io io = io_for(b, j);
  return pz_gqa_cuda_decode(b->op, b->m, &io, s);
}
/* The yardstick: a streaming read of the batch's K bytes, then of its V bytes. */
static pz_status run_read(void *v, int j, cudaStream_t s) {
  bench *b = v;
  const int64_t s0 = seq0_of(b, j), bytes = (int64_t)b->m * b->seq * 2;
  PZ_CHECK(pz_gemm_stream_read(b->kc + s0 * b->seq, bytes / 16 * 16, b->sink, b->sm_count, s));
  return pz_gemm_stream_read(b->vc + s0 * b->seq, bytes / 16 * 16, b->sink, b->sm_count, s);
}

static void release(bench *b) { /* cleanup: failures ignored on purpose */
  pz_gqa_cuda_destroy(b->op);
  b->op = NULL;
  PZ_CUDA_IGNORE(cudaFree(b->kc)); PZ_CUDA_IGNORE(cudaFree(b->vc)); PZ_CUDA_IGNORE(cudaFree(b->o_w[0]));
  PZ_CUDA_IGNORE(cudaFree(b->o_w[1])); PZ_CUDA_IGNORE(cudaFree(b->ws));
  b->kc = b->vc = b->o_w[0] = b->o_w[1] = NULL;
  b->ws = NULL;
}

int pz_bench_attn_gqa(int argc, char **argv) {
  const char *json_path = NULL, *md_path = NULL;
  int ms[16] = {1, 4, 16, 32, 64, 128}, nm = 6, reps = 9, ctx = 8192;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { pz_bench_attn_gqa_usage(stdout); return 0; }
    if (!v) { fprintf(stderr, "prezero bench attn: %s needs a value; see --help\n", a); return 2; }
    i++;
    if (!strcmp(a, "--json")) json_path = v;
    else if (!strcmp(a, "--md")) md_path = v;
    else if (!strcmp(a, "--reps")) {
      long long x = 0;
      if (pz_cli_parse_int("bench attn", a, v, 3, 1000, &x)) return 2; /* as bench gemm: 3..1000 */
      reps = (int)x;
    }
    else if (!strcmp(a, "--layout")) {
      if (strcmp(v, "gqa")) { fprintf(stderr, "prezero bench attn: --layout %s is not gqa here; use --layout gqa\n", v); return 2; }
    } else if (!strcmp(a, "--ctx")) {
      long long x = 0;
      if (pz_cli_parse_int("bench attn", a, v, 1, 32768, &x)) return 2;
      ctx = (int)x;
    } else if (!strcmp(a, "--m")) {
      if ((nm = pz_bench_parse_list(v, ms, 16, 1, 128)) <= 0) { fprintf(stderr, "prezero bench attn: --m '%s' is not a list of batch sizes 1..128; use --m 1,4\n", v); return 2; }
    } else if (!strcmp(a, "--tp")) {
      fprintf(stderr, "prezero bench attn: --layout gqa runs its fixed TP 1 / 2 shapes; drop --tp\n");
      return 2;
    } else { fprintf(stderr, "prezero bench attn: unknown option '%s'; see --help\n", a); return 2; }
  }
  if (pz_bench_need_gpus("bench attn", "this benchmark", 1, 0)) return 1;
  struct cudaDeviceProp prop;
  PZ_BENCH_CUDA("bench attn", cudaGetDeviceProperties(&prop, 0), return 1);
  bench b;
  memset(&b, 0, sizeof b);
  b.sm_count = prop.multiProcessorCount;
  const int64_t d = 128, max_w = (64 + 2 * 8) * d;
  pz_status st = pz_gemm_ctx_create(&b.gemm);
  cudaStream_t s = NULL;
  if (st == PZ_OK) st = PZ_CUDA_STATUS(cudaStreamCreate(&s));
  b.pos = pz_bench_dalloc(sizeof(int32_t) * 128, &st);
  b.qkv = pz_bench_dalloc(sizeof(float) * 128 * (size_t)max_w, &st);
  b.out = pz_bench_dalloc(sizeof(float) * 128 * 8192, &st);
  b.norm_w = pz_bench_dalloc(sizeof(pz_bf16) * 2 * (size_t)d, &st);
  b.sink = pz_bench_dalloc(sizeof(unsigned) * 64, &st);
  if (st == PZ_OK) {
    int32_t hp[128];
    for (int i = 0; i < 128; i++) hp[i] = ctx - 1;
    st = PZ_CUDA_STATUS(cudaMemcpy(b.pos, hp, sizeof hp, cudaMemcpyHostToDevice));
    float *hq = malloc(sizeof(float) * 128 * (size_t)max_w);
    uint32_t r = 99;
    for (int64_t i = 0; hq && i < 128 * max_w; i++) {
      r = r * 1664525u + 1013904223u;
      hq[i] = (float)(r >> 8) / 8388608.0f - 1.0f;
    }
    if (st == PZ_OK && hq) st = PZ_CUDA_STATUS(cudaMemcpy(b.qkv, hq, sizeof(float) * 128 * (size_t)max_w, cudaMemcpyHostToDevice));
    free(hq);
    pz_bf16 hw[256];
    for (int i = 0; i < 256; i++) hw[i] = pz_f32_to_bf16(1.0f + (float)(i % 7) * 0.01f);
    if (st == PZ_OK) st = PZ_CUDA_STATUS(cudaMemcpy(b.norm_w, hw, sizeof hw, cudaMemcpyHostToDevice));
  }
  if (st != PZ_OK) {
    fprintf(stderr, "prezero bench attn: %s\n", pz_last_error());
    return 1;
  }
  printf("device: %s, %d SMs; context %d; cache pool %d sequences per shape\n", prop.name, b.sm_count, ctx, GQA_POOL_SEQS);
  printf("%-14s %3s %5s %4s %4s %6s | %10s %9s %6s | %10s %8s | %10s\n", "model", "TP", "heads", "kv", "m", "splits",
         "attn us", "attn TB/s", "%HBM", "read us", "attn/rd", "op us");
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "device", prop.name);
  cJSON_AddNumberToObject(root, "sm_count", b.sm_count);
  {
    char cmd[1024];
    pz_bench_command_line(cmd, sizeof cmd, "prezero bench", argc, argv);
    pz_bench_json_add_command_date(root, cmd);
  }
  cJSON_AddStringToObject(root, "layout", "gqa");
  cJSON_AddStringToObject(root, "method",
                          "CUDA-graph replay, median of reps replays of a graph of iters launches; launch j uses "
                          "sequences (j*m mod 256) of a 256-sequence K/V cache pool and o_proj copy j%2, so K, V and "
                          "the weights stream from HBM; every sequence at position ctx-1. attn = split attention + "
                          "combine kernels; KV bytes = m*kv_heads*ctx*head_dim*2*2 (K and V); op = the whole GQA op "
                          "(prep, attention, combine, o_proj GEMM); read = plain 16-byte streaming reads of the K and "
                          "V bytes.");
  cJSON_AddNumberToObject(root, "context", ctx);
  cJSON_AddNumberToObject(root, "reps", reps);
  cJSON *rows = cJSON_AddArrayToObject(root, "rows");
  FILE *md = md_path ? fopen(md_path, "w") : NULL;
  if (md) {
    fprintf(md, "GQA decode attention (head_dim 128), context %d, %s (%d SMs). CUDA-graph replay medians, K/V and "
                "weights rotated beyond L2.\n\n", ctx, prop.name, b.sm_count);
    fprintf(md, "| model | TP | heads | kv heads | m | splits | KV MB | attn µs | attn TB/s | %% of 4.8 TB/s | read µs | attn / read | op µs |\n");
    pz_bench_md_rule(md, 13, 0);
  }
  int rc = 0;
  for (size_t t = 0; t < sizeof models / sizeof models[0] && st == PZ_OK; t++) {
    const gqa_model *M = &models[t];
    pz_gqa_params *p = &b.p;
    memset(p, 0, sizeof *p);
    p->n_heads = M->heads; p->n_kv_heads = M->kvh; p->head_dim = d; p->hidden = M->H; p->max_ctx = ctx;
    p->eps = 1e-6f;
    p->softmax_scale = 0.08838834764831845f; /* 128^-0.5 */
    p->rope = M->llama3 ? (pz_rope_params){.theta = M->theta, .factor = 8, .original_max_position_embeddings = 8192,
                                           .type = PZ_ROPE_LLAMA3, .low_freq_factor = 1, .high_freq_factor = 4}
                        : (pz_rope_params){.theta = M->theta, .factor = 1, .type = PZ_ROPE_DEFAULT};
    b.qk_norm = M->qk_norm;
    b.head = (int64_t)ctx * d;
    b.seq = M->kvh * b.head;
    b.kc = pz_bench_dalloc(sizeof(pz_bf16) * (size_t)(GQA_POOL_SEQS * b.seq), &st);
    b.vc = pz_bench_dalloc(sizeof(pz_bf16) * (size_t)(GQA_POOL_SEQS * b.seq), &st);
    pz_bench_fill_bf16(b.kc, GQA_POOL_SEQS * b.seq, 11, &st);
    pz_bench_fill_bf16(b.vc, GQA_POOL_SEQS * b.seq, 12, &st);
    for (int c = 0; c < 2; c++) {
      b.o_w[c] = pz_bench_dalloc(sizeof(pz_bf16) * (size_t)(M->H * M->heads * d), &st);
      pz_bench_fill_bf16(b.o_w[c], M->H * M->heads * d, 200 + (uint32_t)c, &st);
    }
    if (st == PZ_OK) st = pz_gqa_cuda_create(p, 128, b.gemm, &b.op);
    if (st == PZ_OK) {
      b.ws_bytes = pz_gqa_cuda_workspace_bytes(b.op);
      b.ws = pz_bench_dalloc(b.ws_bytes, &st);
    }
    for (int a = 0; a < nm && st == PZ_OK; a++) {
      b.m = ms[a];
      const double kv_bytes = (double)b.m * b.seq * 2 * 2;
      int iters = (int)(2e9 / kv_bytes);
      if (iters < 4) iters = 4;
      if (iters > 64) iters = 64;
      double us_attn = 0, us_op = 0, us_read = 0;
      { /* one whole step first: the attention-only launches read the q it leaves in the workspace */
        pz_gqa_cuda_io io = io_for(&b, 0);
        st = pz_gqa_cuda_decode(b.op, b.m, &io, s);
        if (st == PZ_OK) st = PZ_CUDA_STATUS(cudaStreamSynchronize(s));
      }
      if (st == PZ_OK) st = pz_bench_capture_us(run_attn, &b, iters, reps, s, &us_attn);
      if (st == PZ_OK) st = pz_bench_capture_us(run_read, &b, iters, reps, s, &us_read);
      if (st == PZ_OK) st = pz_bench_capture_us(run_op, &b, iters, reps, s, &us_op);
      if (st != PZ_OK) break;
      const double tbps = kv_bytes / us_attn / 1e6;
      const int splits = pz_gqa_cuda_splits(b.op, b.m);
      printf("%-14s %3d %5d %4d %4d %6d | %10.1f %9.2f %5.1f%% | %10.1f %8.2f | %10.1f\n", M->name, M->tp, M->heads, M->kvh,
             b.m, splits, us_attn, tbps, 100.0 * tbps / PZ_BENCH_HBM_TBPS, us_read, us_attn / us_read, us_op);
      if (md)
        fprintf(md, "| %s | %d | %d | %d | %d | %d | %.1f | %.1f | %.2f | %.1f%% | %.1f | %.2f | %.1f |\n", M->name, M->tp,
                M->heads, M->kvh, b.m, splits, kv_bytes / 1e6, us_attn, tbps, 100.0 * tbps / PZ_BENCH_HBM_TBPS, us_read,
                us_attn / us_read, us_op);
      cJSON *r = cJSON_CreateObject();
      cJSON_AddStringToObject(r, "model", M->name);
      cJSON_AddNumberToObject(r, "tp", M->tp);
      cJSON_AddNumberToObject(r, "heads", M->heads);
      cJSON_AddNumberToObject(r, "kv_heads", M->kvh);
      cJSON_AddNumberToObject(r, "head_dim", (double)d);
      cJSON_AddNumberToObject(r, "hidden", (double)M->H);
      cJSON_AddNumberToObject(r, "m", b.m);
      cJSON_AddNumberToObject(r, "context", ctx);
      cJSON_AddNumberToObject(r, "splits", splits);
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
    release(&b);
  }
  if (st != PZ_OK) {
    fprintf(stderr, "prezero bench attn: %s\n", pz_last_error());
    rc = 1;
  }
  if (md) fclose(md);
  if (json_path && pz_bench_write_json(root, json_path, 1) != 0)
    fprintf(stderr, "prezero bench attn: cannot write %s\n", json_path);
  cJSON_Delete(root);
  release(&b);
  PZ_CUDA_IGNORE(cudaFree(b.pos)); PZ_CUDA_IGNORE(cudaFree(b.qkv)); PZ_CUDA_IGNORE(cudaFree(b.out)); /* cleanup */
  PZ_CUDA_IGNORE(cudaFree(b.norm_w)); PZ_CUDA_IGNORE(cudaFree(b.sink));
  pz_gemm_ctx_destroy(b.gemm);
  if (s) PZ_CUDA_IGNORE(cudaStreamDestroy(s));
  return rc;
}
#else
int pz_bench_attn_gqa(int argc, char **argv) {
  return pz_bench_no_cuda("bench attn", argc, argv, pz_bench_attn_gqa_usage);
}
#endif
