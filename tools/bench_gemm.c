/* prezero bench gemm: every GEMM flavour vs cuBLAS and vs a plain streaming read of the same
 * weight bytes, on the decode shapes of Kimi-K2, DeepSeek-V3 and DeepSeek-V2-Lite at TP 1/2/4/8 (and the
 * shared experts' gate | up of Kimi-K2.5). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "cli_args.h"
#include "bench_common.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: prezero bench gemm [--json FILE] [--md FILE] [--m 1,4,8,...] [--only TEXT]\n"
          "                          [--reps N] [--pool-mb MB] [--no-tune]\n"
          "  Times cuBLAS and flavours 1-5 (tuned per shape) in CUDA-graph replays with the\n"
          "  weights rotated over --pool-mb (default 1024) MB so they stream from HBM, beside a\n"
          "  plain 16-byte streaming read of the same bytes. --only keeps rows whose\n"
          "  'model/tp/gemm' label contains TEXT (or any part of a comma list, e.g. sh_,mlp_). The tuner table is saved to the cache\n"
          "  (PREZERO_CACHE_DIR, default ~/.cache/prezero) unless --no-tune.\n");
}

static void tune_usage(FILE *f) {
  fprintf(f,
          "usage: prezero tune [--m 1,2,4,...] [--only TEXT] [--pool-mb MB]\n"
          "  Tunes the split-K GEMM of every prezero consumer shape (Kimi-K2, DeepSeek-V3, DeepSeek-V2-Lite\n"
          "  at TP 1/2/4/8, and Kimi-K2.5's shared experts' gate | up) and of the other bf16 MLP GEMMs\n"
          "  (sh_down, mlp_gu, mlp_down of Kimi-K2.5 and DeepSeek-V2-Lite) for each m bucket (default 1..256)\n"
          "  on this GPU, and saves the table to the cache (PREZERO_CACHE_DIR, default ~/.cache/prezero),\n"
          "  where it takes precedence over the table built into the library. --only keeps the\n"
          "  'model/tp/gemm' labels containing TEXT, or any part of a comma list (e.g. sh_,mlp_).\n"
          "  Prints one progress line per (shape, m). About 5 minutes on an H200.\n");
}

#ifdef PZ_HAVE_CUDA
#include <cjson/cJSON.h>
#include "backend/cuda/gemm.h"
#include "backend/cuda/tuner.h"
#include "core/status.h"
#include "core/options.h"

/* Per-rank shapes (docs/ARCHITECTURE.md §2) of every prezero consumer (with a quantised MoE's shared experts'
 * gate | up, the op's sh_gu slot, for Kimi-K2.5). Kimi-K2 / DeepSeek-V3: H = 7168,
 * q_lora 1536, kv_lora 512, rope 64, nope 128, v 128; Kimi-K2 64 heads / 384 routed experts,
 * DeepSeek-V3 128 heads / 256. DeepSeek-V2-Lite: H = 2048, no q LoRA (q_proj and kv_a are
 * separate GEMMs), 16 heads, 64 routed experts. */
typedef struct shape { const char *model; int tp; const char *gemm; int n, k; } shape;
#define QB(h, tp) ((h) / (tp) * 192)
#define OP(h, tp) ((h) / (tp) * 128)
#define MLA_ROWS(model, h, tp, experts)                                                             \
  {model, tp, "qkv_a", 2112, 7168}, {model, tp, "q_b", QB(h, tp), 1536},                           \
  {model, tp, "o_proj", 7168, OP(h, tp)}, {model, tp, "gate", experts, 7168}
#define LITE_ROWS(tp)                                                                               \
  {"DeepSeek-V2-Lite", tp, "q_proj", QB(16, tp), 2048}, {"DeepSeek-V2-Lite", tp, "kv_a", 576, 2048}, \
  {"DeepSeek-V2-Lite", tp, "o_proj", 2048, OP(16, tp)}, {"DeepSeek-V2-Lite", tp, "gate", 64, 2048}
/* The shared experts' down (sh_down: n = H, k = shared inter / tp) and the dense MLP's gate | up and down
 * (mlp_gu: n = 2 x intermediate_size / tp, k = H; mlp_down: n = H, k = intermediate_size / tp). */
#define MLP_ROWS(model, tp, H, shared_inter, inter)                                                 \
  {model, tp, "sh_down", H, (shared_inter) / (tp)}, {model, tp, "mlp_gu", 2 * (inter) / (tp), H},    \
  {model, tp, "mlp_down", H, (inter) / (tp)}
static const shape shapes[] = {
  MLA_ROWS("Kimi-K2", 64, 1, 384), MLA_ROWS("Kimi-K2", 64, 2, 384), MLA_ROWS("Kimi-K2", 64, 4, 384),
  MLA_ROWS("Kimi-K2", 64, 8, 384), MLA_ROWS("DeepSeek-V3", 128, 1, 256), MLA_ROWS("DeepSeek-V3", 128, 2, 256),
  MLA_ROWS("DeepSeek-V3", 128, 4, 256), MLA_ROWS("DeepSeek-V3", 128, 8, 256),
  LITE_ROWS(1), LITE_ROWS(2), LITE_ROWS(4), LITE_ROWS(8),
  /* the shared experts' gate | up of a quantised MoE (Kimi-K2.5: 1 shared expert of 2048; prezero slot sh_gu) */
  {"Kimi-K2.5", 1, "sh_gu", 4096, 7168}, {"Kimi-K2.5", 2, "sh_gu", 2048, 7168}, {"Kimi-K2.5", 4, "sh_gu", 1024, 7168},
  {"Kimi-K2.5", 8, "sh_gu", 512, 7168},
  /* The other GEMMs of the bf16 SwiGLU MLPs (backend/cuda/mlp_gemm.h: gate | up as one GEMM of 2 inter rows,
   * then down): not prezero consumers, but they run through the same handle, so a tune times them too.
   * Kimi-K2.5 (the same shapes as Kimi-K2 and DeepSeek-V3): shared experts 1 x 2048, dense intermediate_size
   * 18432; DeepSeek-V2-Lite: shared experts 2 x 1408, dense intermediate_size 10944. */
  MLP_ROWS("Kimi-K2.5", 1, 7168, 2048, 18432), MLP_ROWS("Kimi-K2.5", 2, 7168, 2048, 18432),
  MLP_ROWS("Kimi-K2.5", 4, 7168, 2048, 18432), MLP_ROWS("Kimi-K2.5", 8, 7168, 2048, 18432),
  {"DeepSeek-V2-Lite", 1, "sh_gu", 5632, 2048}, {"DeepSeek-V2-Lite", 2, "sh_gu", 2816, 2048},
  {"DeepSeek-V2-Lite", 4, "sh_gu", 1408, 2048}, {"DeepSeek-V2-Lite", 8, "sh_gu", 704, 2048},
  MLP_ROWS("DeepSeek-V2-Lite", 1, 2048, 2816, 10944), MLP_ROWS("DeepSeek-V2-Lite", 2, 2048, 2816, 10944),
  MLP_ROWS("DeepSeek-V2-Lite", 4, 2048, 2816, 10944), MLP_ROWS("DeepSeek-V2-Lite", 8, 2048, 2816, 10944),
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* --only TEXT: a label is kept when it contains any of TEXT's comma-separated parts (empty parts match
 * nothing), e.g. "sh_,mlp_" keeps every MLP GEMM. */
static int only_match(const char *label, const char *only) {
  if (!only) return 1;
  for (const char *p = only; *p;) {
    const char *c = strchr(p, ',');
    const size_t n = c ? (size_t)(c - p) : strlen(p);
    for (const char *l = label; n && *l; l++)
      if (!strncmp(l, p, n)) return 1;
    if (!c) break;
    p = c + 1;
  }
  return 0;
}

/* A shape's 'model/tp/gemm' label into buf (cap bytes); returns buf. */
static const char *shape_label(const shape *s, char *buf, size_t cap) {
  snprintf(buf, cap, "%s/tp%d/%s", s->model, s->tp, s->gemm);
  return buf;
}

/* Whether --only keeps shape s. */
static int shape_selected(const shape *s, const char *only) {
  char label[128];
  return only_match(shape_label(s, label, sizeof label), only);
}

/* Kernel family tag of a config's wn: "" register ring, "n" warps along n, "wg" wgmma,
 * "sk" wgmma stream-K (its s is the CTA count). */
static const char *kern_tag(int wn) { return wn == 1 ? "n" : wn == 3 ? "wg" : wn == 4 ? "sk" : ""; }
/* The kernel a resolved config runs: "cublas", "wgmma" (wn 3) or "mma.sync". */
static const char *kernel_name(const pz_gemm_config *c) {
  return c->flavour == PZ_GEMM_CUBLAS ? "cublas" : c->wn == 3 ? "wgmma" : c->wn == 4 ? "wgmma-sk" : "mma.sync";
}

/* Measurements of one (n, k, m), shared by every row with that shape. */
typedef struct meas {
  int n, k, m;
  double read_us;
  pz_tuner_entry e; /* configs from the tuner, us[] re-timed with the final method */
} meas;

int pz_cmd_bench_gemm(int argc, char **argv) {
  const char *json_path = NULL, *md_path = NULL, *only = NULL;
  int ms[16] = {1, 2, 4, 8, 16, 32, 64, 128, 256}, nm = 9, reps = 9, tune = 1;
  size_t pool_mb = 1024;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return 0; }
    else if (!strcmp(a, "--no-tune")) tune = 0;
    else if (!v) { fprintf(stderr, "prezero bench gemm: %s needs a value; see --help\n", a); return 2; }
    else if (!strcmp(a, "--json")) { json_path = v; i++; }
    else if (!strcmp(a, "--md")) { md_path = v; i++; }
    else if (!strcmp(a, "--only")) { only = v; i++; }
    else if (!strcmp(a, "--reps")) {
      int r[1];
      if (pz_bench_parse_list(v, r, 1, 3, 1000) != 1) {
        fprintf(stderr, "prezero bench gemm: --reps '%s' is not a count in 3..1000; use e.g. --reps 9\n", v);
        return 2;
      }
      reps = r[0];
      i++;
    } else if (!strcmp(a, "--pool-mb")) {
      int r[1];
      if (pz_bench_parse_list(v, r, 1, 256, 65536) != 1) {
        fprintf(stderr, "prezero bench gemm: --pool-mb '%s' is not a size in MB in 256..65536; use e.g. --pool-mb 1024\n", v);
        return 2;
      }
      pool_mb = (size_t)r[0];
      i++;
    }
    else if (!strcmp(a, "--m")) {
      nm = pz_bench_parse_list(v, ms, 16, 1, 256);
      i++;
      if (nm <= 0) { fprintf(stderr, "prezero bench gemm: --m '%s' is not a list of batch sizes 1..256; use --m 1,4,8\n", v); return 2; }
    } else { fprintf(stderr, "prezero bench gemm: unknown option '%s'; see --help\n", a); return 2; }
  }
  /* PREZERO_BENCH_CFG=splits,wt,warps,wn pins flavours 1-3 and 5 to one kernel config (diagnostics): read
   * once here, and a malformed value is refused instead of ignored */
  int pin_cfg[4], pinned = 0;
  {
    const char *pin = getenv("PREZERO_BENCH_CFG");
    if (pin && *pin) {
      if (pz_bench_parse_list(pin, pin_cfg, 4, 0, 1 << 16) != 4) {
        fprintf(stderr, "prezero bench gemm: PREZERO_BENCH_CFG=%s: use splits,wt,warps,wn (4 integers, e.g. 2,1,5,3); "
                        "fix or unset that variable\n", pin);
        return 2;
      }
      pinned = 1;
    }
  }
  if (only) {
    int hits = 0;
    for (int si = 0; si < NSHAPES; si++) hits += shape_selected(&shapes[si], only);
    if (!hits) {
      fprintf(stderr, "prezero bench gemm: --only '%s' matches no shape; labels look like 'Kimi-K2/tp1/qkv_a'\n", only);
      return 2;
    }
  }

  if (pz_bench_need_gpus("bench gemm", "this benchmark", 1, 0)) return 1;
  pz_gemm_ctx *ctx = NULL;
  pz_status st = pz_gemm_ctx_create(&ctx);
  if (st != PZ_OK) {
    fprintf(stderr, "prezero bench gemm: %s; this benchmark needs a CUDA GPU\n", pz_last_error());
    return 1;
  }
  pz_tuner_pool pool;
  st = pz_tuner_pool_create(&pool, pool_mb << 20);
  if (st != PZ_OK) {
    fprintf(stderr, "prezero bench gemm: cannot allocate the %zu MB weight pool: %s\n", pool_mb, pz_last_error());
    pz_gemm_ctx_destroy(ctx);
    return 1;
  }
  int sms = pz_gemm_ctx_sm_count(ctx);
  printf("device: %s, %d SMs; tuner table at start: %s; weight pool %zu MB; m = ", pz_gemm_ctx_device_name(ctx), sms,
         pz_gemm_ctx_table(ctx)->source, pool_mb);
  for (int i = 0; i < nm; i++) printf("%d%s", ms[i], i + 1 < nm ? "," : "\n");

  meas *cache = calloc((size_t)NSHAPES * nm, sizeof *cache);
  int ncache = 0;
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "device", pz_gemm_ctx_device_name(ctx));
  cJSON_AddNumberToObject(root, "sm_count", sms);
  cJSON_AddStringToObject(root, "tuner_table_source", pz_gemm_ctx_table(ctx)->source);
  {
    char cmd[1024];
    pz_bench_command_line(cmd, sizeof cmd, "prezero bench", argc, argv);
    pz_bench_json_add_command_date(root, cmd);
  }
  cJSON_AddStringToObject(root, "method",
                          "CUDA graph of >= 40 launches (>= 200 MB of distinct weight copies), median of "
                          "per-replay time / launches over reps replays after one warm-up; C f32, no bias");
  cJSON_AddNumberToObject(root, "reps", reps);
  { /* the context's own switches (read once, when it was created) */
    const pz_runtime_opts *ro = pz_gemm_ctx_opts(ctx);
    cJSON_AddStringToObject(root, "PREZERO_GEMM_L2PF", !ro || ro->gemm_l2pf ? "1 (on)" : "0 (off)");
  }
  cJSON *rows = cJSON_AddArrayToObject(root, "rows");
  cJSON *skipped = cJSON_AddArrayToObject(root, "skipped"); /* shapes our GEMMs refuse, with the reason */
  FILE *md = md_path ? fopen(md_path, "w") : NULL;
  if (md_path && !md) fprintf(stderr, "prezero bench gemm: cannot write %s\n", md_path);
  if (md) {
    const cJSON *cmd = cJSON_GetObjectItem(root, "command"), *date = cJSON_GetObjectItem(root, "date");
    fprintf(md, "# prezero bench gemm\n\nDate: %s. Command: `%s`. CUDA-graph timings (µs), weights rotated so they stream "
                "from HBM; best ours = the fastest of our flavours; AUTO = what the table / heuristic resolves to.\n\n",
            cJSON_IsString(date) ? date->valuestring : "?", cJSON_IsString(cmd) ? cmd->valuestring : "?");
    fprintf(md, "| model | TP | gemm | n | k | m | MB | read µs | cuBLAS µs | atomic (1) | zero (2) | memset (3) | fullk (4) | serial (5) | best ours | best/cuBLAS | best/read | %% HBM limit | zero cost 2−1 | zero cost 3−1 | heuristic µs (its pick) | AUTO (zero_init false) |\n");
    pz_bench_md_rule(md, 22, 0);
  }
  int misses_read = 0, misses_cublas = 0, nrows = 0, heur_misses = 0;
  double heur_sum = 0, best_sum = 0;
  for (int si = 0; si < NSHAPES && st == PZ_OK; si++) {
    const shape *sh = &shapes[si];
    char label[128];
    if (!only_match(shape_label(sh, label, sizeof label), only)) continue;
    for (int mi = 0; mi < nm && st == PZ_OK; mi++) {
      const int m = ms[mi];
      meas *me = NULL;
      for (int c = 0; c < ncache; c++)
        if (cache[c].n == sh->n && cache[c].k == sh->k && cache[c].m == m) me = &cache[c];
      const double bytes = (double)sh->n * sh->k * 2;
      int iters = (int)(200e6 / bytes) + 1;
      if (iters < 40) iters = 40;
      if (iters > 256) iters = 256;
      if (!me) {
        me = &cache[ncache++];
        me->n = sh->n;
        me->k = sh->k;
        me->m = m;
        const pz_tuner_entry *te = pz_tuner_lookup(pz_gemm_ctx_table(ctx), m, sh->n, sh->k);
        if (tune || !te) st = pz_tuner_tune(ctx, &pool, m, sh->n, sh->k, &me->e);
        else me->e = *te;
        if (st == PZ_ERR_SHAPE) { /* a shape our split-K GEMMs refuse (n or k not a multiple of 64): no row */
          printf("%-22s m=%-3d n=%-5d k=%-5d skipped: %s\n", label, m, sh->n, sh->k, pz_last_error());
          cJSON *sk = cJSON_CreateObject();
          cJSON_AddStringToObject(sk, "label", label);
          cJSON_AddNumberToObject(sk, "m", m);
          cJSON_AddStringToObject(sk, "why", pz_last_error());
          cJSON_AddItemToArray(skipped, sk);
          if (md) fprintf(md, "| %s | %d | %s | %d | %d | %d | skipped: %s |\n", sh->model, sh->tp, sh->gemm, sh->n, sh->k, m,
                          pz_last_error());
          ncache--;
          st = PZ_OK;
          continue;
        }
        if (st == PZ_OK && pinned) /* PREZERO_BENCH_CFG */
          for (int f = 1; f <= 5; f++)
            if (f != PZ_GEMM_FULLK) {
              pz_gemm_config c = {(pz_gemm_flavour)f, pin_cfg[0], pin_cfg[1], pin_cfg[2], pin_cfg[3], 0};
              me->e.cfg[f] = c;
            }
        if (st == PZ_OK) st = pz_tuner_time_read(ctx, &pool, (int64_t)bytes, iters, reps, &me->read_us);
        for (int f = 1; f < PZ_GEMM_FLAVOUR_COUNT && st == PZ_OK; f++)
          if (me->e.cfg[f].splits > 0)
            st = pz_tuner_time_gemm(ctx, &pool, m, sh->n, sh->k, me->e.cfg[f], iters, reps, &me->e.us[f]);
        if (st != PZ_OK) break;
      }
      double heur_us = 0;
      char heur_tag[48] = ""; /* the heuristic's pick, e.g. "atomic s2 wt1 bn64" */
      char auto_tag[64] = "?";
      const double *us = me->e.us;
      const pz_gemm_config *cf = me->e.cfg;
      double best = 1e30;
      int bestf = 0;
      const int nz[] = {1, 4, 5};
      for (int i = 0; i < 3; i++)
        if (cf[nz[i]].splits > 0 && us[nz[i]] < best) { best = us[nz[i]]; bestf = nz[i]; }
      const double limit = bytes / (PZ_BENCH_HBM_TBPS * 1e6);
      const double cub = us[PZ_GEMM_CUBLAS];
      nrows++;
      if (best > 1.15 * me->read_us) misses_read++;
      if (best > cub) misses_cublas++;
      cJSON *r = cJSON_CreateObject();
      cJSON_AddStringToObject(r, "model", sh->model);
      cJSON_AddNumberToObject(r, "tp", sh->tp);
      cJSON_AddStringToObject(r, "gemm", sh->gemm);
      cJSON_AddNumberToObject(r, "n", sh->n);
      cJSON_AddNumberToObject(r, "k", sh->k);
      cJSON_AddNumberToObject(r, "m", m);
      cJSON_AddNumberToObject(r, "weight_bytes", bytes);
      cJSON_AddNumberToObject(r, "launches_per_graph", iters);
      cJSON_AddNumberToObject(r, "read_us", me->read_us);
      cJSON_AddNumberToObject(r, "hbm_limit_us", limit);
      cJSON *fl = cJSON_AddObjectToObject(r, "flavours");
      for (int f = 1; f < PZ_GEMM_FLAVOUR_COUNT; f++) {
        if (cf[f].splits <= 0) continue;
        cJSON *o = cJSON_AddObjectToObject(fl, pz_gemm_flavour_name((pz_gemm_flavour)f));
        cJSON_AddNumberToObject(o, "us", us[f]);
        cJSON_AddNumberToObject(o, "splits", cf[f].splits);
        cJSON_AddNumberToObject(o, "wt", cf[f].wt);
        cJSON_AddNumberToObject(o, "warps", cf[f].warps);
        cJSON_AddNumberToObject(o, "wn", cf[f].wn);
        if (cf[f].bn) cJSON_AddNumberToObject(o, "bn", cf[f].bn); /* the wgmma kernel's token tile, when tuned below m */
        cJSON_AddStringToObject(o, "kernel", kernel_name(&cf[f]));
      }
      /* What AUTO resolves to for this shape now (after this run's tuning), for both zero_init. */
      for (int zi = 0; zi < 2; zi++) {
        pz_gemm_config ac;
        bool sk = false;
        if (pz_gemm_choose(ctx, m, sh->n, sh->k, zi == 1, &ac, &sk) != PZ_OK) continue;
        cJSON *o = cJSON_AddObjectToObject(r, zi ? "auto_zero_init" : "auto_prezero");
        cJSON_AddStringToObject(o, "flavour", pz_gemm_flavour_name(ac.flavour));
        cJSON_AddStringToObject(o, "kernel", kernel_name(&ac));
        cJSON_AddNumberToObject(o, "splits", ac.splits);
        if (ac.bn) cJSON_AddNumberToObject(o, "bn", ac.bn);
        cJSON_AddBoolToObject(o, "split_k", sk);
        if (zi == 0) {
          char tile[16] = "";
          if (ac.bn) snprintf(tile, sizeof tile, " bn%d", ac.bn);
          snprintf(auto_tag, sizeof auto_tag, "%s %s s%d%s%s", kernel_name(&ac),
                   pz_gemm_flavour_name(ac.flavour), ac.splits, tile, sk ? " split-K" : "");
        }
      }
      cJSON_AddNumberToObject(r, "flop_limit_us_660tf", 2.0 * m * sh->n * sh->k / 660e6);
      /* The table-free heuristic's own pick (what a device without a table runs), same method. */
      {
        pz_gemm_config hc = pz_gemm_heuristic(sms, m, sh->n, sh->k, false, pz_gemm_ctx_has_wgmma(ctx));
        double hus = 0;
        /* The very config a flavour column timed: that timing (the same kernel and launch, timed
         * once), so run-to-run noise cannot make the heuristic look worse than the tuned choice it
         * equals; any other pick is timed here. */
        int same = 0;
        for (int f = 1; f < PZ_GEMM_FLAVOUR_COUNT && !same; f++)
          if (cf[f].splits > 0 && (pz_gemm_flavour)f == hc.flavour && cf[f].splits == hc.splits && cf[f].wt == hc.wt &&
              cf[f].wn == hc.wn && cf[f].bn == hc.bn && (hc.wn == 4 || (hc.wn == 3 ? pz_gemm_wgmma_token_split(&cf[f]) == pz_gemm_wgmma_token_split(&hc)
                                                           : cf[f].warps == hc.warps))) {
            same = 1;
            hus = us[f];
          }
        if (same || pz_tuner_time_gemm(ctx, &pool, m, sh->n, sh->k, hc, iters, reps, &hus) == PZ_OK) {
          cJSON *o = cJSON_AddObjectToObject(r, "heuristic");
          cJSON_AddStringToObject(o, "timed", same ? "the flavour column's timing (same config)" : "own timing");
          cJSON_AddStringToObject(o, "flavour", pz_gemm_flavour_name(hc.flavour));
          cJSON_AddNumberToObject(o, "splits", hc.splits);
          cJSON_AddNumberToObject(o, "wt", hc.wt);
          cJSON_AddNumberToObject(o, "wn", hc.wn);
          if (hc.bn) cJSON_AddNumberToObject(o, "bn", hc.bn); /* its token tile, when below m */
          cJSON_AddNumberToObject(o, "us", hus);
          cJSON_AddNumberToObject(o, "over_best", hus / best);
          heur_sum += hus;
          best_sum += best;
          if (hus > 1.10 * best) heur_misses++;
          heur_us = hus;
          char tile[16] = "";
          if (hc.bn) snprintf(tile, sizeof tile, " bn%d", hc.bn);
          snprintf(heur_tag, sizeof heur_tag, "%s s%d wt%d%s", pz_gemm_flavour_name(hc.flavour), hc.splits, hc.wt, tile);
        }
      }
      cJSON_AddStringToObject(r, "best_ours", pz_gemm_flavour_name((pz_gemm_flavour)bestf));
      cJSON_AddNumberToObject(r, "best_ours_us", best);
      cJSON_AddNumberToObject(r, "best_over_cublas", best / cub);
      cJSON_AddNumberToObject(r, "best_over_read", best / me->read_us);
      cJSON_AddNumberToObject(r, "pct_hbm_limit", 100.0 * limit / best);
      cJSON_AddNumberToObject(r, "zero_cost_2_minus_1_us", us[2] - us[1]);
      cJSON_AddNumberToObject(r, "zero_cost_3_minus_1_us", us[3] - us[1]);
      cJSON_AddItemToArray(rows, r);
      printf("%-22s m=%-3d n=%-5d k=%-5d read %6.2f cublas %6.2f | 1:%6.2f(s%d,w%d,x%d%s,b%d) 2:%6.2f 3:%6.2f 4:%6.2f 5:%6.2f | best %-6s %6.2f  /cublas %.2f /read %.2f  HBM %3.0f%%  z2 %+.2f z3 %+.2f heur %.2f (%s)\n",
             label, m, sh->n, sh->k, me->read_us, cub, us[1], cf[1].splits, cf[1].wt, cf[1].warps, kern_tag(cf[1].wn), cf[1].bn, us[2], us[3], us[4], us[5],
             pz_gemm_flavour_name((pz_gemm_flavour)bestf), best, best / cub, best / me->read_us, 100.0 * limit / best,
             us[2] - us[1], us[3] - us[1], heur_us, heur_tag);
      fflush(stdout);
      if (md)
        fprintf(md, "| %s | %d | %s | %d | %d | %d | %.1f | %.2f | %.2f | %.2f (s%d w%d x%d%s b%d) | %.2f (s%d) | %.2f | %.2f | %.2f (s%d) | %s %.2f | %.2f | %.2f | %.0f%% | %+.2f | %+.2f | %.2f (%s) | %s |\n",
                sh->model, sh->tp, sh->gemm, sh->n, sh->k, m, bytes / 1e6, me->read_us, cub, us[1], cf[1].splits,
                cf[1].wt, cf[1].warps, kern_tag(cf[1].wn), cf[1].bn, us[2], cf[2].splits, us[3], us[4], us[5], cf[5].splits, pz_gemm_flavour_name((pz_gemm_flavour)bestf),
                best, best / cub, best / me->read_us, 100.0 * limit / best, us[2] - us[1], us[3] - us[1], heur_us, heur_tag, auto_tag);
    }
  }
  int rc = 0;
  if (st != PZ_OK) {
    fprintf(stderr, "prezero bench gemm: %s: %s\n", pz_status_string(st), pz_last_error());
    rc = 1;
  } else {
    printf("rows %d: best ours > 1.15 x read on %d, slower than cuBLAS on %d; heuristic > 1.10 x best on %d (sum %.1f vs %.1f us)\n",
           nrows, misses_read, misses_cublas, heur_misses, heur_sum, best_sum);
    cJSON_AddNumberToObject(root, "rows_heuristic_over_1.10x_best", heur_misses);
    cJSON_AddNumberToObject(root, "rows_over_1.15x_read", misses_read);
    cJSON_AddNumberToObject(root, "rows_slower_than_cublas", misses_cublas);
    if (tune) {
      pz_status s2 = pz_tuner_save(pz_gemm_ctx_table(ctx));
      if (s2 == PZ_OK) printf("tuner table: %s\n", pz_gemm_ctx_table(ctx)->path);
      else fprintf(stderr, "prezero bench gemm: %s\n", pz_last_error());
    }
    cJSON_AddItemToObject(root, "tuner_table", pz_tuner_to_json(pz_gemm_ctx_table(ctx)));
  }
  if (json_path && pz_bench_write_json(root, json_path, 0) != 0) {
    fprintf(stderr, "prezero bench gemm: cannot write %s\n", json_path);
    rc = 1;
  }
  if (md) {
    fprintf(md, "\nBest ours = fastest of the flavours that need no zeroing in the kernel (atomic with a pre-zeroed C, fullk, serial). "
                "read = plain 16-byte streaming read of the same bytes in the same run. HBM limit = bytes / %.1f TB/s.\n", PZ_BENCH_HBM_TBPS);
    fclose(md);
  }
  cJSON_Delete(root);
  free(cache);
  pz_tuner_pool_destroy(&pool);
  pz_gemm_ctx_destroy(ctx);
  return rc;
}
int pz_cmd_tune(int argc, char **argv) {
  const char *only = NULL;
  int ms[16] = {1, 2, 4, 8, 16, 32, 64, 128, 256}, nm = 9;
  size_t pool_mb = 1024;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) { tune_usage(stdout); return 0; }
    else if (strcmp(a, "--only") && strcmp(a, "--pool-mb") && strcmp(a, "--m")) {
      fprintf(stderr, "prezero tune: unknown option '%s'; see --help\n", a);
      return 2;
    } else if (!v) { fprintf(stderr, "prezero tune: %s needs a value; see --help\n", a); return 2; }
    else if (!strcmp(a, "--only")) { only = v; i++; }
    else if (!strcmp(a, "--pool-mb")) {
      long long mb = 0;
      if (pz_cli_parse_int("tune", "--pool-mb", v, 256, 65536, &mb)) return PZ_CLI_EXIT_USAGE; /* the weight pool, MB */
      pool_mb = (size_t)mb;
      i++;
    } else if (!strcmp(a, "--m")) {
      nm = pz_bench_parse_list(v, ms, 16, 1, 256);
      i++;
      if (nm <= 0) {
        fprintf(stderr, "prezero tune: --m %s is not a list of batch sizes 1..256; write it like --m 1,4,8\n", v);
        return 2;
      }
    }
  }
  if (pz_bench_need_gpus("tune", "tuning", 1, 0)) return 1;
  pz_gemm_ctx *ctx = NULL;
  if (pz_gemm_ctx_create(&ctx) != PZ_OK) {
    fprintf(stderr, "prezero tune: %s; tuning needs a CUDA GPU\n", pz_last_error());
    return 1;
  }
  pz_tuner_pool pool;
  if (pz_tuner_pool_create(&pool, pool_mb << 20) != PZ_OK) {
    fprintf(stderr, "prezero tune: cannot allocate the %zu MB weight pool: %s; try a smaller --pool-mb\n", pool_mb, pz_last_error());
    pz_gemm_ctx_destroy(ctx);
    return 1;
  }
  /* Distinct (n, k) of the selected rows. */
  int nk[NSHAPES][2], nu = 0;
  for (int si = 0; si < NSHAPES; si++) {
    if (!shape_selected(&shapes[si], only)) continue;
    int dup = 0;
    for (int u = 0; u < nu; u++) dup |= nk[u][0] == shapes[si].n && nk[u][1] == shapes[si].k;
    if (!dup) { nk[nu][0] = shapes[si].n; nk[nu][1] = shapes[si].k; nu++; }
  }
  if (nu == 0) {
    fprintf(stderr, "prezero tune: --only '%s' matches no shape; labels look like 'Kimi-K2/tp1/qkv_a'\n", only);
    pz_tuner_pool_destroy(&pool);
    pz_gemm_ctx_destroy(ctx);
    return 2;
  }
  printf("tuning %d shapes x %d batch sizes on %s (%d SMs; table before: %s)\n", nu, nm, pz_gemm_ctx_device_name(ctx),
         pz_gemm_ctx_sm_count(ctx), pz_gemm_ctx_table(ctx)->source);
  pz_status st = PZ_OK;
  const int total = nu * nm;
  int skipped = 0;
  for (int u = 0, done = 0; u < nu && st == PZ_OK; u++)
    for (int mi = 0; mi < nm && st == PZ_OK; mi++) {
      pz_tuner_entry e;
      st = pz_tuner_tune(ctx, &pool, ms[mi], nk[u][0], nk[u][1], &e);
      done++;
      if (st == PZ_ERR_SHAPE) { /* a shape our split-K GEMMs refuse (n or k not a multiple of 64): say so, keep the rest */
        printf("[%3d/%d] n=%-5d k=%-5d m=%-3d skipped: %s\n", done, total, nk[u][0], nk[u][1], ms[mi], pz_last_error());
        skipped++;
        st = PZ_OK;
        continue;
      }
      if (st != PZ_OK) break;
      const pz_gemm_config *c = &e.cfg[e.best_nozero];
      printf("[%3d/%d] n=%-5d k=%-5d m=%-3d best %s (%s, %d splits) %.2f us, cuBLAS %.2f us\n", done, total, nk[u][0],
             nk[u][1], ms[mi], pz_gemm_flavour_name(e.best_nozero),
             kernel_name(c), c->splits,
             e.us[e.best_nozero], e.us[PZ_GEMM_CUBLAS]);
      fflush(stdout);
    }
  int rc = 0;
  if (st == PZ_OK) st = pz_tuner_save(pz_gemm_ctx_table(ctx));
  if (st != PZ_OK) {
    fprintf(stderr, "prezero tune: %s\n", pz_last_error());
    rc = 1;
  } else {
    printf("tuner table: %s\n", pz_gemm_ctx_table(ctx)->path);
    if (skipped)
      printf("%d of %d (shape, m) skipped (see above): no split-K GEMM runs there (an MLP of that shape takes its fused "
             "kernel, another GEMM the any-shape kernel)\n", skipped, total);
  }
  pz_tuner_pool_destroy(&pool);
  pz_gemm_ctx_destroy(ctx);
  return rc;
}
#else
int pz_cmd_bench_gemm(int argc, char **argv) {
  return pz_bench_no_cuda("bench gemm", argc, argv, usage);
}
int pz_cmd_tune(int argc, char **argv) {
  return pz_bench_no_cuda("tune", argc, argv, tune_usage);
}
#endif
